package runner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/macpool/macpool/job"
)

// tokenOut is one generated token with its logprobs, compared exactly.
type tokenOut struct {
	id  int
	lps []float64 // the token's logprob, then its alternatives'
}

// generateTokens runs job (resumed after resume, if any) and returns the
// generated tokens with their logprobs.
func generateTokens(t *testing.T, e *Runner, j *job.Job, resume []int) []tokenOut {
	t.Helper()
	var r *job.Resume
	if resume != nil {
		r = &job.Resume{Tokens: [][]int{resume}}
	}
	var ids []int
	var lps [][]float64
	err := e.GenerateResume(context.Background(), j, r, func(ev *job.Event, toks []int) error {
		ids = append(ids, toks...)
		if ev.Logprobs != nil {
			for _, c := range ev.Logprobs.Content {
				lp := []float64{c.Logprob}
				for _, a := range c.TopLogprobs {
					lp = append(lp, a.Logprob)
				}
				lps = append(lps, lp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("generate (resume after %d): %v", len(resume), err)
	}
	if len(lps) != len(ids) {
		t.Fatalf("%d tokens with %d logprobs", len(ids), len(lps))
	}
	out := make([]tokenOut, len(ids))
	for i := range ids {
		out[i] = tokenOut{ids[i], lps[i]}
	}
	return out
}

// background keeps other requests running on e until the test ends, so
// that resumed sequences share passes (and token budgets) with others.
func background(t *testing.T, e *Runner) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			q := mixedRequests(10)[i%10]
			err := e.Generate(ctx, tokenJob(q.prompt, q.max), func(*job.Event) error { return nil })
			if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
				t.Errorf("background request: %v", err)
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// A hybrid model's stream resumed mid-way on another worker (prompt +
// tokens already sent prefilled, as a failover does) continues with
// exactly the uninterrupted run's tokens and logprobs (bit for bit), greedy
// and seeded. The uninterrupted run starts from a prefix-cache snapshot of
// an earlier request sharing 100 prompt tokens; the resumes run on a second
// engine beside other requests; odd PrefillChunk/MaxBatchTokens limits cut
// the 150-token prompt, so this holds only because the scheduler ends
// hybrid prompt chunks and takes snapshots at multiples of
// engine.DeltaNetChunk (docs/engine.md, "Batch invariance").
func TestHybridResumeExact(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	prompt := make([]int, 150)
	for i := range prompt {
		prompt[i] = r.IntN(1000)
	}
	warm := append(slices.Clone(prompt[:100]), 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
	for _, name := range []string{"qwen3_5", "qwen3_next"} {
		t.Run(name, func(t *testing.T) {
			limits := func(c *Config) { c.PrefillChunk, c.MaxBatchTokens = 70, 73 }
			a, b := fixtureEngine(t, name, limits), fixtureEngine(t, name, limits)
			mustRun(t, a, tokenJob(warm, 2))
			background(t, b)
			for _, temp := range []float64{0, 1} {
				t.Run(fmt.Sprintf("temperature=%v", temp), func(t *testing.T) {
					jb := func() *job.Job {
						j := tokenJob(prompt, 20)
						j.Completion.Temperature, j.Completion.Seed, j.Completion.Logprobs = ptr(temp), ptr(int64(5)), ptr(2)
						j.Completion.IgnoreEOS = true
						return j
					}
					full := generateTokens(t, a, jb(), nil)
					if len(full) != 20 {
						t.Fatalf("%d tokens, want 20", len(full))
					}
					ids := make([]int, len(full))
					for i, o := range full {
						ids[i] = o.id
					}
					for cut := 1; cut < len(full); cut++ {
						rest := generateTokens(t, b, jb(), ids[:cut])
						if len(rest) != len(full)-cut {
							t.Fatalf("resumed after %d: %d tokens, want %d", cut, len(rest), len(full)-cut)
						}
						for i, o := range rest {
							w := full[cut+i]
							if o.id != w.id || !sameFloats(o.lps, w.lps) {
								t.Errorf("resumed after %d: token %d is %d %v, uninterrupted %d %v", cut, cut+i, o.id, o.lps, w.id, w.lps)
								break
							}
						}
					}
				})
			}
		})
	}
}

func sameFloats(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) })
}

func TestAlignedChunk(t *testing.T) {
	for _, c := range []struct {
		a, pos, n, rest, promptEnd, want int
	}{
		{1, 0, 70, 200, 150, 70},    // dense: any cut
		{64, 0, 70, 200, 0, 70},     // no PromptEnd: any cut
		{64, 0, 70, 200, 150, 64},   // shortened to a multiple
		{64, 0, 256, 300, 150, 256}, // past the prompt's end: as is
		{64, 64, 73, 200, 150, 64},  // 137 → 128
		{64, 128, 10, 200, 150, 22}, // 138: shortening leaves nothing: lengthened to the prompt end
		{64, 0, 16, 200, 150, 64},   // budget 16: lengthened to 64
		{64, 0, 16, 200, 40, 40},    // lengthened to the prompt end before the multiple
		{64, 40, 10, 200, 300, 24},  // from a non-multiple: to the next multiple
		{64, 0, 30, 30, 150, 30},    // no more tokens than the step has
		{64, 128, 64, 80, 150, 64},  // 192 ≥ prompt end: as is
	} {
		if got := alignedChunk(c.a, c.pos, c.n, c.rest, c.promptEnd); got != c.want {
			t.Errorf("alignedChunk(a %d, pos %d, n %d, rest %d, prompt end %d) = %d, want %d", c.a, c.pos, c.n, c.rest, c.promptEnd, got, c.want)
		}
	}
}
