package engine

// Pipeline stages. A model too big for one machine runs as a chain of
// stages, each a Model loaded with Options.Stage (or NewStage) holding the
// decoder layers [First, Last) and only their weights: the first stage also
// the token embedding, the last the final norm and the LM head (Stage.NoHead
// leaves those to a head-only stage). A batch goes
// through the chain with ForwardStage: the first stage takes token ids and
// returns the hidden states leaving its last layer, every further stage
// takes those and returns its own, and the last returns logits.
//
// Every stage receives the same seqs (same tokens, same PromptEnd, same
// batch composition and order) and keeps the caches of its own layers only
// (per-sequence or paged, each stage with its own KVPool). The hand-off is
// float32, the activations' own precision, so the chain computes exactly
// the ops of the whole model on the same values: its logits are the whole
// model's bit for bit on the same backend and kernels (engine/qwen
// TestPipelineLogits). Prompt chunking must follow the whole model's
// PrefillAlign on every stage (a stage without linear-attention layers
// reports the model's alignment too), and with prefix caching the caller
// must attach the same prefix length on every stage (pools evict
// independently: take the minimum and Truncate the others).

import (
	"context"
	"errors"
	"fmt"

	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/tensor"
)

// Stage is a range of decoder layers [First, Last) (checkpoint.Stage: Last
// 0 means every layer to the end; the zero value is the whole model).
type Stage = checkpoint.Stage

// ErrStage is wrapped by the errors of calls a pipeline stage cannot serve
// alone (Forward, Embed, Generate on a stage that is not the whole model).
var ErrStage = errors.New("model is a pipeline stage")

// StageArch is implemented by architectures that can run as a pipeline
// stage. An architecture learns its stage from its Source (StageOf).
type StageArch interface {
	// ForwardStage runs the stage's layers over the batch. in is
	// [len(b.Tokens), HiddenSize()] holding the hidden states entering the
	// stage's first layer, or nil on the first stage, which embeds
	// b.Tokens; the arch may overwrite in and return it as its result (the
	// caller releases it either way, once). A stage that is not the last
	// returns the hidden states leaving its last layer for every row,
	// [len(b.Tokens), HiddenSize()]; the last stage returns the logits of
	// b.Outputs, as Forward. The caller releases the result.
	ForwardStage(b *Batch, in Tensor) (Tensor, error)
	HiddenSize() int
}

// WeightSizer is implemented by architectures that know the bytes of the
// weights they uploaded, as stored in the checkpoint (Model.WeightBytes).
type WeightSizer interface {
	WeightBytes() int64
}

// StageOf is the stage a Source holds, resolved against its config
// ([0, NumHiddenLayers) for a source that is not a stage). Architectures
// call it at bind time and bind only the tensors of that stage.
func StageOf(src Source) Stage {
	n := src.Config().NumHiddenLayers
	if s, ok := src.(interface{ Stage() Stage }); ok {
		if r, err := s.Stage().Resolve(n); err == nil {
			return r
		}
	}
	return Stage{First: 0, Last: n}
}

// stageSource restricts a Source to the tensors of one stage, so an
// architecture that asks for another stage's tensor fails to load.
type stageSource struct {
	src     Source
	stage   Stage
	hasHead bool
}

func (s *stageSource) Config() *Config { return s.src.Config() }
func (s *stageSource) Stage() Stage    { return s.stage }

func (s *stageSource) holds(name string) bool {
	return s.stage.Holds(name, s.src.Config().NumHiddenLayers, s.hasHead)
}

func (s *stageSource) Has(name string) bool { return s.holds(name) && s.src.Has(name) }

func (s *stageSource) Tensor(name string) (*tensor.Host, error) {
	if !s.holds(name) {
		return nil, fmt.Errorf("tensor %s: not held by stage %v: %w", name, s.stage, checkpoint.ErrNoTensor)
	}
	return s.src.Tensor(name)
}

// NewStage is New binding only stage st of src's model (see Stage). src may
// be a whole checkpoint (it is then filtered) or one opened with
// checkpoint.OpenStage for the same stage.
func NewStage(be Backend, src Source, st Stage) (*Model, error) {
	r, err := st.Resolve(src.Config().NumHiddenLayers)
	if err != nil {
		return nil, err
	}
	if cur := StageOf(src); cur != r {
		whole := Stage{First: 0, Last: src.Config().NumHiddenLayers}
		if cur != whole {
			return nil, fmt.Errorf("stage %v: source holds only %v", r, cur)
		}
		src = &stageSource{src: src, stage: r, hasHead: src.Has("lm_head.weight")}
	}
	return New(be, src)
}

