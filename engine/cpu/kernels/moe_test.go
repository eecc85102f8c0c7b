package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestWeightedRows: WeightedRows (the vector loop and its tail) gives the
// bits of clearing dst and adding w[j]·y_j row after row with the Go loop,
// for row lengths below, at and past the vector width, repeated rows and
// 1 to 9 of them, with special values among the rows.
func TestWeightedRows(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for _, n := range []int{1, 16, 63, 64, 100, 2048, 2049} {
		for _, k := range []int{1, 2, 8, 9} {
			t.Run(fmt.Sprintf("n%d/k%d", n, k), func(t *testing.T) {
				const Y = 12
				y := randF32(r, Y*n)
				y[r.IntN(len(y))] = float32(math.Inf(1))
				y[r.IntN(len(y))] = float32(math.Copysign(0, -1))
				rows, w := make([]int, k), make([]float32, k)
				for j := range rows {
					rows[j], w[j] = r.IntN(Y), r.Float32()*2-1
				}
				rows[k-1] = rows[0]
				want := make([]float32, n)
				for j, row := range rows {
					weightedRowGo(want, w[j], y[row*n:(row+1)*n])
				}
				got := randF32(r, n) // overwritten, not added to
				WeightedRows(got, y, rows, w)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("value %d: %v, want %v", i, got[i], want[i])
					}
				}
			})
		}
	}
}
