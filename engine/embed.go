package engine

// Hidden states instead of logits, for embedding models (Qwen3-Embedding:
// last-token pooling of the final-normed hidden state). Model.Embed is
// Model.Forward with the LM head left out; it is kept in its own file (and
// repeats Forward's batch assembly) so that Forward stays as it is.

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoLMHead is returned (wrapped) by Forward of a model loaded from a
// checkpoint without an LM head (a base-model layout such as
// Qwen3-Embedding's): such a model serves Embed only.
var ErrNoLMHead = errors.New("model has no LM head")

// HiddenArch is implemented by architectures that can stop before the LM
// head. It is optional: Embed fails with a clear error without it.
type HiddenArch interface {
	// ForwardHidden runs the batch like Forward and returns the hidden
	// states after the final norm, [len(b.Outputs), HiddenSize()].
	// The caller releases the returned tensor.
	ForwardHidden(b *Batch) (Tensor, error)
	HiddenSize() int
}

// CanEmbed reports whether the model's architecture supports Embed.
func (m *Model) CanEmbed() bool {
	_, ok := m.arch.(HiddenArch)
	return ok
}

// HiddenSize is the width of Embed's vectors (0 if the architecture does
// not support Embed).
func (m *Model) HiddenSize() int {
	if h, ok := m.arch.(HiddenArch); ok {
		return h.HiddenSize()
	}
	return 0
}

// Embed is Forward returning, per sequence, the final-normed hidden states
// [n × HiddenSize] instead of logits, with n = 1 (last token) or
// len(Tokens) (AllLogits). The tokens are appended to the caches as by
// Forward; on error the caches are left as they were.
func (m *Model) Embed(ctx context.Context, seqs []Seq) ([][]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !m.whole() {
		return nil, m.stageErr("embed")
	}
	ha, ok := m.arch.(HiddenArch)
	if !ok {
		return nil, fmt.Errorf("embed: model_type %q does not support hidden-state output", m.cfg.ModelType)
	}
	return m.runBatch(seqs, "embed", ha.HiddenSize(), ha.ForwardHidden)
}

// StageHiddenArch is implemented by architectures whose last pipeline
// stage can stop before the LM head, so that a pipelined model serves
// embeddings (Model.EmbedStage). Optional, like HiddenArch.
type StageHiddenArch interface {
	// ForwardStageHidden is ForwardStage on the last stage returning the
	// final-normed hidden states of b.Outputs, [len(b.Outputs),
	// HiddenSize()], instead of their logits; in is as for ForwardStage
	// (the caller releases it and the result, once).
	ForwardStageHidden(b *Batch, in Tensor) (Tensor, error)
}

// EmbedStage is Embed on the last stage of a pipeline: in is the previous
// stage's StageOutput.Hidden for the same seqs, and the result per
// sequence the final-normed hidden states of its last token (every token
// with AllLogits), [n × HiddenSize]. The stages before it run ForwardStage
// as for any pass; the chain then computes the whole model's ops on the
// same values, so the vectors are Embed's bit for bit. On a whole model
// (in nil) it is Embed. On error the caches are left as they were.
func (m *Model) EmbedStage(ctx context.Context, seqs []Seq, in []float32) ([][]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch {
	case m.whole() && in == nil:
		return m.Embed(ctx, seqs)
	case !m.IsLastStage():
		return nil, fmt.Errorf("embed stage: %v of %d is not the last stage (it runs ForwardStage)", m.stage, m.cfg.NumHiddenLayers)
	case m.IsFirstStage() || in == nil:
		return nil, fmt.Errorf("embed stage: %v needs the previous stage's hidden states", m.stage)
	}
	sha, ok := m.arch.(StageHiddenArch)
	sa, ok2 := m.arch.(StageArch)
	if !ok || !ok2 {
		return nil, fmt.Errorf("embed stage: model_type %q does not support hidden-state output on a pipeline stage", m.cfg.ModelType)
	}
	H := sa.HiddenSize()
	return m.runBatch(seqs, "embed stage", H, func(b *Batch) (Tensor, error) {
		if len(in) != len(b.Tokens)*H {
			return nil, fmt.Errorf("hidden states: %d values, want %d rows × %d", len(in), len(b.Tokens), H)
		}
		t := m.be.NewTensor(len(b.Tokens), H)
		m.be.Write(t, in)
		res, err := sha.ForwardStageHidden(b, t)
		if err != nil || res != t {
			m.be.Release(t) // unless it came back as the result (released by the caller)
		}
		return res, err
	})
}
