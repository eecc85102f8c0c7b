package runner

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/internal/reftest"
)

// TestBenchTargets measures the batching targets on a random model of
// Qwen3-0.6B's shape (Q8_0, 2 threads). Slow (minutes): runs only with
// MACPOOL_BENCH_TARGETS=1, e.g.
//
//	MACPOOL_BENCH_TARGETS=1 go test -run BenchTargets -v -timeout 30m ./runner/
func TestBenchTargets(t *testing.T) {
	if os.Getenv("MACPOOL_BENCH_TARGETS") == "" {
		t.Skip("set MACPOOL_BENCH_TARGETS=1 to measure")
	}
	m := reftest.SynthModel(t, "qwen3-0.6b", 2)
	ctx := context.Background()
	bench := func(cfg BenchConfig) BenchResult {
		t.Helper()
		cfg.Serve.KVBytes = 4 << 30
		r, err := Bench(ctx, m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", r)
		return r
	}
	only := os.Getenv("MACPOOL_BENCH_CASE") // "decode", "ttft" or all
	if only == "" || only == "decode" {
		one := bench(BenchConfig{Concurrency: 1, PromptTokens: 128, GenTokens: 48})
		eight := bench(BenchConfig{Concurrency: 8, PromptTokens: 128, GenTokens: 48})
		t.Logf("decode: 1 stream %.1f tok/s, 8 streams %.1f tok/s aggregate: %.2f× (target ≥ 3×)",
			one.DecodeTokS, eight.DecodeTokS, eight.DecodeTokS/one.DecodeTokS)
	}
	if only == "decode" {
		return
	}
	// Cold and warm runs interleaved (the box's load changes by the minute).
	repeat := 1
	if n, err := strconv.Atoi(os.Getenv("MACPOOL_BENCH_REPEAT")); err == nil && n > 0 {
		repeat = n
	}
	var ratios []float64
	for range repeat {
		cold := bench(BenchConfig{Concurrency: 1, PromptTokens: 2000, GenTokens: 1})
		warm := bench(BenchConfig{Concurrency: 1, PromptTokens: 2000, GenTokens: 1, SharedPrefix: 1800})
		ratios = append(ratios, warm.TTFTP50Ms/cold.TTFTP50Ms)
		t.Logf("2000-token prompt: cold TTFT %.0f ms, 1800 cached (%d reused) %.0f ms: %.1f%% (target < 20%%)",
			cold.TTFTP50Ms, warm.CachedTokens, warm.TTFTP50Ms, 100*warm.TTFTP50Ms/cold.TTFTP50Ms)
	}
	slices.Sort(ratios)
	t.Logf("warm/cold TTFT ratios %.3f, median %.1f%%", ratios, 100*ratios[len(ratios)/2])
}

// TestForwardBatchCost times Model.Forward of 1 and 8 decode steps directly
// (no scheduler), same gating as TestBenchTargets.
func TestForwardBatchCost(t *testing.T) {
	if os.Getenv("MACPOOL_BENCH_TARGETS") == "" {
		t.Skip("set MACPOOL_BENCH_TARGETS=1 to measure")
	}
	m := reftest.SynthModel(t, "qwen3-0.6b", 2)
	kc := engine.DefaultKVPoolConfig()
	kc.MaxBlocks = 200
	pool, err := m.NewKVPool(kc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []int{1, 8, 1, 8} {
		seqs := make([]engine.Seq, n)
		for i := range seqs {
			cache, _ := pool.NewCache()
			defer cache.Free()
			seqs[i] = engine.Seq{Cache: cache, Tokens: make([]int, 128)}
		}
		if _, err := m.Forward(ctx, seqs); err != nil {
			t.Fatal(err)
		}
		for i := range seqs {
			seqs[i].Tokens = []int{9}
		}
		start := time.Now()
		const steps = 10
		for range steps {
			if _, err := m.Forward(ctx, seqs); err != nil {
				t.Fatal(err)
			}
		}
		d := time.Since(start) / steps
		t.Logf("%d sequences: %v per pass, %.1f tok/s", n, d, float64(n)/d.Seconds())
	}
}
