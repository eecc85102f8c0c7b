package engine_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/macpool/macpool/engine"
	_ "github.com/macpool/macpool/engine/cpu"
	_ "github.com/macpool/macpool/engine/qwen"
)

// Load starts backend workers; Model.Close must stop every one of them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func load(t *testing.T) *engine.Model {
	t.Helper()
	m, err := engine.Load(filepath.Join("..", "testdata", "hf", "qwen3"), engine.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func tokens(n, seed int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (seed*131 + i*977) % 1024
	}
	return out
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func TestTruncateThenExtend(t *testing.T) {
	m := load(t)
	ctx := context.Background()
	a, b := tokens(30, 1), tokens(15, 2)
	c, _ := m.NewCache()
	defer c.Free()
	if _, err := m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: a}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Truncate(20); err != nil {
		t.Fatal(err)
	}
	if c.Len() != 20 {
		t.Fatalf("length %d after truncate, want 20", c.Len())
	}
	got, err := m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: b, AllLogits: true}})
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ := m.NewCache()
	defer fresh.Free()
	want, err := m.Forward(ctx, []engine.Seq{{Cache: fresh, Tokens: append(append([]int{}, a[:20]...), b...), AllLogits: true}})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(got[0], want[0][20*m.VocabSize():]); d > 1e-4 {
		t.Errorf("truncated+extended logits differ from a fresh pass by %g", d)
	}
	if err := c.Truncate(36); err == nil {
		t.Errorf("truncate beyond length: no error")
	}
}

func TestForwardErrors(t *testing.T) {
	m := load(t)
	ctx := context.Background()
	c, _ := m.NewCache()
	defer c.Free()
	freed, _ := m.NewCache()
	freed.Free()
	for _, tc := range []struct {
		name string
		seqs []engine.Seq
		want string
	}{
		{"id too large", []engine.Seq{{Cache: c, Tokens: []int{1, 1024}}}, "token id 1024 out of range [0,1024)"},
		{"negative id", []engine.Seq{{Cache: c, Tokens: []int{-1}}}, "token id -1 out of range"},
		{"no tokens", []engine.Seq{{Cache: c}}, "sequence 0 has no tokens"},
		{"nil cache", []engine.Seq{{Tokens: []int{1}}}, "sequence 0 has no cache"},
		{"freed cache", []engine.Seq{{Cache: freed, Tokens: []int{1}}}, "sequence 0 has no cache"},
		{"cache twice", []engine.Seq{{Cache: c, Tokens: []int{1}}, {Cache: c, Tokens: []int{2}}}, "sequence 1: cache used twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Forward(ctx, tc.seqs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %v, want one containing %q", err, tc.want)
			}
			if c.Len() != 0 {
				t.Errorf("cache length %d after a failed forward, want 0", c.Len())
			}
		})
	}
}

func TestGenerateStopsAndCancels(t *testing.T) {
	m := load(t)
	prompt := tokens(8, 3)
	all, err := m.Generate(context.Background(), prompt, 10, nil, nil, nil)
	if err != nil || len(all) != 10 {
		t.Fatalf("generate: %v, %d tokens", err, len(all))
	}
	// A stop id ends generation after it is emitted.
	got, err := m.Generate(context.Background(), prompt, 10, engine.Greedy{}, []int{all[3]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := 0
	for all[first] != all[3] {
		first++
	}
	if len(got) != first+1 {
		t.Errorf("stop id %d: %d tokens (%v), want %d", all[3], len(got), got, first+1)
	}
	// Cancelling from emit stops the loop with ctx's error.
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err = m.Generate(ctx, prompt, 10, engine.Greedy{}, nil, func(int) error {
		n++
		if n == 2 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 2 {
		t.Errorf("after cancel: err %v after %d tokens, want context.Canceled after 2", err, n)
	}
	// An emit error is returned as is.
	boom := errors.New("client went away")
	if _, err := m.Generate(context.Background(), prompt, 10, engine.Greedy{}, nil, func(int) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("emit error: got %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := engine.Load(filepath.Join("..", "testdata", "hf", "qwen3"), engine.Options{Backend: "tpu"}); err == nil || !strings.Contains(err.Error(), `backend "tpu" not registered`) {
		t.Errorf("unknown backend: got %v", err)
	}
	if _, err := engine.Load(filepath.Join("..", "testdata", "nope"), engine.Options{}); err == nil {
		t.Errorf("missing folder: no error")
	}
}

// A prompt longer than PrefillChunk is prefilled in pieces; the greedy
// continuation equals the one from a single-pass prefill.
func TestGenerateChunkedPrefill(t *testing.T) {
	m := load(t)
	prompt := tokens(engine.PrefillChunk+37, 5)
	got, err := m.Generate(context.Background(), prompt, 3, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := m.NewCache()
	defer c.Free()
	logits, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: prompt}})
	if err != nil {
		t.Fatal(err)
	}
	if first := engine.Argmax(logits[0]); got[0] != first {
		t.Errorf("first token %d after chunked prefill, want %d", got[0], first)
	}
}
