package qwen

import (
	"fmt"

	"github.com/macpool/macpool/engine"
)

// Forward runs the decoder and returns the logits of the output rows.
// A base-model checkpoint (no lm_head.weight, untied: the Qwen3Model layout
// of Qwen3-Embedding-4B/8B) loads for embeddings only; asking it for logits
// is an error.
func (m *Dense) Forward(bt *engine.Batch) (engine.Tensor, error) { return m.ForwardStage(bt, nil) }

// ForwardStage runs the stage's layers (engine.StageArch): from in (nil on
// the first stage: the embedded tokens) to the residual stream of every row
// on a stage that is not the last, to the logits of the output rows on the
// last.
func (m *Dense) ForwardStage(bt *engine.Batch, in engine.Tensor) (engine.Tensor, error) {
	last := m.Norm != nil
	if last && m.LMHead == nil {
		return nil, fmt.Errorf("%w: checkpoint has no lm_head.weight and tie_word_embeddings is false (a base-model / embedding checkpoint)", engine.ErrNoLMHead)
	}
	x, err := m.layers(bt, in)
	if err != nil || !last {
		return x, err
	}
	if x != in {
		defer m.be.Release(x)
	}
	sel := m.finalNorm(bt, x)
	defer m.be.Release(sel)
	logits := m.be.NewTensor(len(bt.Outputs), m.Vocab)
	m.be.MatMul(logits, sel, m.LMHead, nil)
	return logits, nil
}

// ForwardStageHidden is ForwardStage on the last stage stopping at the
// final norm (engine.StageHiddenArch): the hidden states of the output
// rows, as ForwardHidden computes them for a whole model.
func (m *Dense) ForwardStageHidden(bt *engine.Batch, in engine.Tensor) (engine.Tensor, error) {
	if m.Norm == nil {
		return nil, fmt.Errorf("stage %v is not the last: it has no final norm", m.Stage)
	}
	x, err := m.layers(bt, in)
	if err != nil {
		return nil, err
	}
	if x != in {
		defer m.be.Release(x)
	}
	return m.finalNorm(bt, x), nil
}

// HiddenSize is the width of ForwardHidden's rows and of a stage's hidden
// states.
func (m *Dense) HiddenSize() int { return m.Hidden }

// WeightBytes is the stored size of the weights bound (engine.WeightSizer).
func (m *Dense) WeightBytes() int64 { return m.bytes }

var (
	_ engine.HiddenArch      = (*Dense)(nil)
	_ engine.StageArch       = (*Dense)(nil)
	_ engine.StageHiddenArch = (*Dense)(nil)
	_ engine.WeightSizer     = (*Dense)(nil)
)
