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
	ha, ok := m.arch.(HiddenArch)
	if !ok {
		return nil, fmt.Errorf("embed: model_type %q does not support hidden-state output", m.cfg.ModelType)
	}
	width := ha.HiddenSize()
	vocab := m.arch.VocabSize()
	b := &Batch{Seqs: make([]BatchSeq, len(seqs))}
	seen := make(map[*Cache]bool, len(seqs))
	for i, s := range seqs {
		switch {
		case s.Cache == nil || s.Cache.freed:
			return nil, fmt.Errorf("embed: sequence %d has no cache (nil or freed)", i)
		case s.Cache.m != m:
			return nil, fmt.Errorf("embed: sequence %d: cache belongs to another model", i)
		case seen[s.Cache]:
			return nil, fmt.Errorf("embed: sequence %d: cache used twice in one batch", i)
		case len(s.Tokens) == 0:
			return nil, fmt.Errorf("embed: sequence %d has no tokens", i)
		}
		seen[s.Cache] = true
		for _, id := range s.Tokens {
			if id < 0 || id >= vocab {
				return nil, fmt.Errorf("embed: sequence %d: token id %d out of range [0,%d)", i, id, vocab)
			}
		}
		row, pos := len(b.Tokens), s.Cache.n
		b.Seqs[i] = BatchSeq{Layers: s.Cache.layers, Row: row, N: len(s.Tokens), Pos: pos}
		b.Tokens = append(b.Tokens, s.Tokens...)
		for j := range s.Tokens {
			b.Positions = append(b.Positions, pos+j)
		}
		if s.AllLogits {
			for j := range s.Tokens {
				b.Outputs = append(b.Outputs, row+j)
			}
		} else {
			b.Outputs = append(b.Outputs, row+len(s.Tokens)-1)
		}
	}
	for i, s := range seqs {
		if err := s.Cache.Reserve(len(s.Tokens)); err != nil {
			for _, r := range seqs[:i] {
				if r.Cache.paged != nil {
					r.Cache.paged.trimBlocks(r.Cache.n)
				}
			}
			return nil, fmt.Errorf("embed: sequence %d: %w", i, err)
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	hidden, err := ha.ForwardHidden(b)
	var flat []float32
	if err == nil {
		flat = make([]float32, len(b.Outputs)*width)
		err = m.be.Read(hidden, flat)
		m.be.Release(hidden)
	}
	if err != nil {
		for i, s := range seqs {
			for _, l := range b.Seqs[i].Layers {
				l.Truncate(s.Cache.n) // undo partial writes; best effort
			}
			if s.Cache.paged != nil {
				s.Cache.paged.trimBlocks(s.Cache.n)
			}
		}
		return nil, fmt.Errorf("embed: %w", err)
	}
	out := make([][]float32, len(seqs))
	off := 0
	for i, s := range seqs {
		n := 1
		if s.AllLogits {
			n = len(s.Tokens)
		}
		out[i] = flat[off*width : (off+n)*width : (off+n)*width]
		off += n
		s.Cache.n += len(s.Tokens)
		if s.Cache.paged != nil {
			s.Cache.paged.appended(s.Tokens)
		}
	}
	return out, nil
}
