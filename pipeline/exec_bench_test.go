package pipeline

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/synth"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/runner"
)

// benchEnv is an integer setting of BenchmarkPipelineDecode from the
// environment.
func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// BenchmarkPipelineDecode: decode tok/s and time to first token of a
// synthetic model (engine/synth) on one runner and as a Head over 2 and 3
// stages on 127.0.0.1 (mutual TLS), single stream and 8 concurrent
// streams (greedy, ignore_eos). The stages share the machine's
// PIPELINE_BENCH_THREADS cores (default: all): a whole model gets them
// all, each of S stages 1/S of them, as S workers with the same total
// cores would. PIPELINE_BENCH_PERSTAGE=1 gives every stage all of them
// instead, so that the difference to one stage is the hops' overhead.
// PIPELINE_BENCH_SHAPE (default tiny), _LAYERS (0: all), _QUANT (q8_0),
// _PROMPT (32) and _GEN (32) pick the model and the requests;
// _STAGES (1,2,3) and _STREAMS (1,8) the runs; _LANES the Head's
// scheduler lanes (0: the default), _GROUPS the micro-batches per ring
// turn (MemberConfig.Groups; 0: measured; a list runs each, e.g. 0,3,1),
// _SAMPLED=1 sampled requests (temperature 0.8, seeded), _LOGPROBS=N the
// same with N top logprobs, _SERIAL_DRAWS=1 the last stage's draws one
// after the other,
// _REPS the times each run is repeated (interleaved). Run with
// -benchtime 1x (each iteration is a whole run).
func BenchmarkPipelineDecode(b *testing.B) {
	shape := os.Getenv("PIPELINE_BENCH_SHAPE")
	if shape == "" {
		shape = "tiny"
	}
	quant := synth.Quant(os.Getenv("PIPELINE_BENCH_QUANT"))
	if quant == "" {
		quant = synth.Q8_0
	}
	threads := benchEnv("PIPELINE_BENCH_THREADS", runtime.NumCPU())
	perStage := os.Getenv("PIPELINE_BENCH_PERSTAGE") == "1"
	layers := benchEnv("PIPELINE_BENCH_LAYERS", 0)
	promptLen, gen := benchEnv("PIPELINE_BENCH_PROMPT", 32), benchEnv("PIPELINE_BENCH_GEN", 32)
	cfg, err := synth.Config(shape)
	if err != nil {
		b.Fatal(err)
	}
	src, err := synth.New(cfg, quant, 1, layers)
	if err != nil {
		b.Fatal(err)
	}
	n := src.Config().NumHiddenLayers
	secret := newSecret(b)
	lanes := benchEnv("PIPELINE_BENCH_LANES", 0)
	serialDraws = os.Getenv("PIPELINE_BENCH_SERIAL_DRAWS") == "1"
	defer func() { serialDraws = false }()
	groupsList := benchList("PIPELINE_BENCH_GROUPS", []int{0})
	reps := benchEnv("PIPELINE_BENCH_REPS", 1)
	for _, stages := range benchList("PIPELINE_BENCH_STAGES", []int{1, 2, 3}) {
		if stages > n {
			continue
		}
		t := threads
		if !perStage {
			t = max(threads/stages, 1)
		}
		// One engine per stage count for both stream counts (building a
		// big synthetic model takes a while).
		rc := runner.DefaultConfig()
		rc.ModelDir, rc.TokensOnly, rc.AllowNoEOS, rc.MaxContext = b.TempDir(), true, true, promptLen+gen+64
		rc.Lanes = lanes
		var eng resumer
		var closers []func()
		var members []*Member
		var head *Head
		if stages == 1 {
			be, err := engine.NewBackend(engine.Options{Threads: t, KVF16: true})
			if err != nil {
				b.Fatal(err)
			}
			m, err := engine.New(be, src)
			if err != nil {
				b.Fatal(err)
			}
			rc.Model = m
			r, err := runner.New(rc, nil)
			if err != nil {
				b.Fatal(err)
			}
			closers = append(closers, func() { r.Close(); m.Close(); be.Close() })
			eng = r
		} else {
			tp := benchPipeline(b, secret, src, stages, t, rc, 0)
			eng, members, head = tp.head, tp.members, tp.head
		}
		groupsRuns := groupsList
		if head == nil {
			groupsRuns = []int{0}
		}
		for rep := range reps {
			for _, streams := range benchList("PIPELINE_BENCH_STREAMS", []int{1, 8}) {
				for _, groups := range groupsRuns {
					name := fmt.Sprintf("stages=%d/streams=%d", stages, streams)
					if len(groupsList) > 1 || groups != 0 {
						name += fmt.Sprintf("/groups=%d", groups)
					}
					if reps > 1 {
						name += fmt.Sprintf("/rep=%d", rep)
					}
					if head != nil {
						head.shape.fixed.Store(int64(groups))
					}
					benchDecode(b, name, eng, head, members, src, streams, stages, promptLen, gen, t)
				}
			}
		}
		for _, c := range closers {
			c()
		}
	}
}

