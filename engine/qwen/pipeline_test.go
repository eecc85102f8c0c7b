package qwen_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
)

// chain is a model as a chain of pipeline stages (one model: not split).
// Each sequence has one cache per stage; pools[k] is stage k's KV pool, nil
// when the chain uses per-sequence caches or the stage has no attention
// layer (a pool needs one).
type chain struct {
	models []*engine.Model
	pools  []*engine.KVPool
}

func loadChain(t *testing.T, path string, opts engine.Options, stages []engine.Stage, paged bool) *chain {
	t.Helper()
	ch := &chain{}
	for _, st := range stages {
		o := opts
		o.Stage = st
		m, err := engine.Load(path, o)
		if err != nil {
			t.Fatalf("load %v: %v", st, err)
		}
		t.Cleanup(func() { m.Close() })
		var pool *engine.KVPool
		if paged {
			cfg := engine.DefaultKVPoolConfig()
			cfg.BlockSize, cfg.MaxBlocks = 16, 64
			if pool, err = m.NewKVPool(cfg); err != nil && !strings.Contains(err.Error(), "no attention layers") {
				t.Fatalf("kv pool of %v: %v", st, err)
			}
			if pool != nil {
				t.Cleanup(pool.Close)
			}
		}
		ch.models, ch.pools = append(ch.models, m), append(ch.pools, pool)
	}
	return ch
}

// newSeq makes a sequence's caches, one per stage.
func (ch *chain) newSeq(t *testing.T) []*engine.Cache {
	t.Helper()
	var cs []*engine.Cache
	for k, m := range ch.models {
		var c *engine.Cache
		var err error
		if ch.pools[k] != nil {
			c, err = ch.pools[k].NewCache()
		} else {
			c, err = m.NewCache()
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Free)
		cs = append(cs, c)
	}
	return cs
}

