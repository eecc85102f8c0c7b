package engine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/macpool/macpool/engine"
)

// TestForwardGreedyHost: on the cpu backend (ArgmaxOps), ForwardGreedy
// returns, for greedy sequences, the argmax of Forward's last logits row and
// no logits; -1 and Forward's logits for the others (not greedy, AllLogits).
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
	if got[0] != nil {
		t.Errorf("greedy sequence: got %d logits, want none (the backend picked the token)", len(got[0]))
	}
	for i := 1; i < len(want); i++ {
		if len(got[i]) != len(want[i]) || maxDiff(got[i], want[i]) != 0 {
			t.Errorf("sequence %d: logits differ from Forward's", i)
		}
	}
}
