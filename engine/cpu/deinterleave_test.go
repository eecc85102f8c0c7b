package cpu

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/macpool/macpool/engine"
)

// TestDeinterleaveMatchesCopies: Deinterleave replaces the two Copy calls
// per head of the gated-attention q/gate split, so it must produce exactly
// what those copies produce (and what the layout says) for every shape,
// including a decode row, pieces that do not divide a worker's range and rows
// spread over both workers.
func TestDeinterleaveMatchesCopies(t *testing.T) {
	b := newBackend(t, 2)
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ rows, n, chunk int }{{1, 16, 256}, {5, 9, 37}, {3, 1, 1}, {37, 4, 64}} {
		cols := tc.n * tc.chunk
		v := make([]float32, tc.rows*2*cols)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		src := b.NewTensor(tc.rows, 2*cols)
		b.Write(src, v)
		qa, qb := b.NewTensor(tc.rows, cols), b.NewTensor(tc.rows, cols)
		ca, cb := b.NewTensor(tc.rows, cols), b.NewTensor(tc.rows, cols)
		b.Deinterleave(qa, qb, src, tc.chunk)
		for h := 0; h < tc.n; h++ {
			b.Copy(ca, 0, h*tc.chunk, src, 0, 2*h*tc.chunk, tc.rows, tc.chunk)
			b.Copy(cb, 0, h*tc.chunk, src, 0, (2*h+1)*tc.chunk, tc.rows, tc.chunk)
		}
		got, want := make([]float32, tc.rows*cols), make([]float32, tc.rows*cols)
		for i, p := range [][2]engine.Tensor{{qa, ca}, {qb, cb}} {
			if err := b.Read(p[0], got); err != nil {
				t.Fatal(err)
			}
			if err := b.Read(p[1], want); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("rows %d, %d pieces of %d: half %d differs from the per-head copies", tc.rows, tc.n, tc.chunk, i)
			}
		}
		// The layout itself: b's last piece h of row 0 is src columns from (2h+1)*chunk.
		if err := b.Read(qb, got); err != nil {
			t.Fatal(err)
		}
		if h := tc.n - 1; got[h*tc.chunk] != v[(2*h+1)*tc.chunk] {
			t.Errorf("rows %d, %d pieces of %d: b[0][%d] = %v, want src[0][%d] = %v", tc.rows, tc.n, tc.chunk, h*tc.chunk, got[h*tc.chunk], (2*h+1)*tc.chunk, v[(2*h+1)*tc.chunk])
		}
	}
}
