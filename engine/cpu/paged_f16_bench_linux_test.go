package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"github.com/macpool/macpool/engine"
)

// BenchmarkAttentionDecode8: one decode step of 8 sequences at 576 cached
// positions (Qwen3-0.6B's attention shape, paged blocks of 32), float32 vs
// f16 cache, one thread. cpu-ns/step counts this thread's CPU time only
// (the machine is shared with other processes).
func BenchmarkAttentionDecode8(b *testing.B) {
	for _, f16 := range []bool{false, true} {
		b.Run(fmt.Sprintf("f16=%v", f16), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			be, err := New(Config{Threads: 1, KVF16: f16})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			r := rand.New(rand.NewPCG(1, 1))
			const heads, kvHeads, hd, L, S = 16, 8, 128, 576, 8
			k := tensorOf(be, L, kvHeads*hd, randn(r, L*kvHeads*hd))
			var seqs []engine.AttnSeq
			for i := range S {
				kv := pagedOf(b, be, kvHeads, hd, 32, L+1)
				be.StoreKV(k, k, []engine.AttnSeq{{KV: kv, N: L}})
				seqs = append(seqs, engine.AttnSeq{KV: kv, Row: i, N: 1, Pos: L})
			}
			k1 := tensorOf(be, S, kvHeads*hd, randn(r, S*kvHeads*hd))
			q := tensorOf(be, S, heads*hd, randn(r, S*heads*hd))
			dst := be.NewTensor(S, heads*hd)
			p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.088}
			c0 := threadNanos()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				be.StoreKV(k1, k1, seqs)
				be.Attention(dst, q, seqs, p)
			}
			b.ReportMetric((threadNanos()-c0)/float64(b.N), "cpu-ns/step")
		})
	}
}

func threadNanos() float64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return float64(ts.Sec)*1e9 + float64(ts.Nsec)
}