// step is one batched pass of the sequences (caches[i] with toks[i]) through
// every stage, each stage taking the previous one's hidden states; a chain of
// one model goes through Forward, the path every unsplit model serves with.
func (ch *chain) step(t *testing.T, caches [][]*engine.Cache, toks [][]int, promptEnd []int, all bool) [][]float32 {
	t.Helper()
	ctx := context.Background()
	seqs := func(k int) []engine.Seq {
		s := make([]engine.Seq, len(caches))
		for i := range caches {
			s[i] = engine.Seq{Cache: caches[i][k], Tokens: toks[i], PromptEnd: promptEnd[i], AllLogits: all}
		}
		return s
	}
	if len(ch.models) == 1 {
		out, err := ch.models[0].Forward(ctx, seqs(0))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	var hidden []float32
	for k, m := range ch.models {
		out, err := m.ForwardStage(ctx, seqs(k), hidden)
		if err != nil {
			t.Fatalf("stage %v: %v", m.Stage(), err)
		}
		if k == len(ch.models)-1 {
			return out.Logits
		}
		if out.Logits != nil || len(out.Hidden) == 0 {
			t.Fatalf("stage %v (not the last) returned logits %d / hidden %d", m.Stage(), len(out.Logits), len(out.Hidden))
		}
		hidden = out.Hidden
	}
	return nil
}

// splits are the 2- and 3-stage pipelines of an n-layer model. With two
// layers the third stage holds the final norm and LM head only.
func splits(n int) [][]engine.Stage {
	h := (n + 1) / 2
	two := []engine.Stage{{First: 0, Last: h}, {First: h, Last: n}}
	three := []engine.Stage{{First: 0, Last: 1}, {First: 1, Last: n - 1}, {First: n - 1, Last: n}}
	if n == 2 {
		three = []engine.Stage{{First: 0, Last: 1}, {First: 1, Last: 2, NoHead: true}, {First: 2, Last: 2}}
	}
	return [][]engine.Stage{two, three}
}

type pipelineFixture struct {
	name, path string
	opts       engine.Options
	// invariant: the fixture's kernels are batch invariant (docs/engine.md
	// "Batch invariance"), so a resume's generated rows must also equal the
	// decode steps' logits.
	invariant bool
}

func pipelineFixtures() []pipelineFixture {
	var fs []pipelineFixture
	for _, n := range []string{"qwen2", "qwen3", "qwen3_tied", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"} {
		fs = append(fs, pipelineFixture{name: "hf/" + n, path: filepath.Join("..", "..", "testdata", "hf", n), invariant: true})
	}
	fs = append(fs,
		// As a worker runs a hybrid: f16 KV cache, weights quantized at load.
		pipelineFixture{name: "hf/qwen3_5/kvf16+q4", path: filepath.Join("..", "..", "testdata", "hf", "qwen3_5"), opts: engine.Options{KVF16: true, Quantize: "q4"}, invariant: true},
		pipelineFixture{name: "mlx/qwen3-4bit", path: filepath.Join("..", "..", "testdata", "mlx", "qwen3-4bit")},
		pipelineFixture{name: "mlx/qwen3_5_moe-4bit", path: filepath.Join("..", "..", "testdata", "mlx", "qwen3_5_moe-4bit")},
		pipelineFixture{name: "gguf/qwen3-q4_k_m", path: filepath.Join("..", "..", "testdata", "gguf", "qwen3-q4_k_m.gguf")},
		pipelineFixture{name: "gguf/qwen3moe-q8_0", path: filepath.Join("..", "..", "testdata", "gguf", "qwen3moe-q8_0.gguf")},
	)
	return fs
}

// TestPipelineLogits: a model run as a 2- or 3-stage pipeline (stages
// chained in-process, hidden states handed over as float32) gives the
// whole model's logits bit for bit on the same backend, for every fixture
// architecture and format: two sequences prefilled together (one prompt
// crossing a Gated DeltaNet chunk boundary in the scheduler's cut at 64),
// the rest of a prompt alone, then greedy decode steps of both; and a
// failover resume (prompt + generated tokens prefilled in one call with
// PromptEnd), whose generated rows must also equal the decode steps' where
// the kernels are batch invariant. With per-sequence and paged caches.
func TestPipelineLogits(t *testing.T) {
	const promptA, promptB, decode = 70, 21, 6
	for _, fx := range pipelineFixtures() {
		for _, paged := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/paged=%v", fx.name, paged), func(t *testing.T) {
				opts := fx.opts
				opts.Threads = 1
				whole := loadChain(t, fx.path, opts, []engine.Stage{{}}, paged)
				n := whole.models[0].Config().NumHiddenLayers
				V := whole.models[0].VocabSize()
				a, b := randomIDs(31, promptA, V), randomIDs(32, promptB, V)

				// run drives one chain through the scenario and returns every
				// pass's logits in order, plus A's resume logits.
				run := func(ch *chain, gen [][]int) (passes [][][]float32, resume []float32, tokens [][]int) {
					ca, cb := ch.newSeq(t), ch.newSeq(t)
					ends := []int{promptA, promptB}
					passes = append(passes, ch.step(t, [][]*engine.Cache{ca, cb}, [][]int{a[:64], b}, ends, false))
					passes = append(passes, ch.step(t, [][]*engine.Cache{ca}, [][]int{a[64:]}, ends[:1], false))
					last := [][]float32{passes[1][0], passes[0][1]}
					tokens = [][]int{nil, nil}
					for s := 0; s < decode; s++ {
						next := [][]int{{engine.Argmax(last[0])}, {engine.Argmax(last[1])}}
						if gen != nil { // the whole model's tokens: the logits must agree anyway
							next = [][]int{{gen[0][s]}, {gen[1][s]}}
						}
						tokens[0], tokens[1] = append(tokens[0], next[0][0]), append(tokens[1], next[1][0])
						out := ch.step(t, [][]*engine.Cache{ca, cb}, next, ends, false)
						passes = append(passes, out)
						last = out
					}
					// Resume A elsewhere: its prompt and generated tokens but the
					// last in one call, logits of every row.
					cr := ch.newSeq(t)
					all := append(append([]int(nil), a...), tokens[0][:decode-1]...)
					resume = ch.step(t, [][]*engine.Cache{cr}, [][]int{all}, []int{promptA}, true)[0]
					return passes, resume, tokens
				}
				wantPasses, wantResume, gen := run(whole, nil)
				if fx.invariant && paged { // the contiguous cache promises no batch invariance
					// Resume row promptA-1+s is the logits decode step s had.
					for s := 0; s < decode; s++ {
						got := wantResume[(promptA-1+s)*V : (promptA+s)*V]
						want := wantPasses[1][0]
						if s > 0 {
							want = wantPasses[1+s][0]
						}
						if d := diffBits(got, want); d != 0 {
							t.Errorf("whole model: resumed generated row %d differs from its decode step in %d of %d logits", s, d, V)
						}
					}
				}
				for _, st := range splits(n) {
					t.Run(fmt.Sprintf("%d-stage", len(st)), func(t *testing.T) {
						p := loadChain(t, fx.path, opts, st, paged)
						passes, resume, tokens := run(p, gen)
						for i := range wantPasses {
							for j := range wantPasses[i] {
								if d := diffBits(passes[i][j], wantPasses[i][j]); d != 0 {
									t.Errorf("%v: pass %d sequence %d: %d of %d logits differ from the whole model (max |Δ| %.3g)", st, i, j, d, len(wantPasses[i][j]), maxAbsDiff(passes[i][j], wantPasses[i][j]))
								}
							}
						}
						if d := diffBits(resume, wantResume); d != 0 {
							t.Errorf("%v: resume: %d of %d logits differ from the whole model", st, d, len(resume))
						}
						for i := range gen {
							for s := range gen[i] {
								if got := tokens[i][s]; got != gen[i][s] {
									t.Fatalf("%v: sequence %d step %d: fed %d, want %d", st, i, s, got, gen[i][s])
								}
							}
						}
						// Greedy tokens chosen by the pipeline itself are the whole model's.
						_, _, own := run(p, nil)
						for i := range gen {
							if !equal(own[i], gen[i]) {
								t.Errorf("%v: sequence %d greedy %v, want %v", st, i, own[i], gen[i])
							}
						}
					})
				}
			})
		}
	}
}

