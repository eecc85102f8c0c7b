package kernels

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// BenchmarkDecodeDRAM: matrix–vector products over a 300 MB Q8_0 matrix
// (far bigger than the caches), on 1 and 2 goroutines: the DRAM read
// bandwidth the decode kernels reach.
func BenchmarkDecodeDRAM(b *testing.B) {
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0} {
		r := rand.New(rand.NewPCG(9, 9))
		const N, K = 1 << 16, 4096
		h := randHost(r, f, 16, K)
		big := make([]byte, 0, N/16*len(h.Data))
		for range N / 16 {
			big = append(big, h.Data...)
		}
		h = &tensor.Host{Name: "big", Format: f, Shape: []int{N, K}, Data: big}
		m, err := Prepare(h)
		if err != nil {
			b.Fatal(err)
		}
		x := randF32(r, K)
		var in Input
		in.Reset(x, 1, K)
		in.QuantizeRows(0, 1)
		dst := make([]float32, N)
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/T%d", f, threads), func(b *testing.B) {
				b.SetBytes(int64(m.Bytes()))
				for b.Loop() {
					var wg sync.WaitGroup
					for t := range threads {
						wg.Add(1)
						go func() {
							defer wg.Done()
							m.MatMul(dst, N, &in, t*N/threads, (t+1)*N/threads)
						}()
					}
					wg.Wait()
				}
			})
		}
	}
}

// BenchmarkDecodeLayers: M=1 products over 96 distinct [1024, 3072] Q4_0
// matrices (170 MB, as a model's layers), one after another on one thread.
func BenchmarkDecodeLayers(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	const N, K, L = 1024, 3072, 96
	base := randHost(r, tensor.Q4_0, N, K)
	ms := make([]*Matrix, L)
	for l := range ms {
		h := *base
		h.Data = append([]byte(nil), base.Data...)
		h.Data[l%len(h.Data)] ^= 1
		ms[l], _ = Prepare(&h)
	}
	x := randF32(r, K)
	var in Input
	in.Reset(x, 1, K)
	in.QuantizeRows(0, 1)
	dst := make([]float32, N)
	b.SetBytes(int64(L * ms[0].Bytes()))
	for b.Loop() {
		for _, m := range ms {
			m.MatMul(dst, N, &in, 0, N)
		}
	}
}

// BenchmarkStreamRead is a STREAM-like read test: DotF32 of a 512 MB
// float32 buffer with itself, split over 1 and 2 goroutines (each streams a
// disjoint half). It is the ceiling for the decode kernels on this machine.
func BenchmarkStreamRead(b *testing.B) {
	const n = 128 << 20 // 512 MB
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = float32(i & 7)
	}
	for _, threads := range []int{1, 2} {
		b.Run(map[int]string{1: "T1", 2: "T2"}[threads], func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				var wg sync.WaitGroup
				for t := range threads {
					wg.Add(1)
					go func() {
						defer wg.Done()
						s := buf[t*n/threads : (t+1)*n/threads]
						DotF32(s[:len(s)/2], s[len(s)/2:])
					}()
				}
				wg.Wait()
			}
		})
	}
}