// benchDecode is one run of BenchmarkPipelineDecode: streams concurrent
// streams on eng (a runner, or the Head head over members).
func benchDecode(b *testing.B, name string, eng resumer, head *Head, members []*Member, src *synth.Model, streams, stages, promptLen, gen, t int) {
	b.Run(name, func(b *testing.B) {
		V := src.Config().VocabSize
		benchRun(b, eng, streams, promptLen, gen, V, -1) // warm up
		var ttft, decode float64
		var g0, m0 uint64
		if head != nil {
			g0, m0 = head.groups.Load(), head.merged.Load()
		}
		before := make([]MemberStats, len(members))
		for i, m := range members {
			before[i] = m.Stats()
		}
		t0 := time.Now()
		b.ResetTimer()
		for it := range b.N {
			tt, dr := benchRun(b, eng, streams, promptLen, gen, V, it)
			ttft += tt
			decode += dr
		}
		b.StopTimer()
		b.ReportMetric(ttft/float64(b.N)*1e3, "ttft_ms")
		b.ReportMetric(decode/float64(b.N), "decode_tok/s")
		b.ReportMetric(float64(t), "threads/stage")
		if head != nil {
			// The schedule: groups per ring turn chosen at the end,
			// and the share of passes that merged lanes.
			b.ReportMetric(float64(head.shape.best(shapeKey{seqs: streams, lanes: min(streams, stages)})), "groups")
			head.shape.mu.Lock()
			for k, rs := range head.shape.rates {
				b.Logf("schedule: %d sequences on %d lanes: tok/s by groups %v", k.seqs, k.lanes, rs)
			}
			head.shape.mu.Unlock()
			if g := head.groups.Load() - g0; g > 0 {
				b.ReportMetric(100*float64(head.merged.Load()-m0)/float64(g), "%merged")
			}
		}
		// How busy each stage was: its compute time over the wall time.
		wall := time.Since(t0)
		for i, m := range members {
			st := m.Stats()
			b.ReportMetric(100*float64(st.Compute-before[i].Compute)/float64(wall), fmt.Sprintf("%%busy_s%d", i))
			if p := st.Passes - before[i].Passes; p > 0 {
				b.ReportMetric((st.Compute-before[i].Compute).Seconds()*1e3/float64(p), fmt.Sprintf("ms/pass_s%d", i))
			}
		}
	})
}

// benchPipeline builds the stages of src (contiguous layer ranges that
// balance the bytes each stage reads per token: its layers, the last stage
// also the head) each on a backend of threads cores, and joins them.
func benchPipeline(b *testing.B, secret *cluster.Secret, src *synth.Model, stages, threads int, rc runner.Config, groups int) *testPipeline {
	var models []*engine.Model
	for _, st := range balancedStages(src, stages) {
		be, err := engine.NewBackend(engine.Options{Threads: threads, KVF16: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { be.Close() })
		m, err := engine.NewStage(be, src, st)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		models = append(models, m)
	}
	return joinPipeline(b, secret, models, 1, rc, func(_ int, mc *MemberConfig) { mc.Groups = groups })
}

// balancedStages splits src's layers into n contiguous stages minimising
// the largest stage's bytes read per token (the embedding is a lookup and
// not counted; the head goes with the last stage).
func balancedStages(src *synth.Model, n int) []engine.Stage {
	L := src.Config().NumHiddenLayers
	cost := make([]int64, L)
	var head int64
	for _, name := range src.Names() {
		if i, ok := checkpoint.LayerIndex(name); ok && i < L {
			cost[i] += int64(src.Bytes(name))
		} else if name == "lm_head.weight" || (name == "model.embed_tokens.weight" && !src.Has("lm_head.weight")) {
			head += int64(src.Bytes(name))
		}
	}
	var best []engine.Stage
	var bestMax int64 = -1
	// Every choice of n-1 cut points (n ≤ 3 in the benchmark).
	var rec func(first int, cuts []int)
	rec = func(first int, cuts []int) {
		if len(cuts) == n-1 {
			bounds := append(append([]int{0}, cuts...), L)
			var worst int64
			var sts []engine.Stage
			for k := range n {
				var c int64
				for i := bounds[k]; i < bounds[k+1]; i++ {
					c += cost[i]
				}
				if k == n-1 {
					c += head
				}
				worst = max(worst, c)
				sts = append(sts, engine.Stage{First: bounds[k], Last: bounds[k+1]})
			}
			if bestMax < 0 || worst < bestMax {
				best, bestMax = sts, worst
			}
			return
		}
		for c := first + 1; c <= L-(n-1-len(cuts)); c++ {
			rec(c, append(cuts, c))
		}
	}
	rec(0, nil)
	return best
}

// benchRun runs streams concurrent greedy jobs; it returns the mean time to
// first token (s) and the aggregate decode rate: the sum over streams of
// their tokens after the first per second.
func benchRun(b *testing.B, e resumer, streams, promptLen, gen, V, it int) (float64, float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	ttft := make([]float64, streams)
	rate := make([]float64, streams)
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := completion(randomTokens(1000*(it+1)+s+1, promptLen, V), gen, func(r *openai.CompletionRequest) {
				r.Temperature, r.IgnoreEOS = ptrTo(0.0), true
				if os.Getenv("PIPELINE_BENCH_SAMPLED") == "1" {
					r.Temperature, r.Seed = ptrTo(0.8), ptrTo(int64(s+1))
				}
				if lp := benchEnv("PIPELINE_BENCH_LOGPROBS", -1); lp >= 0 {
					// sampled with logprobs: the last stage's logprobs path
					r.Temperature, r.Seed, r.Logprobs = ptrTo(0.8), ptrTo(int64(s+1)), ptrTo(lp)
				}
			})
			t0 := time.Now()
			var first time.Time
			count := 0
			err := e.GenerateResume(ctx, j, nil, func(ev *job.Event, toks []int) error {
				if len(toks) > 0 && first.IsZero() {
					first = time.Now()
				}
				count += len(toks)
				return nil
			})
			if err != nil {
				b.Error(err)
				return
			}
			end := time.Now()
			ttft[s] = first.Sub(t0).Seconds()
			if count > 1 {
				rate[s] = float64(count-1) / end.Sub(first).Seconds()
			}
		}()
	}
	wg.Wait()
	var tt, r float64
	for s := range streams {
		tt += ttft[s]
		r += rate[s]
	}
	return tt / float64(streams), r
}
