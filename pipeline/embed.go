package pipeline

// Embeddings of a pipelined model. The runner's embedding passes
// (runner.PassSeq.Embed) travel the ring like any pass: every stage but the
// last runs ForwardStage, the last runs engine.Model.EmbedStage and returns
// each sequence's final-normed hidden state as its result row, so the
// vectors are the whole model's bit for bit. Sequences of one frame are
// either all embedding passes (the runner sends them alone) or, should
// passes be merged, split into two engine passes on the last stage (each
// sequence's rows do not depend on the others in its batch), the
// embedding rows padded to the logits rows' width.

import (
	"context"
	"fmt"

	"github.com/macpool/macpool/engine"
)

// embedSeq makes an embedding sequence new to this stage with the cache a
// whole model's embeddings use (per sequence, outside the KV pool: the
// runner's embed.go), so that its attention runs the same kernels.
func (m *Member) embedSeq(seqs map[uint64]*stageSeq, s Seq) error {
	if !s.Embed || seqs[s.ID] != nil {
		return nil
	}
	c, err := m.cfg.Model.NewCache()
	if err != nil {
		return fmt.Errorf("sequence %d: %w", s.ID, err)
	}
	seqs[s.ID] = &stageSeq{cache: c}
	return nil
}

// stagePass runs a data frame's sequences es through the stage's model:
// ForwardStage, and on the last stage EmbedStage for the sequences marked
// Embed (their Logits entry is then the hidden state, Tokens -1).
func (m *Member) stagePass(ctx context.Context, es []engine.Seq, f *Frame) (engine.StageOutput, error) {
	var emb, rest []int
	for i, s := range f.Seqs {
		if s.Embed {
			emb = append(emb, i)
		} else {
			rest = append(rest, i)
		}
	}
	if !m.last || len(emb) == 0 {
		return m.cfg.Model.ForwardStage(ctx, es, f.Hidden)
	}
	if len(rest) == 0 {
		rows, err := m.cfg.Model.EmbedStage(ctx, es, f.Hidden)
		return engine.StageOutput{Logits: rows, Tokens: minusOnes(len(es))}, err
	}
	// Mixed: each part with its rows of the incoming hidden states.
	cols := f.Cols
	offs := make([]int, len(f.Seqs)+1)
	for i, s := range f.Seqs {
		offs[i+1] = offs[i] + len(s.Tokens)*cols
	}
	part := func(idx []int) ([]engine.Seq, []float32) {
		ps := make([]engine.Seq, len(idx))
		var in []float32
		for j, i := range idx {
			ps[j] = es[i]
			in = append(in, f.Hidden[offs[i]:offs[i+1]]...)
		}
		return ps, in
	}
	out := engine.StageOutput{Logits: make([][]float32, len(es)), Tokens: minusOnes(len(es))}
	ps, in := part(rest)
	o, err := m.cfg.Model.ForwardStage(ctx, ps, in)
	if err != nil {
		return out, err
	}
	for j, i := range rest {
		out.Logits[i], out.Tokens[i] = o.Logits[j], o.Tokens[j]
	}
	ps, in = part(emb)
	rows, err := m.cfg.Model.EmbedStage(ctx, ps, in)
	if err != nil {
		// The other part's tokens are in its caches: the stage is out of
		// step with the head, which fails the pass (and the ring) anyway.
		return out, fmt.Errorf("embedding part of a merged pass: %w", err)
	}
	// A result frame's rows have one width: embedding rows, narrower than
	// the logits rows beside them, are padded with zeros (the runner reads
	// the first HiddenSize values).
	w := 0
	for _, i := range rest {
		w = max(w, len(out.Logits[i]))
	}
	for j, i := range emb {
		out.Logits[i] = rows[j]
		if len(rows[j]) < w {
			out.Logits[i] = append(rows[j][:len(rows[j]):len(rows[j])], make([]float32, w-len(rows[j]))...)
		}
	}
	return out, nil
}

func minusOnes(n int) []int {
	t := make([]int, n)
	for i := range t {
		t[i] = -1
	}
	return t
}
