package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/synth"
)

// benchList is a comma-separated list of integers from the environment.
func benchList(name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// BenchmarkStagePass measures what the pipeline schedule is made of: the
// time of one decode pass of b sequences through each stage of an S-stage
// split (PIPELINE_BENCH_THREADS / S threads per stage, as
// BenchmarkPipelineDecode gives them), run alone and with every stage
// running its own passes at the same time (what S micro-batches in flight
// on one host do: the stages then share the host's memory bandwidth and
// caches). Per stage it reports ms per pass alone and together and the
// weight bytes per second; stages=1 is the whole model. Same environment
// as BenchmarkPipelineDecode, plus PIPELINE_BENCH_BATCH (1,2,4,8) and
// PIPELINE_BENCH_STAGES (1,2,3). From these a schedule's decode rate
// follows: with m micro-batches of 8/m sequences over S stages, a ring
// turn (8 tokens) takes max(S·τ(8/m), m·τ(8/m)) with τ the stage pass time
// (together when m > 1).
func BenchmarkStagePass(b *testing.B) {
	shape := os.Getenv("PIPELINE_BENCH_SHAPE")
	if shape == "" {
		shape = "tiny"
	}
	quant := synth.Quant(os.Getenv("PIPELINE_BENCH_QUANT"))
	if quant == "" {
		quant = synth.Q8_0
	}
	threads := benchEnv("PIPELINE_BENCH_THREADS", 4)
	layers := benchEnv("PIPELINE_BENCH_LAYERS", 0)
	ctxLen := benchEnv("PIPELINE_BENCH_PROMPT", 32)
	cfg, err := synth.Config(shape)
	if err != nil {
		b.Fatal(err)
	}
	src, err := synth.New(cfg, quant, 1, layers)
	if err != nil {
		b.Fatal(err)
	}
	H, V := src.Config().HiddenSize, src.Config().VocabSize
	batches := benchList("PIPELINE_BENCH_BATCH", []int{1, 2, 4, 8})
	maxB := 0
	for _, n := range batches {
		maxB = max(maxB, n)
	}
	for _, S := range benchList("PIPELINE_BENCH_STAGES", []int{1, 2, 3}) {
		if S > src.Config().NumHiddenLayers {
			continue
		}
		t := max(threads/S, 1)
		sts := []engine.Stage{{First: 0, Last: src.Config().NumHiddenLayers}}
		if S > 1 {
			sts = balancedStages(src, S)
		}
		type stage struct {
			be     engine.Backend
			m      *engine.Model
			caches []*engine.Cache
			bytes  int64
			in     []float32
		}
		var stages []*stage
		for _, r := range sts {
			be, err := engine.NewBackend(engine.Options{Threads: t, KVF16: true})
			if err != nil {
				b.Fatal(err)
			}
			m, err := engine.NewStage(be, src, r)
			if err != nil {
				b.Fatal(err)
			}
			st := &stage{be: be, m: m, bytes: stageBytes(src, r)}
			for range maxB {
				c, err := m.NewCache()
				if err != nil {
					b.Fatal(err)
				}
				st.caches = append(st.caches, c)
			}
			rng := rand.New(rand.NewPCG(uint64(S), 7))
			st.in = make([]float32, maxB*ctxLen*H)
			for i := range st.in {
				st.in[i] = float32(rng.NormFloat64())
			}
			stages = append(stages, st)
		}
		// pass runs one decode pass of n sequences through stage k (a
		// prompt of ctxLen first, so that attention reads some context;
		// the caches go back to it after every pass).
		pass := func(k, n int, tokens int) time.Duration {
			st := stages[k]
			seqs := make([]engine.Seq, n)
			for i := range n {
				toks := make([]int, tokens)
				for j := range toks {
					toks[j] = (i*131 + j*17 + 1) % V
				}
				seqs[i] = engine.Seq{Cache: st.caches[i], Tokens: toks, Greedy: true}
			}
			var in []float32
			if k > 0 {
				in = st.in[:n*tokens*H]
			}
			t0 := time.Now()
			if _, err := st.m.ForwardStage(context.Background(), seqs, in); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		}
		reset := func(k, n int) {
			for _, c := range stages[k].caches[:n] {
				if err := c.Truncate(ctxLen); err != nil {
					b.Fatal(err)
				}
			}
		}
		for k := range stages {
			for i := range maxB {
				// one sequence at a time: ctxLen prompt tokens each
				st := stages[k]
				toks := make([]int, ctxLen)
				for j := range toks {
					toks[j] = (i*131 + j*17 + 1) % V
				}
				var in []float32
				if k > 0 {
					in = st.in[:ctxLen*H]
				}
				if _, err := st.m.ForwardStage(context.Background(), []engine.Seq{{Cache: st.caches[i], Tokens: toks}}, in); err != nil {
					b.Fatal(err)
				}
			}
		}
		const reps = 12
		for _, n := range batches {
			b.Run(fmt.Sprintf("stages=%d/batch=%d", S, n), func(b *testing.B) {
				for range b.N {
					// Alone: one stage at a time.
					alone := make([]time.Duration, S)
					for k := range S {
						pass(k, n, 1) // warm
						reset(k, n)
						var sum time.Duration
						for range reps {
							sum += pass(k, n, 1)
							reset(k, n)
						}
						alone[k] = sum / reps
					}
					// Together: every stage its own passes at once.
					together := make([]time.Duration, S)
					var wg sync.WaitGroup
					for k := range S {
						wg.Add(1)
						go func() {
							defer wg.Done()
							var sum time.Duration
							for range reps {
								sum += pass(k, n, 1)
								reset(k, n)
							}
							together[k] = sum / reps
						}()
					}
					wg.Wait()
					for k := range S {
						b.ReportMetric(alone[k].Seconds()*1e3, fmt.Sprintf("ms_alone_s%d", k))
						b.ReportMetric(float64(stages[k].bytes)/alone[k].Seconds()/1e9, fmt.Sprintf("GB/s_alone_s%d", k))
						if S > 1 {
							b.ReportMetric(together[k].Seconds()*1e3, fmt.Sprintf("ms_together_s%d", k))
							b.ReportMetric(float64(stages[k].bytes)/together[k].Seconds()/1e9, fmt.Sprintf("GB/s_together_s%d", k))
						}
					}
				}
			})
		}
		for _, st := range stages {
			for _, c := range st.caches {
				c.Free()
			}
			st.m.Close()
			st.be.Close()
		}
	}
}

// stageBytes is the weight bytes a decode pass of stage r reads (its
// layers; the head on the last stage; the embedding is a lookup).
func stageBytes(src *synth.Model, r engine.Stage) int64 {
	L := src.Config().NumHiddenLayers
	var n int64
	for _, name := range src.Names() {
		if i, ok := checkpoint.LayerIndex(name); ok {
			if i >= r.First && i < r.Last {
				n += int64(src.Bytes(name))
			}
		} else if r.Last == L && (name == "lm_head.weight" || (name == "model.embed_tokens.weight" && !src.Has("lm_head.weight"))) {
			n += int64(src.Bytes(name))
		}
	}
	return n
}
