package kernels

import (
	"math/rand/v2"
	"testing"
)

// TestMLXPackParallel: matrices big enough for several repacking workers
// (≥ 1 MiB of codes each) decode every row exactly as the source does.
func TestMLXPackParallel(t *testing.T) {
	if !usePacked() {
		t.Skip("no packed MLX layout on this machine (needs AVX-512 VNNI)")
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, bits := range []int{4, 8} {
		h := randMLX(r, bits, 64, 2096, 2048) // 2–4 MiB, 131 row groups
		m, err := Prepare(h)
		if err != nil {
			t.Fatal(err)
		}
		want, got := make([]float32, h.Cols()), make([]float32, h.Cols())
		for n := range h.Rows() {
			h.DecodeRow(n, want)
			m.DecodeRow(n, got)
			for k := range want {
				if got[k] != want[k] {
					t.Fatalf("mlx%d row %d col %d: %g, want %g", bits, n, k, got[k], want[k])
				}
			}
		}
	}
}
