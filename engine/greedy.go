package engine

import (
	"context"
	"fmt"
)

// ArgmaxOps is optionally implemented by backends that can pick greedy
// tokens on the device (metal): a greedy decode step then reads back one
// token id per sequence instead of a row of VocabSize logits.
type ArgmaxOps interface {
	// Argmax waits for all enqueued ops and sets dst[r] to the index of the
	// largest value of row r of t, the lowest index on ties (as Argmax).
	Argmax(t Tensor, dst []int) error
}

// ForwardGreedy is Forward for batches in which some sequences decode
// greedily (Seq.Greedy, without AllLogits): tokens[i] is the argmax of
// sequence i's last logits row, or -1 for the others. On a backend with
// ArgmaxOps the argmax runs on the device and logits[i] of a greedy
// sequence is nil; otherwise the logits are read as by Forward and the
// argmax is taken on the host, so callers handle both alike.
func (m *Model) ForwardGreedy(ctx context.Context, seqs []Seq) (logits [][]float32, tokens []int, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if !m.whole() {
		return nil, nil, m.stageErr("forward")
	}
	return m.runBatchGreedy(seqs, "forward", m.arch.VocabSize(), true, m.arch.Forward)
}

// readOutputs reads the output rows of res ([nOut, width]) per sequence
// (AllLogits: all its rows; else its last). With greedy, sequences with
// Seq.Greedy also get their argmax in toks (else -1); when the backend has
// ArgmaxOps their rows are not read: the other rows are gathered into a
// smaller tensor first, so the one sync of Argmax covers both.
func (m *Model) readOutputs(res Tensor, seqs []Seq, nOut, width int, greedy bool) ([][]float32, []int, error) {
	out := make([][]float32, len(seqs))
	var toks []int
	isGreedy := func(s Seq) bool { return greedy && s.Greedy && !s.AllLogits }
	ao, device := m.be.(ArgmaxOps)
	nGreedy := 0
	for _, s := range seqs {
		if isGreedy(s) {
			nGreedy++
		}
	}
	if greedy {
		toks = make([]int, len(seqs))
		for i := range toks {
			toks[i] = -1
		}
	}
	if !device || nGreedy == 0 {
		flat := make([]float32, nOut*width)
		if err := m.be.Read(res, flat); err != nil {
			return nil, nil, err
		}
		off := 0
		for i, s := range seqs {
			n := 1
			if s.AllLogits {
				n = len(s.Tokens)
			}
			out[i] = flat[off*width : (off+n)*width : (off+n)*width]
			if isGreedy(s) {
				toks[i] = Argmax(out[i])
			}
			off += n
		}
		return out, toks, nil
	}
	// Rows of the sequences that want logits, in output order.
	var rows []int
	off := 0
	for _, s := range seqs {
		n := 1
		if s.AllLogits {
			n = len(s.Tokens)
		}
		if !isGreedy(s) {
			for j := range n {
				rows = append(rows, off+j)
			}
		}
		off += n
	}
	var sub Tensor
	if len(rows) > 0 {
		sub = m.be.NewTensor(len(rows), width)
		defer m.be.Release(sub)
		m.be.Gather(sub, res, rows)
	}
	am := make([]int, nOut)
	if err := ao.Argmax(res, am); err != nil {
		return nil, nil, fmt.Errorf("argmax: %w", err)
	}
	var flat []float32
	if sub != nil {
		flat = make([]float32, len(rows)*width)
		if err := m.be.Read(sub, flat); err != nil { // nothing left to wait for
			return nil, nil, err
		}
	}
	off, k := 0, 0
	for i, s := range seqs {
		n := 1
		if s.AllLogits {
			n = len(s.Tokens)
		}
		if isGreedy(s) {
			toks[i] = am[off]
		} else {
			out[i] = flat[k*width : (k+n)*width : (k+n)*width]
			k += n
		}
		off += n
	}
	return out, toks, nil
}
