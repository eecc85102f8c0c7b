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
