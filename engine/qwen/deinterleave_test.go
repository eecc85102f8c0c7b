package qwen_test

import (
	"slices"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/cpu"
)

// perHeadCopies is the CPU backend with Deinterleave done the way the
// gated-attention split used to be done: two Copy calls per head.
// calls counts the splits, so the test knows it exercised them.
type perHeadCopies struct {
	*cpu.Backend
	calls *int
}

func (b perHeadCopies) Deinterleave(a, c, src engine.Tensor, chunk int) {
	*b.calls++
	T := src.Rows()
	for h := 0; h < a.Cols()/chunk; h++ {
		b.Copy(a, 0, h*chunk, src, 0, 2*h*chunk, T, chunk)
		b.Copy(c, 0, h*chunk, src, 0, (2*h+1)*chunk, T, chunk)
	}
}

// TestGatedSplitLogitsBits: the hybrid fixtures with gated attention give
// bit-identical logits whether the q/gate split is one Deinterleave or the
// per-head copies it replaced (a prompt, then a decode step).
func TestGatedSplitLogitsBits(t *testing.T) {
	for _, name := range []string{"qwen3_next", "qwen3_5", "qwen3_5_moe"} {
		t.Run(name, func(t *testing.T) {
			ck, err := checkpoint.Open(hybridDir(name))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			logits := func(be engine.Backend) []float32 {
				m, err := engine.New(be, ck)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				c := newCache(t, m)
				ids := randomIDs(7, 9, m.VocabSize())
				out := allLogits(t, m, c, ids[:8])
				return append(out, allLogits(t, m, c, ids[8:])...)
			}
			one, err := cpu.New(cpu.Config{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			copies, err := cpu.New(cpu.Config{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer copies.Close()
			calls := 0
			got, want := logits(one), logits(perHeadCopies{copies, &calls})
			if calls == 0 {
				t.Fatalf("%s: no q/gate split ran; the test exercised nothing", name)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: logits differ between Deinterleave and per-head copies", name)
			}
		})
	}
}
