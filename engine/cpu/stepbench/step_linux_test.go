package stepbench

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu"
	_ "github.com/macpool/macpool/engine/qwen"
	"github.com/macpool/macpool/engine/synth"
)

const (
	prompt = 512 // tokens in every stream's cache before the timed steps
	steps  = 16  // decode steps per timed round
	batch  = 8
)

func threadNanos() float64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return float64(ts.Sec)*1e9 + float64(ts.Nsec)
}

func model(b *testing.B, quant string, kvF16 bool, threads int) *engine.Model {
	b.Helper()
	c, err := synth.Config("qwen3-0.6b")
	if err != nil {
		b.Fatal(err)
	}
	q, err := synth.ParseQuant(quant)
	if err != nil {
		b.Fatal(err)
	}
	src, err := synth.New(c, q, 1, 0)
	if err != nil {
		b.Fatal(err)
	}
	be, err := cpu.New(cpu.Config{Threads: threads, KVF16: kvF16})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	m, err := engine.New(be, src)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

// BenchmarkDecodeStep reports the thread CPU time of decode steps at
// ~prompt+steps/2 context for 1 stream (contiguous cache) and 8 streams
// (paged cache, f32 and f16 KV), the three measured in alternating rounds
// (so a change of machine load hits all alike): cpu-ms/step of each (the
// median round) and x8-f32 / x8-f16 = 8 · single-stream time / 8-stream
// step time, the aggregate speed-up of batching.
func BenchmarkDecodeStep(b *testing.B) { decodeSteps(b, 1) }

// BenchmarkDecodeStep2Threads is BenchmarkDecodeStep on two backend
// threads, timed in wall-clock milliseconds (ms/step): the figures of a
// 2-core machine, sensitive to other processes.
func BenchmarkDecodeStep2Threads(b *testing.B) { decodeSteps(b, 2) }

func decodeSteps(b *testing.B, threads int) {
	clock, unit := threadNanos, "cpu-ms/step"
	if threads > 1 {
		clock = func() float64 { return float64(time.Now().UnixNano()) }
		unit = "ms/step"
	}
	for _, quant := range []string{"q8_0", "q4_0"} {
		b.Run(quant, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			type config struct {
				name string
				m    *engine.Model
				seqs []engine.Seq
				ms   []float64
			}
			var cfgs []*config
			ctx := context.Background()
			r := rand.New(rand.NewPCG(1, 2))
			for _, tc := range []struct {
				name    string
				streams int
				f16     bool
			}{{"single", 1, false}, {"x8-f32", batch, false}, {"x8-f16", batch, true}} {
				c := &config{name: tc.name, m: model(b, quant, tc.f16, threads)}
				var pool *engine.KVPool
				if tc.streams > 1 {
					var err error
					if pool, err = c.m.NewKVPool(engine.KVPoolConfig{BlockSize: 32, MaxBlocks: tc.streams * (prompt + steps + 64) / 32}); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(pool.Close)
				}
				for range tc.streams {
					var kc *engine.Cache
					var err error
					if pool != nil {
						kc, err = pool.NewCache()
					} else {
						kc, err = c.m.NewCache()
					}
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(kc.Free)
					toks := make([]int, prompt)
					for i := range toks {
						toks[i] = r.IntN(c.m.VocabSize())
					}
					if _, err := c.m.Forward(ctx, []engine.Seq{{Cache: kc, Tokens: toks}}); err != nil {
						b.Fatal(err)
					}
					c.seqs = append(c.seqs, engine.Seq{Cache: kc})
				}
				cfgs = append(cfgs, c)
			}
			for b.Loop() {
				for _, c := range cfgs {
					c0 := clock()
					for s := range steps {
						for i := range c.seqs {
							c.seqs[i].Tokens = []int{(s*7 + i) % c.m.VocabSize()}
						}
						if _, err := c.m.Forward(ctx, c.seqs); err != nil {
							b.Fatal(err)
						}
					}
					c.ms = append(c.ms, (clock()-c0)/1e6/steps)
					for i := range c.seqs {
						if err := c.seqs[i].Cache.Truncate(prompt); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			med := func(v []float64) float64 {
				v = slices.Clone(v)
				slices.Sort(v)
				return v[len(v)/2]
			}
			single := med(cfgs[0].ms)
			for _, c := range cfgs {
				b.ReportMetric(med(c.ms), c.name+"-"+unit)
				if c.name != "single" {
					b.ReportMetric(batch*single/med(c.ms), c.name)
				}
			}
		})
	}
}
