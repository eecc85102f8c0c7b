package bench

// Config.Concurrency > 0: concurrent greedy streams through the serving
// scheduler (runner.Bench) instead of one stream on the bare model.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/runner"
)

// benchConcurrentResult is the --json output with --concurrency:
// decode_tok_s is the aggregate over all streams; ttft_p50_ms, ttft_p99_ms.
type benchConcurrentResult struct {
	Model   string `json:"model"`
	Quant   string `json:"quant"`
	Threads int    `json:"threads"`
	Impl    string `json:"impl"`
	Layers  int    `json:"layers"`
	runner.BenchResult
	LoadSeconds float64 `json:"load_s"`
	LoadAvg     string  `json:"load_avg,omitempty"`
}

// runBenchConcurrent runs runner.Bench on m with concurrency streams of
// promptTokens + genTokens (cachedPrefix prompt tokens shared with a
// warm-up request, for the prefix cache) and prints the result.
func runBenchConcurrent(ctx context.Context, m *engine.Model, res benchResult, concurrency, cachedPrefix int, seed uint64, asJSON bool, stdout io.Writer) error {
	if cachedPrefix < 0 || cachedPrefix >= res.PromptTokens {
		return fmt.Errorf("%w: --cached-prefix %d must be in [0, --prompt-tokens %d)", ErrConfig, cachedPrefix, res.PromptTokens)
	}
	r, err := runner.Bench(ctx, m, runner.BenchConfig{Concurrency: concurrency, PromptTokens: res.PromptTokens,
		GenTokens: res.GenTokens, SharedPrefix: cachedPrefix, Seed: seed})
	if err != nil {
		return err
	}
	out := benchConcurrentResult{Model: res.Model, Quant: res.Quant, Threads: res.Threads, Impl: res.Impl,
		Layers: res.Layers, BenchResult: r, LoadSeconds: res.LoadSeconds}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		out.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	fmt.Fprintf(stdout, "decode   %8.1f tok/s  aggregate over %d concurrent streams (%d tokens each)\n", r.DecodeTokS, r.Concurrency, r.GenTokens)
	fmt.Fprintf(stdout, "ttft     %8.0f ms p50, %.0f ms p99  (%d-token prompts, %d from the prefix cache)\n", r.TTFTP50Ms, r.TTFTP99Ms, r.PromptTokens, r.CachedTokens)
	if out.LoadAvg != "" {
		fmt.Fprintf(stdout, "load average during the run: %s\n", out.LoadAvg)
	}
	return nil
}