// Stage is the stage the model holds ([0, NumHiddenLayers) for a whole
// model).
func (m *Model) Stage() Stage { return m.stage }

// IsFirstStage says whether the model embeds tokens (stage starts at layer 0).
func (m *Model) IsFirstStage() bool { return m.stage.IsFirst() }

// IsLastStage says whether the model ends with the LM head.
func (m *Model) IsLastStage() bool { return m.stage.IsLast(m.cfg.NumHiddenLayers) }

// whole says whether the model is not split.
func (m *Model) whole() bool { return m.IsFirstStage() && m.IsLastStage() }

func (m *Model) stageErr(op string) error {
	return fmt.Errorf("%s: %w holding %v of %d: use ForwardStage", op, ErrStage, m.stage, m.cfg.NumHiddenLayers)
}

// WeightBytes is the size of the weights the model bound, as stored in the
// checkpoint (a stage: its share); 0 if the architecture does not say.
func (m *Model) WeightBytes() int64 {
	if ws, ok := m.arch.(WeightSizer); ok {
		return ws.WeightBytes()
	}
	return 0
}

// StageOutput is the result of ForwardStage.
type StageOutput struct {
	// Hidden (a stage that is not the last) is the batch's hidden states
	// leaving the stage, [T × HiddenSize] row-major with T the sum of
	// len(Tokens), rows in seqs order: the next stage's in.
	Hidden []float32
	// Logits and Tokens (the last stage) are as ForwardGreedy's: logits
	// per sequence ([n × VocabSize], n = 1 or len(Tokens) with AllLogits),
	// and the argmax of sequences with Seq.Greedy (-1 for the others;
	// their Logits entry may then be nil).
	Logits [][]float32
	Tokens []int
}

// ForwardStage is Forward for a pipeline stage: it appends each sequence's
// tokens to its cache (the stage's layers) and runs the stage's layers.
// in is the previous stage's StageOutput.Hidden for the same seqs (nil on
// the first stage, which embeds the tokens). On a whole model it is
// ForwardGreedy. On error the caches are left as they were.
func (m *Model) ForwardStage(ctx context.Context, seqs []Seq, in []float32) (StageOutput, error) {
	if err := ctx.Err(); err != nil {
		return StageOutput{}, err
	}
	sa, ok := m.arch.(StageArch)
	if !ok {
		if !m.whole() || in != nil {
			return StageOutput{}, fmt.Errorf("forward stage: model_type %q cannot run as a pipeline stage", m.cfg.ModelType)
		}
		out, toks, err := m.runBatchGreedy(seqs, "forward", m.arch.VocabSize(), true, m.arch.Forward)
		return StageOutput{Logits: out, Tokens: toks}, err
	}
	switch {
	case m.IsFirstStage() && in != nil:
		return StageOutput{}, fmt.Errorf("forward stage: %v is the first stage: it takes tokens, not hidden states", m.stage)
	case !m.IsFirstStage() && in == nil:
		return StageOutput{}, fmt.Errorf("forward stage: %v needs the previous stage's hidden states", m.stage)
	}
	H := sa.HiddenSize()
	run := func(b *Batch) (Tensor, error) {
		var t Tensor
		if in != nil {
			if len(in) != len(b.Tokens)*H {
				return nil, fmt.Errorf("hidden states: %d values, want %d rows × %d", len(in), len(b.Tokens), H)
			}
			t = m.be.NewTensor(len(b.Tokens), H)
			m.be.Write(t, in)
		}
		res, err := sa.ForwardStage(b, t)
		if t != nil && (err != nil || res != t) {
			m.be.Release(t) // unless it came back as the result (released by the caller)
		}
		return res, err
	}
	if !m.IsLastStage() {
		flat, err := m.runBatchRows(seqs, "forward stage", H, run)
		return StageOutput{Hidden: flat}, err
	}
	out, toks, err := m.runBatchGreedy(seqs, "forward stage", m.arch.VocabSize(), true, run)
	return StageOutput{Logits: out, Tokens: toks}, err
}
