package engine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/macpool/macpool/engine"
)

// TestForwardGreedyHost: on a backend without ArgmaxOps (cpu),
// ForwardGreedy returns Forward's logits and, for greedy sequences, their
// argmax (-1 for the others and for AllLogits sequences).
func TestForwardGreedyHost(t *testing.T) {
	m := load(t)
	batch := func(greedy bool) ([][]float32, []int) {
		var seqs []engine.Seq
		for i, n := range []int{7, 5, 3} {
			c, err := m.NewCache()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Free)
			seqs = append(seqs, engine.Seq{Cache: c, Tokens: tokens(n, i+1), Greedy: i != 1, AllLogits: i == 2})
		}
		if !greedy {
			out, err := m.Forward(context.Background(), seqs)
			if err != nil {
				t.Fatal(err)
			}
			return out, nil
		}
		out, toks, err := m.ForwardGreedy(context.Background(), seqs)
		if err != nil {
			t.Fatal(err)
		}
		return out, toks
	}
	want, _ := batch(false)
	got, toks := batch(true)
	if w := []int{engine.Argmax(want[0]), -1, -1}; !slices.Equal(toks, w) {
		t.Errorf("tokens %v, want %v", toks, w)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) || maxDiff(got[i], want[i]) != 0 {
			t.Errorf("sequence %d: logits differ from Forward's", i)
		}
	}
}