// TestPipelineStageWeights: a stage uploads only its share of the weights:
// what its stage checkpoint holds, fewer bytes than the whole model, and
// the stages of a split together exactly the model (the tied embedding,
// needed by the first stage and by the last as its head, twice).
func TestPipelineStageWeights(t *testing.T) {
	for _, fx := range pipelineFixtures() {
		if fx.opts.Quantize != "" {
			continue // stored bytes do not change with quantization at load
		}
		t.Run(fx.name, func(t *testing.T) {
			opts := engine.Options{Threads: 1}
			whole, err := engine.Load(fx.path, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Close()
			ck, err := checkpoint.Open(fx.path)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if got, want := whole.WeightBytes(), ck.Bytes(); got != want {
				t.Errorf("whole model binds %d bytes, its checkpoint holds %d", got, want)
			}
			tied := !ck.Has("lm_head.weight")
			emb, _ := ck.Tensor("model.embed_tokens.weight")
			for _, split := range splits(whole.Config().NumHiddenLayers) {
				var sum int64
				for _, st := range split {
					o := opts
					o.Stage = st
					m, err := engine.Load(fx.path, o)
					if err != nil {
						t.Fatal(err)
					}
					sck, err := checkpoint.OpenStage(fx.path, st)
					if err != nil {
						t.Fatal(err)
					}
					got := m.WeightBytes()
					if want := sck.Bytes(); got != want {
						t.Errorf("%v binds %d bytes, its stage checkpoint holds %d", st, got, want)
					}
					if got <= 0 || got >= whole.WeightBytes() {
						t.Errorf("%v binds %d bytes, the whole model %d", st, got, whole.WeightBytes())
					}
					t.Logf("%v: %d of %d bytes (%.0f%%)", st, got, whole.WeightBytes(), 100*float64(got)/float64(whole.WeightBytes()))
					sum += got
					sck.Close()
					m.Close()
				}
				want := whole.WeightBytes()
				if tied {
					want += int64(len(emb.Data))
					if emb.Scales != nil {
						want += int64(len(emb.Scales.Data) + len(emb.Biases.Data))
					}
				}
				if sum != want {
					t.Errorf("split %v binds %d bytes in all, want %d", split, sum, want)
				}
			}
		})
	}
}

// TestStageAPIErrors: a stage refuses what it cannot serve alone, and a
// refused pass leaves the caches as they were.
func TestStageAPIErrors(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "hf", "qwen3")
	ctx := context.Background()
	load := func(st engine.Stage) *engine.Model {
		m, err := engine.Load(path, engine.Options{Threads: 1, Stage: st})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	first, mid := load(engine.Stage{First: 0, Last: 1}), load(engine.Stage{First: 1, Last: 2})
	c1, _ := first.NewCache()
	c2, _ := mid.NewCache()
	defer c1.Free()
	defer c2.Free()
	toks := []int{1, 2, 3}
	if _, err := first.Forward(ctx, []engine.Seq{{Cache: c1, Tokens: toks}}); !errors.Is(err, engine.ErrStage) {
		t.Errorf("Forward on a first stage: got %v, want ErrStage", err)
	}
	if _, err := first.Embed(ctx, []engine.Seq{{Cache: c1, Tokens: toks}}); !errors.Is(err, engine.ErrStage) {
		t.Errorf("Embed on a first stage: got %v, want ErrStage", err)
	}
	if _, err := first.ForwardStage(ctx, []engine.Seq{{Cache: c1, Tokens: toks}}, make([]float32, 3*128)); err == nil || !strings.Contains(err.Error(), "takes tokens") {
		t.Errorf("hidden states into a first stage: got %v", err)
	}
	if _, err := mid.ForwardStage(ctx, []engine.Seq{{Cache: c2, Tokens: toks}}, nil); err == nil || !strings.Contains(err.Error(), "needs the previous stage's hidden states") {
		t.Errorf("no hidden states into a middle stage: got %v", err)
	}
	if _, err := mid.ForwardStage(ctx, []engine.Seq{{Cache: c2, Tokens: toks}}, make([]float32, 2*128)); err == nil || !strings.Contains(err.Error(), "want 3 rows × 128") {
		t.Errorf("short hidden states: got %v", err)
	}
	if c2.Len() != 0 {
		t.Errorf("refused pass left the cache at %d positions, want 0", c2.Len())
	}
	out, err := first.ForwardStage(ctx, []engine.Seq{{Cache: c1, Tokens: toks}}, nil)
	if err != nil || len(out.Hidden) != 3*128 || out.Logits != nil {
		t.Fatalf("first stage: hidden %d, logits %v, %v; want 384 hidden values", len(out.Hidden), out.Logits, err)
	}
	if _, err := mid.ForwardStage(ctx, []engine.Seq{{Cache: c2, Tokens: toks}}, out.Hidden); err != nil || c2.Len() != 3 {
		t.Errorf("middle stage: %v, cache %d positions, want 3", err, c2.Len())
	}

	// NewStage over a whole checkpoint binds only the stage's tensors.
	ck, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	be, err := engine.NewBackend(engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	m, err := engine.NewStage(be, ck, engine.Stage{First: 1, Last: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.WeightBytes() != mid.WeightBytes() || m.Stage() != mid.Stage() {
		t.Errorf("NewStage: %v with %d bytes, Load: %v with %d", m.Stage(), m.WeightBytes(), mid.Stage(), mid.WeightBytes())
	}
	if _, err := engine.NewStage(be, ck, engine.Stage{First: 2, Last: 1}); err == nil {
		t.Error("NewStage with first > last: no error")
	}
}
