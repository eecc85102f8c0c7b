package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// TestMatMulBatchInvariant checks that a row's product does not depend on
// the other rows computed with it: mid-stream failover resumes a sequence by
// prefilling the tokens it had decoded one by one, and continuous batching
// mixes sequences freely, so a seeded or greedy continuation equals the
// uninterrupted one only if every row is summed in the same order whatever
// the batch.
func TestMatMulBatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, cfg := range []Config{{Threads: 2}, {Threads: 2, ExactMatMul: true}} {
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		for _, f := range []tensor.Format{tensor.F32, tensor.BF16, tensor.F16, tensor.Q8_0, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K} {
			N, K := 300, 1024
			h, _ := host(t, r, f, N, K)
			w, err := b.Upload(h)
			if err != nil {
				t.Fatal(err)
			}
			for _, M := range []int{2, 3, 4, 5, 8, 9, 33, 40} {
				t.Run(fmt.Sprintf("exact%v/%v/M%d", cfg.ExactMatMul, f, M), func(t *testing.T) {
					x := randn(r, M*K)
					dst := b.NewTensor(M, N)
					b.MatMul(dst, tensorOf(b, M, K, x), w, nil)
					got := dst.(*Tensor).data
					bad := 0
					for m := range M {
						one := b.NewTensor(1, N)
						b.MatMul(one, tensorOf(b, 1, K, x[m*K:(m+1)*K]), w, nil)
						for n, v := range one.(*Tensor).data {
							if math.Float32bits(v) != math.Float32bits(got[m*N+n]) {
								if bad < 3 {
									t.Errorf("row %d col %d: alone %v, in a batch of %d %v", m, n, v, M, got[m*N+n])
								}
								bad++
							}
						}
					}
					if bad > 0 {
						t.Errorf("%d of %d outputs differ", bad, M*N)
					}
				})
			}
		}
	}
}

// BenchmarkMatMulDecode is one decode row against a 0.6B-shaped projection
// (3072×1024) in each float format.
func BenchmarkMatMulDecode(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	be, err := New(Config{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	t := &testing.T{}
	for _, f := range []tensor.Format{tensor.F32, tensor.BF16} {
		N, K := 3072, 1024
		h, _ := host(t, r, f, N, K)
		w, err := be.Upload(h)
		if err != nil {
			b.Fatal(err)
		}
		x := tensorOf(be, 1, K, randn(r, K))
		dst := be.NewTensor(1, N)
		b.Run(f.String(), func(b *testing.B) {
			b.SetBytes(int64(len(h.Data)))
			for b.Loop() {
				be.MatMul(dst, x, w, nil)
			}
		})
	}
}

// TestMatMulDecodeChunks: a decode product of a matrix big enough for
// matmulInputs' byte-sized chunks (the output head's path) covers every
// row once and equals the one-thread product bit for bit.
func TestMatMulDecodeChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	N, K := 9000, 4096 // 39 MB of Q8_0 > decodeChunk·4·2
	h, _ := host(t, r, tensor.Q8_0, N, K)
	var want []float32
	for _, threads := range []int{1, 2} {
		b, err := New(Config{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		w, err := b.Upload(h)
		if err != nil {
			t.Fatal(err)
		}
		if size := w.(*Weight).k.Bytes(); size <= decodeChunk*4*2 {
			t.Fatalf("matrix of %d bytes does not take the chunked path", size)
		}
		for _, M := range []int{1, 8} {
			x := randn(rand.New(rand.NewPCG(uint64(M), 1)), M*K)
			dst := b.NewTensor(M, N)
			for i := range dst.(*Tensor).data {
				dst.(*Tensor).data[i] = float32(math.NaN()) // a row left out shows
			}
			b.MatMul(dst, tensorOf(b, M, K, x), w, nil)
			got := dst.(*Tensor).data
			for i, v := range got {
				if math.IsNaN(float64(v)) {
					t.Fatalf("threads %d M %d: output %d not written", threads, M, i)
				}
			}
			if threads == 1 {
				want = append(want, got...)
				continue
			}
			ref := want[:M*N]
			want = want[M*N:]
			for i, v := range got {
				if math.Float32bits(v) != math.Float32bits(ref[i]) {
					t.Fatalf("M %d output %d: 2 threads %v, 1 thread %v", M, i, v, ref[i])
				}
			}
		}
		b.Close()
	}
}
