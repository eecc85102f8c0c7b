package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/macpool/macpool/engine"
)

// BenchmarkAttentionPrefill512: causal attention of a 512-token prompt
// (Qwen3-0.6B's attention shape, paged blocks of 32), one thread: as prompt
// rows (GEMMs) vs as generated rows (the per-row decode kernels, what a
// failover resume pays for the tokens it replays). cpu-ns/op counts this
// thread's CPU time.
func BenchmarkAttentionPrefill512(b *testing.B) {
	for _, gemm := range []bool{false, true} {
		b.Run(fmt.Sprintf("gemm=%v", gemm), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			be, err := New(Config{Threads: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			r := rand.New(rand.NewPCG(1, 1))
			const heads, kvHeads, hd, L = 16, 8, 128, 512
			k := tensorOf(be, L, kvHeads*hd, randn(r, L*kvHeads*hd))
			q := tensorOf(be, L, heads*hd, randn(r, L*heads*hd))
			dst := be.NewTensor(L, heads*hd)
			p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.088}
			kv := pagedOf(b, be, kvHeads, hd, 32, L)
			rows := 0
			if gemm {
				rows = L
			}
			seqs := []engine.AttnSeq{{KV: kv, N: L, GEMMRows: rows}}
			be.StoreKV(k, k, seqs)
			c0 := threadNanos()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				be.Attention(dst, q, seqs, p)
			}
			b.ReportMetric((threadNanos()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkAttentionContiguous: Qwen3-0.6B's attention over the contiguous
// (single-sequence) cache, float32 vs f16 (Config.KVF16), one thread: a
// 512-token prompt over one layer (GEMMs; f16 widens each task's K/V
// first) and a decode step at 576 cached positions cycling over 28 layers'
// caches (as a token does, so K/V come from DRAM, not L2). cpu-ns/op
// counts this thread's CPU time for one layer.
func BenchmarkAttentionContiguous(b *testing.B) {
	for _, f16 := range []bool{false, true} {
		for _, decode := range []bool{false, true} {
			b.Run(fmt.Sprintf("f16=%v/decode=%v", f16, decode), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				be, err := New(Config{Threads: 1, KVF16: f16})
				if err != nil {
					b.Fatal(err)
				}
				defer be.Close()
				r := rand.New(rand.NewPCG(1, 1))
				const heads, kvHeads, hd, L = 16, 8, 128, 576
				layers := 1
				n, pos := 512, 0
				if decode {
					layers, n, pos = 28, 1, L-1
				}
				k := tensorOf(be, L, kvHeads*hd, randn(r, L*kvHeads*hd))
				var seqs [][]engine.AttnSeq
				for range layers {
					kv, _ := be.NewKV(kvHeads, hd)
					be.StoreKV(k, k, []engine.AttnSeq{{KV: kv, N: L}})
					seqs = append(seqs, []engine.AttnSeq{{KV: kv, N: n, Pos: pos}})
				}
				q := tensorOf(be, n, heads*hd, randn(r, n*heads*hd))
				dst := be.NewTensor(n, heads*hd)
				p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.088}
				c0 := threadNanos()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					be.Attention(dst, q, seqs[i%layers], p)
				}
				b.ReportMetric((threadNanos()-c0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
