package qwen_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/macpool/macpool/engine"
	_ "github.com/macpool/macpool/engine/cpu"
	_ "github.com/macpool/macpool/engine/qwen"
	"github.com/macpool/macpool/internal/reftest"
)

var fixtures = []string{"qwen2", "qwen3", "qwen3_tied"}

type ref = reftest.Ref

func dir(name string) string { return filepath.Join("..", "..", "testdata", "hf", name) }

func loadRef(t *testing.T, name string) (ref, []float32) {
	t.Helper()
	return reftest.Load(t, dir(name))
}

func load(t testing.TB, name string, threads int) *engine.Model {
	t.Helper()
	m, err := engine.Load(dir(name), engine.Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

var relL2 = reftest.RelL2

func forwardAll(t *testing.T, m *engine.Model, c *engine.Cache, ids []int) []float32 {
	t.Helper()
	out, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: ids, AllLogits: true}})
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

func TestLogitsMatchReference(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			r, want := loadRef(t, name)
			m := load(t, name, 2)
			vocab := r.LogitsShape[1]
			if m.VocabSize() != vocab {
				t.Fatalf("vocab %d, want %d", m.VocabSize(), vocab)
			}
			c, err := m.NewCache()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Free()
			got := forwardAll(t, m, c, r.InputIDs)
			worst := reftest.CheckPositions(t, got, want, vocab, len(r.InputIDs), 1e-4)
			t.Logf("%s: max relative L2 error over %d positions: %.3g", name, len(r.InputIDs), worst)
		})
	}
}

func TestGreedyMatchesReference(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			r, _ := loadRef(t, name)
			m := load(t, name, 2)
			var emitted []int
			got, err := m.Generate(context.Background(), r.GreedyPrompt, len(r.GreedyOut), engine.Greedy{}, nil, func(tok int) error {
				emitted = append(emitted, tok)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !equal(got, r.GreedyOut) || !equal(emitted, r.GreedyOut) {
				t.Errorf("greedy: got %v (emitted %v), want %v", got, emitted, r.GreedyOut)
			}
		})
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Prefill N tokens, then decode the rest one at a time: every step's logits
// must equal those of the single full pass.
func TestIncrementalDecodeMatchesOnePass(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			r, _ := loadRef(t, name)
			m := load(t, name, 2)
			vocab := m.VocabSize()
			ids := r.InputIDs[:40]
			full, _ := m.NewCache()
			defer full.Free()
			want := forwardAll(t, m, full, ids)

			c, _ := m.NewCache()
			defer c.Free()
			const prefill = 17
			got := forwardAll(t, m, c, ids[:prefill])
			for i := prefill; i < len(ids); i++ {
				out, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: ids[i : i+1]}})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, out[0]...)
			}
			if c.Len() != len(ids) {
				t.Fatalf("cache length %d, want %d", c.Len(), len(ids))
			}
			for p := range ids {
				if e := relL2(got[p*vocab:(p+1)*vocab], want[p*vocab:(p+1)*vocab]); e > 1e-5 {
					t.Errorf("position %d: relative L2 error %.3g between incremental and one pass", p, e)
				}
			}
		})
	}
}

// Several sequences of different lengths at different cache positions in
// one batch give the logits each gives alone.
func TestBatchMatchesSingle(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			r, _ := loadRef(t, name)
			m := load(t, name, 2)
			vocab := m.VocabSize()
			ids := r.InputIDs
			type spec struct {
				prefix, next []int
				all          bool
			}
			specs := []spec{
				{prefix: ids[:5], next: ids[5:12], all: true},
				{prefix: nil, next: ids[20:21]},
				{prefix: ids[30:50], next: ids[50:51]},
				{prefix: ids[1:4], next: ids[10:19], all: true},
				{prefix: nil, next: ids[40:63]},
			}
			var want [][]float32
			var batch []engine.Seq
			for _, s := range specs {
				alone, _ := m.NewCache()
				defer alone.Free()
				batched, _ := m.NewCache()
				defer batched.Free()
				if len(s.prefix) > 0 {
					forwardAll(t, m, alone, s.prefix)
					forwardAll(t, m, batched, s.prefix)
				}
				out, err := m.Forward(context.Background(), []engine.Seq{{Cache: alone, Tokens: s.next, AllLogits: s.all}})
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, out[0])
				batch = append(batch, engine.Seq{Cache: batched, Tokens: s.next, AllLogits: s.all})
			}
			got, err := m.Forward(context.Background(), batch)
			if err != nil {
				t.Fatal(err)
			}
			for i := range specs {
				if len(got[i]) != len(want[i]) {
					t.Fatalf("sequence %d: %d logits, want %d", i, len(got[i]), len(want[i]))
				}
				for p := 0; p < len(want[i])/vocab; p++ {
					if e := relL2(got[i][p*vocab:(p+1)*vocab], want[i][p*vocab:(p+1)*vocab]); e > 1e-6 {
						t.Errorf("sequence %d row %d: relative L2 error %.3g between batch and alone", i, p, e)
					}
				}
				if batch[i].Cache.Len() != len(specs[i].prefix)+len(specs[i].next) {
					t.Errorf("sequence %d: cache length %d, want %d", i, batch[i].Cache.Len(), len(specs[i].prefix)+len(specs[i].next))
				}
			}
		})
	}
}
