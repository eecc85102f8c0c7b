//go:build linux || darwin

package metal

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	_ "github.com/macpool/macpool/engine/cpu"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/metal/gpu"
	"github.com/macpool/macpool/runner"
)

// serveTokens runs a greedy completion job on e and returns the generated ids.
// With logprobs the request needs its logits (no GPU argmax).
func serveTokens(ctx context.Context, e *runner.Runner, prompt []int, maxTokens int, logprobs bool) ([]int, error) {
	return serveSlow(ctx, e, prompt, maxTokens, logprobs, 0)
}

// serveSlow is serveTokens with a consumer that takes delay per event.
func serveSlow(ctx context.Context, e *runner.Runner, prompt []int, maxTokens int, logprobs bool, delay time.Duration) ([]int, error) {
	temp, one := 0.0, 1
	j := &job.Job{ID: "t", Kind: job.KindCompletion, Model: "test", Completion: &openai.CompletionRequest{
		Model: "test", Prompt: openai.Prompt{Tokens: [][]int{prompt}}, MaxTokens: &maxTokens, Temperature: &temp}}
	if logprobs {
		j.Completion.Logprobs = &one
	}
	var mu sync.Mutex
	var ids []int
	err := e.GenerateResume(ctx, j, nil, func(_ *job.Event, t []int) error {
		time.Sleep(delay) // a slow client (not synchronisation)
		mu.Lock()
		ids = append(ids, t...)
		mu.Unlock()
		return nil
	})
	return ids, err
}

// TestServeMatchesCPU serves greedy requests through the runner on the
// metal backend (paged KV cache, prefix cache — for the hybrid qwen3_5 with
// recurrent-state snapshots —, batched passes, GPU greedy sampling) and on the CPU backend: the tokens must be the same. One
// request first fills the prefix cache, then three run at once sharing its
// prefix; one of them asks for logprobs, so batches mix GPU-argmax rows
// with rows whose logits are read.
func TestServeMatchesCPU(t *testing.T) {
	skipWithoutDevice(t)
	// Fixtures (vocabulary 1024: the emulator's lm_head is cheap) served
	// with the Qwen3 tokenizer.
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(fixture("tokenizers"), "qwen3", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(8, 7)) // prompts whose 8 greedy tokens avoid the EOS id below
	// 70 shared tokens: hybrid models reuse prefixes at multiples of 64
	// (engine.DeltaNetChunk), dense ones at KV block boundaries.
	prefix := make([]int, 70)
	for i := range prefix {
		prefix[i] = 1 + r.IntN(1000)
	}
	prompts := [][]int{prefix}
	for i := range 3 {
		p := slices.Clone(prefix)
		for range 3 + 5*i {
			p = append(p, 1+r.IntN(1000))
		}
		prompts = append(prompts, p)
	}
	for _, name := range []string{"hf/qwen3", "hf/qwen3_5"} {
		t.Run(name, func(t *testing.T) { serveMatchesCPU(t, name, dir, prompts) })
	}
}

