package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestRMSNorm: every implementation gives the bits of the one-chain
// definition (sequential float64 sum of squares, then the float32 scaling)
// for lengths around the vector widths (8 and 16 values per step, 32 per
// unrolled step), row scales from 1e-3 to 1e3, offsets 0 and 1 (Qwen3.5's
// 1+w norms), out beside x and in place.
func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const eps float32 = 1e-6
	for _, impl := range testImpls() {
		impl.set()
		for _, n := range []int{1, 7, 8, 15, 16, 17, 31, 32, 33, 48, 100, 128, 1024, 4097} {
			for _, offset := range []float32{0, 1} {
				name := fmt.Sprintf("%s/n%d/offset%v", impl.name, n, offset)
				bad := 0
				for row := range 200 {
					scale := float32(math.Pow(10, float64(row%7-3)))
					x, w := make([]float32, n), make([]float32, n)
					for i := range x {
						x[i] = float32(r.NormFloat64()) * scale
						w[i] = float32(r.NormFloat64())
					}
					var ss float64
					for _, v := range x {
						ss += float64(v) * float64(v)
					}
					inv := float32(1 / math.Sqrt(ss/float64(n)+float64(eps)))
					want := make([]float32, n)
					for i, v := range x {
						want[i] = (offset + w[i]) * (v * inv)
					}
					got := make([]float32, n)
					RMSNorm(got, x, w, eps, offset)
					RMSNorm(x, x, w, eps, offset) // in place
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) || math.Float32bits(x[i]) != math.Float32bits(want[i]) {
							if bad == 0 {
								t.Errorf("%s row %d: value %d = %v (in place %v), want %v", name, row, i, got[i], x[i], want[i])
							}
							bad++
							break
						}
					}
				}
				if bad > 0 {
					t.Errorf("%s: %d of 200 rows differ", name, bad)
				}
			}
		}
		impl.restore()
	}
}
