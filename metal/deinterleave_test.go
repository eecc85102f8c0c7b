package metal

import (
	"slices"
	"testing"

	"github.com/macpool/macpool/engine"
)

// TestDeinterleaveBits: the one deinterleave dispatch replaces two copy2d
// dispatches per head (gated-attention q/gate split); its output must be
// bit-identical to theirs and to the CPU backend's, for a decode row, for
// rows wider than one threadgroup with pieces straddling threadgroups, and
// for single-value pieces.
func TestDeinterleaveBits(t *testing.T) {
	b := newBoth(t)
	for _, tc := range []struct{ rows, n, chunk int }{{1, 16, 256}, {5, 9, 37}, {3, 1, 1}} {
		cols := tc.n * tc.chunk
		src := b.tensor(tc.rows, 2*cols, nil)
		fa, fb := b.tensor(tc.rows, cols, nil), b.tensor(tc.rows, cols, nil)
		ca, cb := b.tensor(tc.rows, cols, nil), b.tensor(tc.rows, cols, nil)
		b.m.Deinterleave(fa.m, fb.m, src.m, tc.chunk)
		b.c.Deinterleave(fa.c, fb.c, src.c, tc.chunk)
		for h := 0; h < tc.n; h++ {
			b.m.Copy(ca.m, 0, h*tc.chunk, src.m, 0, 2*h*tc.chunk, tc.rows, tc.chunk)
			b.m.Copy(cb.m, 0, h*tc.chunk, src.m, 0, (2*h+1)*tc.chunk, tc.rows, tc.chunk)
		}
		read := func(be engine.Backend, x engine.Tensor) []float32 {
			v := make([]float32, tc.rows*cols)
			if err := be.Read(x, v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		for i, p := range [][2]pair{{fa, ca}, {fb, cb}} {
			fused, copies, ref := read(b.m, p[0].m), read(b.m, p[1].m), read(b.c, p[0].c)
			if !slices.Equal(fused, copies) {
				t.Errorf("rows %d, %d pieces of %d, half %d: deinterleave differs from the per-head copy2d dispatches", tc.rows, tc.n, tc.chunk, i)
			}
			if !slices.Equal(fused, ref) {
				t.Errorf("rows %d, %d pieces of %d, half %d: metal deinterleave differs from the cpu backend's", tc.rows, tc.n, tc.chunk, i)
			}
		}
	}
}
