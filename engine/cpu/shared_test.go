package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/tensor"
)

// TestMatMulSharedDenseBitIdentical checks that MatMulShared (one quantized
// input, one parallel job over several matrices) gives the bits of one
// MatMul per matrix, for matrices of one format and of mixed formats
// sharing the input (a Q4_K_M layer's q, k, v: Q4_K and Q6_K, whose 8-row
// interleaves differ), at decode and prefill batch sizes (VNNI and AMX
// paths), in the default and the exact mode.
func TestMatMulSharedDenseBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 19))
	const K = 512
	for _, cfg := range []Config{{Threads: 2}, {Threads: 2, ExactMatMul: true}} {
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		for _, fs := range [][]tensor.Format{
			{tensor.Q8_0, tensor.Q8_0, tensor.Q8_0},
			{tensor.Q4_0, tensor.Q4_0},
			{tensor.Q4_K, tensor.Q6_K, tensor.Q4_K},
			{tensor.Q6_K, tensor.Q4_K, tensor.Q5_K},
			{tensor.Q8_0, tensor.Q6_K, tensor.BF16}, // a float matrix: separate MatMuls
		} {
			ws := make([]engine.Weight, len(fs))
			for i, f := range fs {
				h, _ := host(t, r, f, 136+64*i, K) // a partial last row group
				if ws[i], err = b.Upload(h); err != nil {
					t.Fatal(err)
				}
			}
			for _, M := range []int{1, 3, 8, 13, 16, 40} {
				t.Run(fmt.Sprintf("exact%v/%v/M%d", cfg.ExactMatMul, fs, M), func(t *testing.T) {
					x := tensorOf(b, M, K, randn(r, M*K))
					got := make([]engine.Tensor, len(ws))
					for i, w := range ws {
						got[i] = b.NewTensor(M, w.Rows())
					}
					b.MatMulShared(got, x, ws, false)
					for i, w := range ws {
						want := b.NewTensor(M, w.Rows())
						b.MatMul(want, x, w, nil)
						bad := 0
						for j, v := range want.(*Tensor).data {
							if g := got[i].(*Tensor).data[j]; math.Float32bits(g) != math.Float32bits(v) {
								if bad < 3 {
									t.Errorf("matrix %d (%v) value %d: shared %v, alone %v", i, fs[i], j, g, v)
								}
								bad++
							}
						}
						if bad > 0 {
							t.Errorf("matrix %d (%v): %d of %d values differ", i, fs[i], bad, M*w.Rows())
						}
					}
				})
			}
		}
	}
}
