package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/runner"
)

// testPipeline is an in-process pipeline: one Server per stage (each a
// node of one cluster, real mutual TLS over 127.0.0.1) with its member.
type testPipeline struct {
	head    *Head
	members []*Member
	servers []*Server
	models  []*engine.Model
}

// startPipeline loads path as the given stages and joins them as plan
// epoch of model "m". The runner config comes from rc (ModelDir set).
func startPipeline(t testing.TB, secret *cluster.Secret, path string, opts engine.Options, stages []engine.Stage, epoch uint64, rc runner.Config) *testPipeline {
	return startPipelineWith(t, secret, path, opts, stages, epoch, rc, nil)
}

// startPipelineWith is startPipeline with edit applied to each member's
// configuration before it joins.
func startPipelineWith(t testing.TB, secret *cluster.Secret, path string, opts engine.Options, stages []engine.Stage, epoch uint64, rc runner.Config, edit func(i int, mc *MemberConfig)) *testPipeline {
	t.Helper()
	var models []*engine.Model
	for _, st := range stages {
		o := opts
		o.Stage = st
		m, err := engine.Load(path, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		models = append(models, m)
	}
	return joinPipeline(t, secret, models, epoch, rc, edit)
}

// joinPipeline starts a server per stage model and joins the members of
// plan epoch of model "m".
func joinPipeline(t testing.TB, secret *cluster.Secret, models []*engine.Model, epoch uint64, rc runner.Config, edit func(i int, mc *MemberConfig)) *testPipeline {
	t.Helper()
	tp := &testPipeline{models: models}
	plan := Plan{Model: "m", Epoch: epoch}
	for i, m := range models {
		name := fmt.Sprintf("w%d-e%d", i, epoch)
		srv, err := NewServer(ServerConfig{Addr: "127.0.0.1:0", Transport: nodeConfig(t, secret, name)})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Run(context.Background()) }()
		t.Cleanup(func() {
			srv.Close()
			if err := <-done; err != nil {
				t.Errorf("server run: %v", err)
			}
		})
		tp.servers = append(tp.servers, srv)
		r := m.Stage()
		plan.Stages = append(plan.Stages, StageAddr{Worker: name, Addr: srv.Addr(), First: r.First, Last: r.Last})
	}
	for i, srv := range tp.servers {
		mc := MemberConfig{Plan: plan, Self: i, Model: tp.models[i], Runner: rc}
		if edit != nil {
			edit(i, &mc)
		}
		m, err := srv.Join(context.Background(), mc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		tp.members = append(tp.members, m)
	}
	tp.head = tp.members[0].Engine()
	if tp.head == nil {
		t.Fatal("stage 0 has no head")
	}
	for _, m := range tp.members[1:] {
		if m.Engine() != nil {
			t.Fatal("a stage other than the first has a head")
		}
	}
	return tp
}

// fixtureRunner is the runner configuration for a fixture without a
// tokenizer: token prompts, no EOS.
func fixtureRunner(path string, opts engine.Options) runner.Config {
	rc := runner.DefaultConfig()
	rc.ModelDir, rc.Threads, rc.TokensOnly, rc.AllowNoEOS = path, 1, true, true
	rc.KVF16, rc.Quantize, rc.Backend = opts.KVF16, opts.Quantize, opts.Backend
	rc.MaxContext, rc.PrefillChunk, rc.MaxBatchTokens = 512, 64, 128
	return rc
}

// generation is one job's outcome: per choice the token ids and logprobs.
type generation struct {
	ids      [][]int
	logprobs [][]float64
	cached   int
	err      error
}

type resumer interface {
	GenerateResume(ctx context.Context, j *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error
}

// generate runs j on e (with resume r); stop, when set, is called after
// every event with the tokens so far and may end the wait early.
func generate(ctx context.Context, e resumer, j *job.Job, r *job.Resume, onEvent func(ids [][]int)) generation {
	var g generation
	var mu sync.Mutex
	g.err = e.GenerateResume(ctx, j, r, func(ev *job.Event, toks []int) error {
		mu.Lock()
		defer mu.Unlock()
		if ev.Usage != nil {
			if ev.Usage.PromptTokensDetails != nil {
				g.cached = ev.Usage.PromptTokensDetails.CachedTokens
			}
			return nil
		}
		for len(g.ids) <= ev.Choice {
			g.ids = append(g.ids, nil)
			g.logprobs = append(g.logprobs, nil)
		}
		g.ids[ev.Choice] = append(g.ids[ev.Choice], toks...)
		if ev.Logprobs != nil {
			for _, lp := range ev.Logprobs.Content {
				g.logprobs[ev.Choice] = append(g.logprobs[ev.Choice], lp.Logprob)
				for _, top := range lp.TopLogprobs {
					g.logprobs[ev.Choice] = append(g.logprobs[ev.Choice], top.Logprob)
				}
			}
		}
		if onEvent != nil {
			onEvent(g.ids)
		}
		return nil
	})
	return g
}

// completion is a token-prompt completions job.
func completion(prompt []int, maxTokens int, edit func(*openai.CompletionRequest)) *job.Job {
	req := &openai.CompletionRequest{Model: "m", Prompt: openai.Prompt{Tokens: [][]int{prompt}}, MaxTokens: &maxTokens}
	if edit != nil {
		edit(req)
	}
	return &job.Job{ID: "t", Kind: job.KindCompletion, Model: "m", Completion: req}
}

func ptrTo[T any](v T) *T { return &v }

// requests are the kinds of request the comparison runs: greedy, seeded
// sampling with penalties (drawn on the last stage), seeded sampling with
// logprobs (logits sent back), two choices.
func requests(V int) []*job.Job {
	return []*job.Job{
		completion(randomTokens(11, 70, V), 12, func(r *openai.CompletionRequest) { r.Temperature = ptrTo(0.0) }),
		completion(randomTokens(12, 9, V), 12, func(r *openai.CompletionRequest) {
			r.Temperature, r.TopP, r.Seed, r.RepetitionPenalty = ptrTo(0.9), ptrTo(0.95), ptrTo(int64(7)), ptrTo(1.2)
		}),
		completion(randomTokens(13, 33, V), 10, func(r *openai.CompletionRequest) {
			r.Temperature, r.Seed, r.Logprobs = ptrTo(0.7), ptrTo(int64(3)), ptrTo(3)
		}),
		completion(randomTokens(14, 20, V), 8, func(r *openai.CompletionRequest) {
			r.Temperature, r.TopK, r.Seed, r.N = ptrTo(1.1), ptrTo(5), ptrTo(int64(5)), ptrTo(2)
		}),
	}
}

// runAll runs the jobs, concurrently or one after the other.
func runAll(t testing.TB, e resumer, jobs []*job.Job, concurrent bool) []generation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := make([]generation, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		if !concurrent {
			out[i] = generate(ctx, e, j, nil, nil)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = generate(ctx, e, j, nil, nil)
		}()
	}
	wg.Wait()
	for i, g := range out {
		if g.err != nil {
			t.Fatalf("job %d: %v", i, g.err)
		}
	}
	return out
}

func sameGenerations(t testing.TB, got, want []generation) {
	t.Helper()
	for i := range want {
		if !slices.EqualFunc(got[i].ids, want[i].ids, slices.Equal) {
			t.Errorf("job %d: token ids %v, the whole model's %v", i, got[i].ids, want[i].ids)
		}
		for c := range want[i].logprobs {
			g, w := got[i].logprobs[c], want[i].logprobs[c]
			if len(g) != len(w) {
				t.Errorf("job %d choice %d: %d logprobs, the whole model's %d", i, c, len(g), len(w))
				continue
			}
			for k := range w {
				if math.Float64bits(g[k]) != math.Float64bits(w[k]) {
					t.Errorf("job %d choice %d: logprob %d is %v, the whole model's %v", i, c, k, g[k], w[k])
					break
				}
			}
		}
	}
}

// TestHeadMatchesWholeModel: a Head over 2 and 3 stages (real TLS between
// the stages) generates what a runner on the whole model generates, token
// id for token id and logprob for logprob, for every fixture architecture
// and format: greedy (argmax on the last stage), seeded sampling with
// penalties (drawn on the last stage), sampling with logprobs (logits
// back to the head), two choices. Fixtures whose kernels are batch
// invariant also run the requests concurrently (then the pipeline's lanes
// batch them differently from the whole model's one scheduler, which
// changes no bits there).
func TestHeadMatchesWholeModel(t *testing.T) {
	for _, fx := range execFixtures() {
		t.Run(fx.name, func(t *testing.T) {
			rc := fixtureRunner(fx.path, fx.opts)
			whole, err := runner.New(rc, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Close()
			jobs := requests(whole.Model().VocabSize())
			want := runAll(t, whole, jobs, false)
			if fx.invariant {
				sameGenerations(t, runAll(t, whole, jobs, true), want)
			}
			secret := newSecret(t)
			for k, stages := range splits(whole.Model().Config().NumHiddenLayers) {
				tp := startPipeline(t, secret, fx.path, fx.opts, stages, uint64(k+1), rc)
				sameGenerations(t, runAll(t, tp.head, jobs, false), want)
				if fx.invariant {
					sameGenerations(t, runAll(t, tp.head, jobs, true), want)
				}
				if p := tp.head.Runner().Stats().Passes; p == 0 {
					t.Errorf("%d stages: the head's runner ran no passes", len(stages))
				}
			}
		})
	}
}

type execFixture struct {
	name, path string
	opts       engine.Options
	invariant  bool
}

func execFixtures() []execFixture {
	var fs []execFixture
	for _, n := range []string{"qwen2", "qwen3", "qwen3_tied", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"} {
		fs = append(fs, execFixture{name: "hf/" + n, path: filepath.Join("..", "testdata", "hf", n), invariant: true})
	}
	return append(fs,
		execFixture{name: "hf/qwen3_5/kvf16+q4", path: filepath.Join("..", "testdata", "hf", "qwen3_5"), opts: engine.Options{KVF16: true, Quantize: "q4"}, invariant: true},
		execFixture{name: "mlx/qwen3-4bit", path: filepath.Join("..", "testdata", "mlx", "qwen3-4bit")},
		execFixture{name: "mlx/qwen3_5_moe-4bit", path: filepath.Join("..", "testdata", "mlx", "qwen3_5_moe-4bit")},
		execFixture{name: "gguf/qwen3-q4_k_m", path: filepath.Join("..", "testdata", "gguf", "qwen3-q4_k_m.gguf")},
		execFixture{name: "gguf/qwen3moe-q8_0", path: filepath.Join("..", "testdata", "gguf", "qwen3moe-q8_0.gguf")},
	)
}

// splits are the 2- and 3-stage layouts of an n-layer model. A 2-layer
// model has no 3-stage plan: a Plan's stages each hold at least one layer
// (engine/qwen TestPipelineLogits covers the head-only stage).
func splits(n int) [][]engine.Stage {
	h := (n + 1) / 2
	out := [][]engine.Stage{{{First: 0, Last: h}, {First: h, Last: n}}}
	if n >= 3 {
		out = append(out, []engine.Stage{{First: 0, Last: 1}, {First: 1, Last: n - 1}, {First: n - 1, Last: n}})
	}
	return out
}

// TestHeadPrefixCache: a prompt served again on a pipeline takes its
// prefix from the cache of every stage (the head's usage reports it, every
// stage's pool counts the hit) and generates the same tokens as the whole
// model; so does another prompt sharing the prefix. The head's routing
// summary has the whole model's keys. For a hybrid model the
// prefix ends at the snapshot every stage took. When a later stage has
// none of the prefix (its prefix cache off), the head attaches none
// either: nothing is cached and the output is still the whole model's.
func TestHeadPrefixCache(t *testing.T) {
	secret := newSecret(t)
	for _, name := range []string{"qwen3", "qwen3_5", "qwen3_next"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("..", "testdata", "hf", name)
			rc := fixtureRunner(path, engine.Options{})
			whole, err := runner.New(rc, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Close()
			V := whole.Model().VocabSize()
			p := randomTokens(21, 150, V)
			greedy := func(r *openai.CompletionRequest) { r.Temperature = ptrTo(0.0) }
			jobs := []*job.Job{
				completion(p, 8, greedy),
				completion(p, 8, greedy),
				completion(append(slices.Clone(p[:140]), randomTokens(22, 20, V)...), 8, greedy),
			}
			want := runAll(t, whole, jobs, false)
			if want[1].cached == 0 {
				t.Fatalf("the whole model cached nothing of a repeated prompt")
			}
			for k, stages := range splits(whole.Model().Config().NumHiddenLayers) {
				tp := startPipeline(t, secret, path, engine.Options{}, stages, uint64(10+k), rc)
				got := runAll(t, tp.head, jobs, false)
				sameGenerations(t, got, want)
				for i := range jobs {
					if got[i].cached != want[i].cached {
						t.Errorf("%d stages, job %d: %d prompt tokens cached, the whole model %d", len(stages), i, got[i].cached, want[i].cached)
					}
				}
				// Cache-aware routing: the head advertises the prefixes it
				// served, as a worker with the whole model does.
				if got, want := tp.head.RoutingSummary(64), whole.RoutingSummary(64); len(want.Keys) == 0 || !slices.Equal(got.Keys, want.Keys) || got.Blocks == 0 {
					t.Errorf("%d stages: routing summary keys %v (%d blocks), the whole model's %v", len(stages), got.Keys, got.Blocks, want.Keys)
				}
				for i, m := range tp.members[1:] {
					if m.pool == nil || m.pool.Stats().Hits == 0 {
						t.Errorf("%d stages: stage %d's pool had no prefix hit", len(stages), i+1)
					}
				}
				// The last stage without a prefix cache: the head falls back.
				tp = startPipelineWith(t, secret, path, engine.Options{}, stages, uint64(20+k), rc, func(i int, mc *MemberConfig) {
					mc.Runner.NoPrefixCache = i == len(stages)-1
				})
				got = runAll(t, tp.head, jobs, false)
				sameGenerations(t, got, want)
				for i := range jobs {
					if got[i].cached != 0 {
						t.Errorf("%d stages, last without prefix cache, job %d: %d prompt tokens cached, want 0", len(stages), i, got[i].cached)
					}
				}
			}
		})
	}
}

// TestStageLost: when a member of a 3-stage pipeline goes away mid-stream
// (the middle one, or the last), every job in flight on the head fails
// promptly with an error wrapping ErrStageLost (the worker resumes it
// elsewhere); the others re-dial in vain and give up after HealTimeout,
// then later jobs fail at once the same way, and every goroutine stops
// (goleak in TestMain).
func TestStageLost(t *testing.T) {
	secret := newSecret(t)
	path := filepath.Join("..", "testdata", "hf", "qwen3")
	rc := fixtureRunner(path, engine.Options{})
	rc.MaxContext = 4096
	for _, victim := range []int{1, 2} {
		t.Run(fmt.Sprintf("stage%d", victim), func(t *testing.T) {
			tp := startPipelineWith(t, secret, path, engine.Options{}, splits(3)[1], uint64(30+victim), rc, func(_ int, mc *MemberConfig) { mc.HealTimeout = 2 * time.Second })
			V := tp.models[0].VocabSize()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			const n = 4
			started := make(chan struct{}, n)
			errs := make(chan error, n)
			for i := range n {
				j := completion(randomTokens(40+i, 9, V), 4000, func(r *openai.CompletionRequest) {
					r.Temperature, r.Seed = ptrTo(0.8), ptrTo(int64(i))
				})
				go func() {
					var once sync.Once
					g := generate(ctx, tp.head, j, nil, func([][]int) { once.Do(func() { started <- struct{}{} }) })
					errs <- g.err
				}()
			}
			for range n {
				select {
				case <-started:
				case err := <-errs:
					t.Fatalf("a job ended before the stage was lost: %v", err)
				}
			}
			t0 := time.Now()
			tp.members[victim].Close()
			for range n {
				err := <-errs
				if !errors.Is(err, ErrStageLost) {
					t.Errorf("job error %v, want ErrStageLost", err)
				}
			}
			if d := time.Since(t0); d > 20*time.Second {
				t.Errorf("jobs took %v to fail after the stage was lost", d)
			}
			select {
			case <-tp.members[0].Lost():
			case <-time.After(30 * time.Second):
				t.Fatal("the head never gave up re-connecting to the closed stage")
			}
			g := generate(ctx, tp.head, completion([]int{1, 2, 3}, 4, nil), nil, nil)
			if !errors.Is(g.err, ErrStageLost) || !tp.head.Lost() {
				t.Errorf("a job after the loss: %v (lost %v), want ErrStageLost", g.err, tp.head.Lost())
			}
		})
	}
}

// TestResumeOnFreshPlan: a job on a 3-stage pipeline loses a stage after
// some tokens; resumed (job.Resume with the tokens reported so far) on a
// new plan of another epoch and shape (2 stages, other workers) it
// continues exactly as the whole model generates, for a greedy and a
// seeded sampled job, on an attention and a hybrid model.
func TestResumeOnFreshPlan(t *testing.T) {
	secret := newSecret(t)
	for _, name := range []string{"qwen3", "qwen3_5"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("..", "testdata", "hf", name)
			rc := fixtureRunner(path, engine.Options{})
			whole, err := runner.New(rc, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Close()
			V := whole.Model().VocabSize()
			n := whole.Model().Config().NumHiddenLayers
			jobs := []*job.Job{
				completion(randomTokens(51, 80, V), 40, func(r *openai.CompletionRequest) { r.Temperature = ptrTo(0.0) }),
				completion(randomTokens(52, 30, V), 40, func(r *openai.CompletionRequest) {
					r.Temperature, r.Seed, r.PresencePenalty = ptrTo(0.9), ptrTo(int64(9)), ptrTo(0.5)
				}),
			}
			want := runAll(t, whole, jobs, false)
			for i, j := range jobs {
				old := startPipeline(t, secret, path, engine.Options{}, splits(n)[1], uint64(100+i), rc)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				kill := make(chan struct{})
				var once sync.Once
				res := make(chan generation, 1)
				go func() {
					res <- generate(ctx, old.head, j, nil, func(ids [][]int) {
						if len(ids[0]) >= 10 {
							once.Do(func() { close(kill) })
						}
					})
				}()
				select {
				case <-kill:
				case g := <-res:
					cancel()
					t.Fatalf("job %d ended before the stage was lost: %v", i, g.err)
				}
				old.members[2].Close()
				g := <-res
				cancel()
				if !errors.Is(g.err, ErrStageLost) {
					t.Fatalf("job %d: %v, want ErrStageLost", i, g.err)
				}
				sent := g.ids[0]
				if len(sent) >= len(want[i].ids[0]) {
					t.Fatalf("job %d: %d tokens sent before the loss: nothing left to resume", i, len(sent))
				}
				fresh := startPipeline(t, secret, path, engine.Options{}, splits(n)[0], uint64(200+i), rc)
				ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
				r := generate(ctx, fresh.head, j, &job.Resume{Tokens: [][]int{slices.Clone(sent)}}, nil)
				cancel()
				if r.err != nil {
					t.Fatalf("job %d resumed: %v", i, r.err)
				}
				if got := append(slices.Clone(sent), r.ids[0]...); !slices.Equal(got, want[i].ids[0]) {
					t.Errorf("job %d: %d tokens before the loss + resumed %v, the whole model's %v", i, len(sent), got, want[i].ids[0])
				}
			}
		})
	}
}

