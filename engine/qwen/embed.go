package qwen

import (
	"fmt"

	"github.com/macpool/macpool/engine"
)

// Forward runs the decoder and returns the logits of the output rows.
// A base-model checkpoint (no lm_head.weight, untied: the Qwen3Model layout
// of Qwen3-Embedding-4B/8B) loads for embeddings only; asking it for logits
// is an error.
func (m *Dense) Forward(bt *engine.Batch) (engine.Tensor, error) {
	if m.LMHead == nil {
		return nil, fmt.Errorf("%w: checkpoint has no lm_head.weight and tie_word_embeddings is false (a base-model / embedding checkpoint)", engine.ErrNoLMHead)
	}
	sel, err := m.ForwardHidden(bt)
	if err != nil {
		return nil, err
	}
	defer m.be.Release(sel)
	logits := m.be.NewTensor(len(bt.Outputs), m.Vocab)
	m.be.MatMul(logits, sel, m.LMHead, nil)
	return logits, nil
}

// HiddenSize is the width of ForwardHidden's rows.
func (m *Dense) HiddenSize() int { return m.Hidden }

var _ engine.HiddenArch = (*Dense)(nil)
