package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"unsafe"

	"github.com/macpool/macpool/engine"
)

// BenchmarkAttentionDecodeStep: the attention of one whole
// decode step of Qwen3-0.6B over paged caches: 28 layers, each its own
// block store, 8 sequences at 576 cached positions (blocks of 32, 8 kv
// heads of 128, group 2), on 1 and 2 threads. contig=true is one sequence
// over the contiguous caches of the bare model (Backend.NewKV: what
// `macpool bench` without --concurrency, and llama-bench's tg, time), 28
// layers × 8 caches' worth of positions so the bytes match; q8 is that
// over the 8-bit cache (Config.KVQ8, 56% of f16's bytes). Unlike BenchmarkAttentionDecode8
// (one layer, whose 19 MB of f16 K/V stay in the caches between
// iterations) the 530 MB of f16 K/V (1.06 GB float32: 14 layers there, so
// the same bytes) come from DRAM as in the model. wall-ms/step is per 28
// layers; cpu-ms/step is the thread's CPU time (T1) or the process's
// (T2: includes the pool's spinning while the other thread is descheduled
// on a loaded machine).
func BenchmarkAttentionDecodeStep(b *testing.B) {
	for _, tc := range []struct {
		f16, contig, q8 bool
		threads         int
	}{{true, false, false, 1}, {true, false, false, 2}, {false, false, false, 1}, {false, false, false, 2},
		{true, true, false, 1}, {true, true, false, 2}, {false, true, true, 1}, {false, true, true, 2}} {
		f16 := tc.f16
		kind := fmt.Sprintf("f16=%v", f16)
		if tc.q8 {
			kind = "q8"
		}
		b.Run(fmt.Sprintf("%s/contig=%v/T%d", kind, tc.contig, tc.threads), func(b *testing.B) {
			if tc.threads == 1 {
				runtime.LockOSThread() // thread CPU time: no pool spinning counted
				defer runtime.UnlockOSThread()
			}
			be, err := New(Config{Threads: tc.threads, KVF16: f16, KVQ8: tc.q8})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			r := rand.New(rand.NewPCG(1, 1))
			const heads, kvHeads, hd, L, S, bs = 16, 8, 128, 576, 8, 32
			layers := 28
			if !f16 && !tc.q8 {
				layers = 14
			}
			k := tensorOf(be, L, kvHeads*hd, randn(r, L*kvHeads*hd))
			k1 := tensorOf(be, S, kvHeads*hd, randn(r, S*kvHeads*hd))
			q := tensorOf(be, S, heads*hd, randn(r, S*heads*hd))
			dst := be.NewTensor(S, heads*hd)
			p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.088}
			nb := (L + bs) / bs
			seqs := make([][]engine.AttnSeq, layers)
			if tc.contig {
				seqs = make([][]engine.AttnSeq, layers*S)
			}
			for l := range seqs {
				if tc.contig {
					kv, err := be.NewKV(kvHeads, hd)
					if err != nil {
						b.Fatal(err)
					}
					be.StoreKV(k, k, []engine.AttnSeq{{KV: kv, N: L}})
					seqs[l] = []engine.AttnSeq{{KV: kv, N: 1, Pos: L}}
					continue
				}
				st, err := be.NewKVBlocks(kvHeads, hd, bs, S*nb)
				if err != nil {
					b.Fatal(err)
				}
				perm := r.Perm(S * nb) // blocks scattered as in a shared pool
				for i := range S {
					kv := st.View(&engine.BlockTable{Blocks: perm[i*nb : (i+1)*nb]})
					be.StoreKV(k, k, []engine.AttnSeq{{KV: kv, N: L}})
					seqs[l] = append(seqs[l], engine.AttnSeq{KV: kv, Row: i, N: 1, Pos: L})
				}
			}
			step := func() {
				for l := range seqs {
					be.StoreKV(k1, k1, seqs[l])
					be.Attention(dst, q, seqs[l], p)
					for _, s := range seqs[l] {
						if c, ok := s.KV.(*pagedKV); ok {
							c.SetLen(L) // same context every step
						} else if err := s.KV.Truncate(L); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			step()
			cpuNanos := processNanos
			if tc.threads == 1 {
				cpuNanos = threadNanos
			}
			c0 := cpuNanos()
			t0 := time.Now()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step()
			}
			per := 28 / float64(layers) / 1e6 / float64(b.N)
			if tc.contig {
				per = 28 / float64(len(seqs)) / 1e6 / float64(b.N) // per 28 single-sequence layers
			} // ms per 28-layer step
			b.ReportMetric(float64(time.Since(t0).Nanoseconds())*per, "wall-ms/step")
			b.ReportMetric((cpuNanos()-c0)*per, "cpu-ms/step")
		})
	}
}

func processNanos() float64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 2 /* CLOCK_PROCESS_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return float64(ts.Sec)*1e9 + float64(ts.Nsec)
}