// TestHeadPreemption: with KV pools too small for the concurrent jobs the
// head preempts sequences (their blocks go to others, their tokens are
// recomputed later); the later stages, whose pools are as small, free
// theirs too, and every job still generates the whole model's tokens.
func TestHeadPreemption(t *testing.T) {
	path := filepath.Join("..", "testdata", "hf", "qwen3")
	rc := fixtureRunner(path, engine.Options{})
	rc.KVBlockSize, rc.KVBlocks = 16, 24
	whole, err := runner.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	V := whole.Model().VocabSize()
	var jobs []*job.Job
	for i := range 6 {
		jobs = append(jobs, completion(randomTokens(60+i, 70, V), 60, func(r *openai.CompletionRequest) { r.Temperature = ptrTo(0.0) }))
	}
	want := runAll(t, whole, jobs, false)
	tp := startPipeline(t, newSecret(t), path, engine.Options{}, splits(3)[1], 300, rc)
	sameGenerations(t, runAll(t, tp.head, jobs, true), want)
	if p := tp.head.Runner().Stats().Preemptions; p == 0 {
		t.Errorf("no preemption: the test needs a pool too small for its jobs")
	}
}

// TestCancelledAttach: an attach whose request is cancelled before the
// last stage answers leaves the pipeline serving (the late answer is
// dropped, not taken for a broken stage).
func TestCancelledAttach(t *testing.T) {
	path := filepath.Join("..", "testdata", "hf", "qwen3")
	rc := fixtureRunner(path, engine.Options{})
	tp := startPipeline(t, newSecret(t), path, engine.Options{}, splits(3)[1], 400, rc)
	V := tp.models[0].VocabSize()
	if g := runAll(t, tp.head, []*job.Job{completion([]int{1, 2, 3}, 2, nil)}, false); len(g[0].ids[0]) != 2 {
		t.Fatalf("warm-up job: %v", g[0].ids)
	}
	toks := randomTokens(70, 40, V)
	for i := range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		id := uint64(1_000_000 + i)
		if _, err := tp.head.Attach(ctx, id, toks); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("attach: %v", err)
		}
		tp.head.Forget(id)
	}
	g := runAll(t, tp.head, []*job.Job{completion(toks, 4, nil)}, false)
	if len(g[0].ids[0]) != 4 {
		t.Errorf("job after cancelled attaches: %v", g[0].ids)
	}
}
