//go:build linux || darwin

package metal

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
)

// TestForwardGreedy: Model.ForwardGreedy on the metal backend takes the
// argmax on the GPU (greedy sequences get no logits back), reads the
// logits of the other sequences of the same batch (one gathered read), and
// still waits once per pass; tokens and logits equal Forward's.
func TestForwardGreedy(t *testing.T) {
	commits := 0
	be, err := New(Config{Device: countingDevice{newTestDevice(t), &commits}, Name: testBackendName})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	ck, err := checkpoint.Open(fixture("hf/qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m, err := engine.New(be, ck)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	caches := func() []*engine.Cache {
		var cs []*engine.Cache
		for range 3 {
			c, err := m.NewCache()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Free)
			cs = append(cs, c)
		}
		return cs
	}
	ref, gr := caches(), caches()
	// Pass 1: greedy prefill, a sequence wanting logits, AllLogits (greedy
	// ignored); pass 2: all decode greedily but the middle one.
	steps := [][][]int{{{5, 9, 200, 31, 7, 600, 2}, {44, 3, 900, 12, 8}, {77, 1000, 4}}, {{11}, {12}, {13}}}
	for si, toks := range steps {
		var rs, gs []engine.Seq
		for i := range toks {
			rs = append(rs, engine.Seq{Cache: ref[i], Tokens: toks[i], AllLogits: si == 0 && i == 2})
			gs = append(gs, engine.Seq{Cache: gr[i], Tokens: toks[i], AllLogits: si == 0 && i == 2, Greedy: i != 1})
		}
		want, err := m.Forward(context.Background(), rs)
		if err != nil {
			t.Fatal(err)
		}
		before, commits0 := be.syncs, commits
		got, ids, err := m.ForwardGreedy(context.Background(), gs)
		if err != nil {
			t.Fatal(err)
		}
		if n := be.syncs - before; n != 1 || commits == commits0 {
			t.Errorf("pass %d: %d waits (%d command buffers), want 1", si, n, commits-commits0)
		}
		for i := range toks {
			greedy := i != 1 && !(si == 0 && i == 2)
			switch {
			case greedy && (got[i] != nil || ids[i] != engine.Argmax(want[i])):
				t.Errorf("pass %d sequence %d: token %d (logits read: %v), want %d and no logits", si, i, ids[i], got[i] != nil, engine.Argmax(want[i]))
			case !greedy && (ids[i] != -1 || !slices.Equal(got[i], want[i])):
				t.Errorf("pass %d sequence %d: token %d, logits equal %v; want -1 and Forward's logits", si, i, ids[i], slices.Equal(got[i], want[i]))
			}
		}
	}
}

// TestGenerateGreedyOnGPU: Model.Generate with engine.Greedy takes every
// token's argmax on the GPU and reproduces HF's greedy continuation.
func TestGenerateGreedyOnGPU(t *testing.T) {
	var argmaxes atomic.Int64
	m := loadCounting(t, "hf/qwen3", testBackendName, &argmaxes)
	_, prompt, want, _, _ := readRef(t, fixture("hf/qwen3"), "")
	got, err := m.Generate(context.Background(), prompt, len(want), engine.Greedy{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("generated %v, want %v", got, want)
	}
	if n := argmaxes.Load(); n != int64(len(want)) {
		t.Errorf("%d GPU argmax dispatches for %d tokens", n, len(want))
	}
}