func serveMatchesCPU(t *testing.T, name, dir string, prompts [][]int) {
	const maxTokens = 8
	results := map[string][][]int{}
	for _, backend := range []string{"cpu", testBackendName} {
		var argmaxes atomic.Int64
		m := loadCounting(t, name, backend, &argmaxes)
		// The fixture's EOS ids lie outside its vocabulary: pick one inside.
		m.Config().EOSTokenIDs = []int{1023}
		cfg := runner.DefaultConfig()
		cfg.ModelDir, cfg.Model, cfg.ModelName = dir, m, "test"
		cfg.MaxContext, cfg.KVBlockSize = 256, 8
		t0 := time.Now()
		e, err := runner.New(cfg, nil)
		if err != nil {
			t.Fatalf("%s: %v", backend, err)
		}
		defer e.Close()
		if got := e.Model().Backend().Name(); got != backend {
			t.Fatalf("backend %s, want %s", got, backend)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out := make([][]int, len(prompts))
		if out[0], err = serveTokens(ctx, e, prompts[0], maxTokens, false); err != nil {
			t.Fatalf("%s: %v", backend, err)
		}
		errs := make([]error, len(prompts))
		var wg sync.WaitGroup
		for i := 1; i < len(prompts); i++ {
			wg.Go(func() { out[i], errs[i] = serveTokens(ctx, e, prompts[i], maxTokens, i == 2) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s: request %d: %v", backend, i, err)
			}
		}
		st := e.Stats()
		if st.KV.Blocks == 0 {
			t.Fatalf("%s: no paged KV pool", backend)
		}
		if st.KV.Hits < 3 || st.KV.HitTokens < 3*64 {
			t.Errorf("%s: prefix cache hits %d (%d tokens), want ≥ 3 (≥ 192)", backend, st.KV.Hits, st.KV.HitTokens)
		}
		t.Logf("%s: %v, %d passes, %d GPU argmax dispatches, %d prefix hits, tokens %v", backend, time.Since(t0), st.Passes, argmaxes.Load(), st.KV.Hits, out)
		if backend != "cpu" && argmaxes.Load() < maxTokens {
			t.Errorf("%s: %d argmax dispatches for %d passes: greedy steps do not use the GPU argmax", backend, argmaxes.Load(), st.Passes)
		}
		results[backend] = out
	}
	for i := range prompts {
		c, m := results["cpu"][i], results[testBackendName][i]
		if len(c) != maxTokens || fmt.Sprint(c) != fmt.Sprint(m) {
			t.Errorf("request %d: %s generated %v, cpu %v", i, testBackendName, m, c)
		}
	}
}

// loadCounting loads a fixture on backend; on the metal backend
// argmax dispatches are counted.
func loadCounting(t *testing.T, name, backend string, argmaxes *atomic.Int64) *engine.Model {
	t.Helper()
	var m *engine.Model
	var err error
	if backend == "cpu" {
		m, err = engine.Load(fixture(name), engine.Options{Backend: backend, Threads: 2})
	} else {
		var be *Backend
		if be, err = New(Config{Device: dispatchCounter{newTestDevice(t), "argmax", argmaxes}, Name: backend}); err != nil {
			t.Fatal(err)
		}
		be.attnChunk = 32 // decode rows take the split attention path
		ck, cerr := checkpoint.Open(fixture(name))
		if cerr != nil {
			t.Fatal(cerr)
		}
		t.Cleanup(func() { ck.Close() })
		if m, err = engine.New(be, ck); err != nil {
			be.Close()
		} else {
			t.Cleanup(func() { be.Close() })
		}
	}
	if err != nil {
		t.Fatalf("%s: %v", backend, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// dispatchCounter counts the dispatches of one kernel.
type dispatchCounter struct {
	gpu.Device
	kernel string
	n      *atomic.Int64
}

type dispatchCounterCB struct {
	gpu.CommandBuffer
	d dispatchCounter
}

func (d dispatchCounter) NewCommandBuffer() gpu.CommandBuffer {
	return dispatchCounterCB{d.Device.NewCommandBuffer(), d}
}

func (c dispatchCounterCB) Dispatch(p gpu.Pipeline, groups, threads [3]int, args ...gpu.Arg) {
	if p.Name() == c.d.kernel {
		c.d.n.Add(1)
	}
	c.CommandBuffer.Dispatch(p, groups, threads, args...)
}

// TestServePipelined serves greedy requests through the runner on metal,
// where decode steps run pipelined (runner/pipelined.go: the next step
// launched, fed the device's ids, before the ids are read), and on the CPU
// (plain). Requests stop at max_tokens 1, 3 and 8 and at an EOS id met
// mid-generation, run concurrently (sequences leave the batch while their
// overshoot step is in flight), one with a consumer slower than the
// scheduler waits for (its speculative steps rolled back), and a later
// request reuses their prefix cache: every token is the CPU's, and the metal run did take the
// pipelined path (embed_ref dispatches: ids embedded from the device).
func TestServePipelined(t *testing.T) {
	skipWithoutDevice(t)
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(fixture("tokenizers"), "qwen3", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	prefix := make([]int, 40)
	for i := range prefix {
		prefix[i] = 1 + r.IntN(1000)
	}
	var prompts [][]int
	for i := range 5 {
		p := slices.Clone(prefix)
		for range 2 + 3*i {
			p = append(p, 1+r.IntN(1000))
		}
		prompts = append(prompts, p)
	}
	maxTokens := []int{1, 3, 8, 12, 8}
	for _, name := range []string{"hf/qwen3", "hf/qwen3_5"} {
		t.Run(name, func(t *testing.T) {
			serve := func(backend string, eos int) ([][]int, int64) {
				var refs atomic.Int64
				var m *engine.Model
				if backend == "cpu" {
					m = loadCounting(t, name, backend, nil)
				} else {
					be, err := New(Config{Device: dispatchCounter{newTestDevice(t), "embed_ref", &refs}, Name: backend})
					if err != nil {
						t.Fatal(err)
					}
					ck, err := checkpoint.Open(fixture(name))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { ck.Close() })
					if m, err = engine.New(be, ck); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { m.Close(); be.Close() })
				}
				m.Config().EOSTokenIDs = []int{eos}
				cfg := runner.DefaultConfig()
				cfg.ModelDir, cfg.Model, cfg.ModelName = dir, m, "test"
				cfg.MaxContext, cfg.KVBlockSize = 256, 8
				e, err := runner.New(cfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				out := make([][]int, len(prompts)+1)
				errs := make([]error, len(prompts))
				var wg sync.WaitGroup
				for i := range prompts {
					// Request 4's consumer is slower than the scheduler's
					// wait for the batch (20 ms): its speculative steps are
					// rolled back and rerun when it comes back.
					delay := time.Duration(0)
					if i == 4 {
						delay = 60 * time.Millisecond
					}
					wg.Go(func() { out[i], errs[i] = serveSlow(ctx, e, prompts[i], maxTokens[i], false, delay) })
				}
				wg.Wait()
				for i, err := range errs {
					if err != nil {
						t.Fatalf("%s: request %d: %v", backend, i, err)
					}
				}
				// After them: a request on their prefix (prefix cache).
				if out[len(prompts)], err = serveTokens(ctx, e, append(slices.Clone(prompts[3]), 7, 9), 6, false); err != nil {
					t.Fatal(err)
				}
				return out, refs.Load()
			}
			// The CPU's tokens without a reachable EOS pick the EOS id: the
			// 5th token of request 3 (max 12), not among its first four.
			free, _ := serve("cpu", 1023)
			eos := free[3][4]
			if slices.Contains(free[3][:4], eos) {
				t.Skipf("request 3 repeats its 5th token early: %v", free[3])
			}
			want, _ := serve("cpu", eos)
			got, refs := serve(testBackendName, eos)
			for i := range want {
				if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
					t.Errorf("request %d: %s %v, cpu %v", i, testBackendName, got[i], want[i])
				}
			}
			if len(want[3]) != 5 || want[3][4] != eos {
				t.Errorf("request 3 did not stop at the EOS id %d: %v", eos, want[3])
			}
			if refs == 0 {
				t.Errorf("no embed_ref dispatch: the runner did not decode pipelined")
			}
			t.Logf("%s: %d pipelined steps; tokens %v", name, refs, got)
		})
	}
}
