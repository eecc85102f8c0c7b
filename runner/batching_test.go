package runner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/prefix"
)

// fixtureDir makes a servable folder of a testdata/hf fixture (vocab 1024,
// no tokenizer): its weights and config, the Qwen3 tokenizer, and an EOS id
// inside the vocabulary.
func fixtureDir(t testing.TB, name string) string {
	t.Helper()
	src, _ := filepath.Abs(filepath.Join("..", "testdata", "hf", name))
	tok, _ := filepath.Abs(filepath.Join("..", "testdata", "tokenizers", "qwen3"))
	dir := t.TempDir()
	for _, l := range [][2]string{
		{filepath.Join(src, "config.json"), "config.json"},
		{filepath.Join(src, "model.safetensors"), "model.safetensors"},
		{filepath.Join(tok, "tokenizer.json"), "tokenizer.json"},
		{filepath.Join(tok, "tokenizer_config.json"), "tokenizer_config.json"},
	} {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": 1023}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func fixtureEngine(t testing.TB, name string, edit func(*Config)) *Runner {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ModelDir = fixtureDir(t, name)
	cfg.Threads = 2
	cfg.PrefillChunk, cfg.MaxBatchTokens, cfg.KVBlockSize = 16, 40, 16
	if edit != nil {
		edit(&cfg)
	}
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func tokenJob(ids []int, maxTokens int) *job.Job {
	req := &openai.CompletionRequest{Model: "test", Prompt: openai.Prompt{Tokens: [][]int{ids}},
		MaxTokens: ptr(maxTokens), Temperature: ptr(0.0)}
	return &job.Job{ID: "t", Kind: job.KindCompletion, Model: "test", Completion: req}
}

type mixedReq struct {
	prompt []int
	max    int
}

func mixedRequests(n int) []mixedReq {
	r := rand.New(rand.NewPCG(4, 4))
	lens := []int{5, 17, 40, 64, 3, 90, 33, 120, 48, 16}
	var out []mixedReq
	for i := range n {
		ids := make([]int, lens[i%len(lens)])
		for j := range ids {
			ids[j] = r.IntN(1000)
		}
		out = append(out, mixedReq{ids, 6 + (i*7)%17})
	}
	return out
}

// runAll runs the requests concurrently and returns their texts.
func runAll(t *testing.T, e *Runner, reqs []mixedReq) []string {
	t.Helper()
	out := make([]string, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, q := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := run(t, e, tokenJob(q.prompt, q.max))
			if err == nil {
				out[i] = r.choices[0].text
				if got := r.usage.CompletionTokens; got > q.max {
					err = fmt.Errorf("%d completion tokens, max %d", got, q.max)
				}
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return out
}

// Greedy outputs of many concurrent requests (mixed lengths, chunked
// prefill interleaved with decodes) equal their outputs run alone, for
// dense, MoE and hybrid fixtures, also when the KV pool is so small that
// sequences are preempted and recomputed.
func TestConcurrentEqualsAloneMixedModels(t *testing.T) {
	reqs := mixedRequests(10)
	var preemptions int64 // whether a given model is preempted depends on arrival timing
	t.Cleanup(func() {
		if preemptions == 0 && !t.Failed() {
			t.Error("small pools: no preemption in any model")
		}
	})
	for _, name := range []string{"qwen3", "qwen3_moe", "qwen3_5", "qwen3_next"} {
		t.Run(name, func(t *testing.T) {
			e := fixtureEngine(t, name, func(c *Config) { c.NoPrefixCache = true })
			alone := make([]string, len(reqs))
			for i, q := range reqs {
				alone[i] = mustRun(t, e, tokenJob(q.prompt, q.max)).choices[0].text
			}
			check := func(label string, got []string) {
				t.Helper()
				for i := range reqs {
					if got[i] != alone[i] {
						t.Errorf("%s: request %d (prompt %d tokens): %q, alone %q", label, i, len(reqs[i].prompt), short(got[i]), short(alone[i]))
					}
				}
			}
			passes := e.Stats().Passes
			check("concurrent", runAll(t, e, reqs))
			t.Logf("concurrent: %d passes", e.Stats().Passes-passes)

			// 12 blocks of 16: the longest request needs 9, all together ~45.
			small := fixtureEngine(t, name, func(c *Config) { c.KVBlocks = 12 })
			check("small pool", runAll(t, small, reqs))
			st := small.Stats()
			preemptions += st.Preemptions
			if st.KV.Used != 0 || st.KV.Used+st.KV.Cached+st.KV.Free+st.KV.Snapshot != 12 {
				t.Errorf("small pool after the run: %+v", st.KV)
			}
			t.Logf("small pool: %d preemptions, %d passes, kv %+v", st.Preemptions, st.Passes, st.KV)
		})
	}
}

// The same prompt a second time reuses the cached prefix: usage reports
// the cached tokens and the output is the same (dense and hybrid).
func TestPrefixCacheReuse(t *testing.T) {
	for _, name := range []string{"qwen3", "qwen3_5"} {
		t.Run(name, func(t *testing.T) {
			e := fixtureEngine(t, name, nil)
			prompt := mixedRequests(8)[7].prompt // 120 tokens
			first := mustRun(t, e, tokenJob(prompt, 10))
			second := mustRun(t, e, tokenJob(prompt, 10))
			if c := first.usage.PromptTokensDetails.CachedTokens; c != 0 {
				t.Errorf("first run: %d cached tokens", c)
			}
			// Hybrid models resume only at snapshots, taken at multiples of
			// 64 (engine.KVPool.SnapshotStride: the delta rule's chunk).
			cached := 112 // 7 blocks of 16
			if name != "qwen3" {
				cached = 64
			}
			if c := second.usage.PromptTokensDetails.CachedTokens; c != cached {
				t.Errorf("second run: %d cached tokens, want %d", c, cached)
			}
			if first.choices[0].text != second.choices[0].text {
				t.Errorf("cached run %q, cold run %q", second.choices[0].text, first.choices[0].text)
			}
			// A follow-up turn (the prompt and more) resumes at the block
			// boundary where the first prompt's snapshot was taken.
			third := mustRun(t, e, tokenJob(append(prompt[:120:120], mixedRequests(3)[2].prompt...), 4))
			if c := third.usage.PromptTokensDetails.CachedTokens; c != cached {
				t.Errorf("follow-up: %d cached tokens, want %d", c, cached)
			}
			// Dense models reuse any shared block prefix; hybrid ones only
			// prefixes ending at a snapshot (here the one at 64).
			fourth := mustRun(t, e, tokenJob(append(prompt[:100:100], 1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 4))
			want := 96
			if name != "qwen3" {
				want = 64
			}
			if c := fourth.usage.PromptTokensDetails.CachedTokens; c != want {
				t.Errorf("shared 100-token prefix: %d cached tokens, want %d", c, want)
			}
		})
	}
}

// A flood of requests on a small pool all complete; cancelled requests give
// their blocks back.
func TestKVPoolFloodAndCancel(t *testing.T) {
	e := fixtureEngine(t, "qwen3", func(c *Config) { c.KVBlocks = 16; c.MaxSeqs = 16 })
	runAll(t, e, mixedRequests(30))
	if st := e.Stats().KV; st.Used != 0 {
		t.Errorf("after the flood: %+v", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, q := range mixedRequests(6) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runCtx(ctx, t, e, tokenJob(q.prompt, 2000))
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().KV.Used == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for e.Stats().KV.Used != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := e.Stats().KV; st.Used != 0 {
		t.Errorf("after cancelling: %+v", st)
	}
}

// The summary holds the keys the coordinator computes for a follow-up turn.
func TestPrefixSummary(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	job := chatJob("tell me a story", func(r *openai.ChatCompletionRequest) { r.MaxTokens = ptr(3) })
	mustRun(t, e, job)
	follow := chatJob("", func(r *openai.ChatCompletionRequest) {
		r.Messages = append(job.Chat.Messages,
			openai.ChatMessage{Role: "assistant", Content: openai.TextContent("once")},
			openai.ChatMessage{Role: "user", Content: openai.TextContent("go on")})
	})
	s := e.RoutingSummary(64)
	have := map[uint64]bool{}
	for _, k := range s.Keys {
		have[k] = true
	}
	if n := prefix.Longest(prefix.Chat(follow.Chat), func(k uint64) bool { return have[k] }); n != 1 {
		t.Errorf("follow-up matches %d messages of the summary, want 1 (%+v)", n, s)
	}
	if s.Blocks == 0 || s.FreeBlocks == 0 || s.BlockSize != 32 || s.BlockBytes <= 0 {
		t.Errorf("summary pool fields: %+v", s)
	}
	// What the model is, for the status: testmodel writes bf16 safetensors.
	if s.Context != 2048 || s.Format != "safetensors" || s.Quantization != "bf16" || s.Size < 1000 {
		t.Errorf("summary model fields: context %d format %q quantization %q size %d, want 2048 safetensors bf16 >1000",
			s.Context, s.Format, s.Quantization, s.Size)
	}
}

// A Hugging Face cache snapshot holds links into its blobs folder: the
// size is the linked files'.
func TestDescribeFollowsLinks(t *testing.T) {
	root := t.TempDir()
	blobs, snap := filepath.Join(root, "blobs"), filepath.Join(root, "snapshots", "rev")
	for _, d := range []string{blobs, snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]int{"config.json": 0, "model.safetensors": 5000}
	var want int64
	for name, size := range files {
		body := []byte(strings.Repeat("x", size))
		if name == "config.json" {
			body = []byte(`{"torch_dtype":"bfloat16"}`)
		}
		want += int64(len(body))
		blob := filepath.Join(blobs, "sha-"+name)
		if err := os.WriteFile(blob, body, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", "sha-"+name), filepath.Join(snap, name)); err != nil {
			t.Fatal(err)
		}
	}
	if info := describe(snap, ""); info.size != want || info.format != "safetensors" || info.quant != "bf16" {
		t.Errorf("got %+v, want size %d, safetensors, bf16", info, want)
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		path, quantize, format, quant string
	}{
		{"../testdata/gguf/qwen3-q4_0.gguf", "", "gguf", "q4_0"},
		{"../testdata/gguf/qwen3-bf16.gguf", "", "gguf", "bf16"},
		{"../testdata/hf/qwen3", "", "safetensors", "bf16"},
		{"../testdata/hf/qwen3", "q8_0", "safetensors", "q8_0 (at load)"},
		{"../testdata/mlx/qwen3-4bit", "", "mlx", "4bit"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path)+tt.quantize, func(t *testing.T) {
			if _, err := os.Stat(tt.path); err != nil {
				t.Fatalf("fixture: %v", err)
			}
			info := describe(tt.path, tt.quantize)
			if info.format != tt.format || info.quant != tt.quant || info.size <= 0 {
				t.Errorf("got %+v, want format %q quantization %q and a size", info, tt.format, tt.quant)
			}
		})
	}
}

func TestBench(t *testing.T) {
	m, err := engine.Load(filepath.Join("..", "testdata", "hf", "qwen3"), engine.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg := BenchConfig{Concurrency: 4, Requests: 6, PromptTokens: 40, GenTokens: 8}
	cfg.Serve.KVBlockSize, cfg.Serve.PrefillChunk, cfg.Serve.MaxBatchTokens = 16, 32, 64
	res, err := Bench(context.Background(), m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.DecodeTokS <= 0 || res.TTFTP50Ms <= 0 || res.TTFTP99Ms < res.TTFTP50Ms || res.CachedTokens != 0 || res.Requests != 6 {
		t.Errorf("result %+v", res)
	}
	cfg.SharedPrefix = 35
	if res, err = Bench(context.Background(), m, cfg); err != nil || res.CachedTokens != 32 {
		t.Errorf("shared prefix 35: %+v (%v), want 32 cached tokens", res, err)
	}
	t.Logf("%+v", res)
}

// n = 3 choices of one long prompt prefill it once: the others wait and
// take its blocks from the prefix cache.
//
// Under heavy CPU contention the choices can reach the scheduler far enough
// apart that they prefill separately (correct, only slower), so the sharing
// is required in at least one of a few attempts on fresh engines; the
// outputs must agree in every attempt.
func TestChoicesSharePrompt(t *testing.T) {
	prompt := mixedRequests(8)[7].prompt // 120 tokens
	var hits []int64
	for attempt := 0; attempt < 3; attempt++ {
		e := fixtureEngine(t, "qwen3", nil)
		job := tokenJob(prompt, 5)
		job.Completion.N = ptr(3)
		job.Completion.Temperature = ptr(0.0)
		r := mustRun(t, e, job)
		if len(r.choices) != 3 || r.choices[0].text != r.choices[1].text || r.choices[0].text != r.choices[2].text {
			t.Fatalf("greedy choices differ: %+v", r.choices)
		}
		st := e.Stats().KV
		t.Logf("attempt %d: the prefix cache supplied %d tokens", attempt, st.HitTokens)
		if st.HitTokens == 2*112 {
			return
		}
		hits = append(hits, st.HitTokens)
	}
	t.Errorf("prefix cache supplied %v tokens in 3 attempts, want 2×112 in at least one", hits)
}

// A prompt that can never fit the KV pool fails with 503 instead of waiting
// forever; smaller requests still run.
func TestPromptLargerThanPool(t *testing.T) {
	e := fixtureEngine(t, "qwen3", func(c *Config) { c.KVBlocks = 4 })
	_, err := run(t, e, tokenJob(mixedRequests(8)[7].prompt, 4)) // 120 tokens > 64 positions
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.Status != 503 {
		t.Fatalf("got %v, want a 503 openai error", err)
	}
	mustRun(t, e, tokenJob(mixedRequests(1)[0].prompt, 4))
}
