package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// TestAxpys2MatchesOneRow: the two-row kernels give every row the bits of
// the one-row kernel called on it alone (f32 and f16 values; widths with
// 128/16/scalar tails; n with 4-step tails, n < 4; strides wider than the
// row; nonzero starting accumulators), on every implementation here.
func TestAxpys2MatchesOneRow(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	cases := []struct{ cols, stride, n int }{
		{128, 128, 16}, {128, 1024, 13}, {128, 1024, 1}, {256, 512, 7}, {144, 300, 5}, {135, 200, 9},
		{16, 16, 128}, {16, 32, 127}, {16, 16, 3}, {16, 16, 1}, {32, 40, 130}, {48, 64, 6},
		{7, 16, 128}, {13, 32, 5}, {32, 32, 128}, {32, 32, 3}, {64, 64, 129}, {160, 256, 33}, {41, 64, 10}, {1, 1, 1}, {17, 17, 4},
	}
	for _, im := range testImpls() {
		im.set()
		for _, tc := range cases {
			v32 := make([]float32, (tc.n-1)*tc.stride+tc.cols)
			v16 := make([]uint16, len(v32))
			for i := range v32 {
				v32[i] = float32(r.NormFloat64())
				v16[i] = tensor.F32ToF16(v32[i])
			}
			p := make([][]float32, 2)
			acc := make([][]float32, 2)
			for k := range p {
				p[k] = make([]float32, tc.n)
				for i := range p[k] {
					p[k][i] = float32(r.NormFloat64())
				}
				acc[k] = make([]float32, tc.cols)
				for i := range acc[k] {
					acc[k][i] = float32(r.NormFloat64())
				}
			}
			check := func(kind string, got, want [][]float32) {
				t.Helper()
				for k := range got {
					for i := range got[k] {
						if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
							t.Fatalf("%s %s cols=%d stride=%d n=%d: row %d col %d = %g, one-row kernel %g",
								im.name, kind, tc.cols, tc.stride, tc.n, k, i, got[k][i], want[k][i])
						}
					}
				}
			}
			clone := func() [][]float32 {
				return [][]float32{append([]float32(nil), acc[0]...), append([]float32(nil), acc[1]...)}
			}
			want, got := clone(), clone()
			AxpysF32(want[0], p[0], v32, tc.stride, tc.n)
			AxpysF32(want[1], p[1], v32, tc.stride, tc.n)
			AxpysF32x2(got[0], got[1], p[0], p[1], v32, tc.stride, tc.n)
			check("f32", got, want)
			want, got = clone(), clone()
			AxpysF16(want[0], p[0], v16, tc.stride, tc.n)
			AxpysF16(want[1], p[1], v16, tc.stride, tc.n)
			AxpysF16x2(got[0], got[1], p[0], p[1], v16, tc.stride, tc.n)
			check("f16", got, want)
			// The prefetching variant (next: another block's values, or
			// this one's rows shifted) changes no bit.
			next := make([]uint16, len(v16))
			for i := range next {
				next[i] = uint16(r.Uint32())
			}
			got = clone()
			AxpysF16x2Next(got[0], got[1], p[0], p[1], v16, next, tc.stride, tc.n)
			check("f16 next", got, want)
			got = clone()
			AxpysF16x2Next(got[0], got[1], p[0], p[1], v16, v16[tc.cols/2:], tc.stride, tc.n)
			check("f16 next shifted", got, want)
		}
		im.restore()
	}
}

// TestPrefetchF16: the prefetch hint reads no more than its bounds allow
// (shorter slices panic, as any kernel here), writes nothing, and copes
// with rows that start anywhere in a cache line.
func TestPrefetchF16(t *testing.T) {
	v := make([]uint16, 4096)
	for i := range v {
		v[i] = uint16(i)
	}
	for _, tc := range []struct{ off, rows, stride, cols int }{
		{0, 1, 0, 4096}, {1, 31, 128, 128}, {31, 7, 500, 3}, {5, 0, 10, 10}, {5, 3, 10, 0}, {4000, 1, 0, 96},
	} {
		PrefetchF16(v[tc.off:], tc.rows, tc.stride, tc.cols)
	}
	for i := range v {
		if v[i] != uint16(i) {
			t.Fatalf("v[%d] = %d after prefetches, want %d", i, v[i], i)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("PrefetchF16 past the slice did not panic")
		}
	}()
	PrefetchF16(v[4000:], 2, 64, 64)
}

// TestAxpysF16TailBits: fewer than 16 columns (the last, partial block of a
// decode step's scores) give the same bits on every implementation here as
// the plain Go loop: the masked AVX-512 tail multiplies and adds exactly as
// that loop compiles on amd64 with GOAMD64 < v3 (no fusion of a*b+c; with
// v3 this test fails and the tail kernel should become an FMA).
func TestAxpysF16TailBits(t *testing.T) {
	r := rand.New(rand.NewPCG(73, 74))
	for _, tc := range []struct{ cols, stride, n int }{{1, 16, 128}, {7, 16, 128}, {15, 16, 128}, {9, 32, 3}, {3, 3, 1}, {12, 1000, 17}} {
		v := make([]uint16, (tc.n-1)*tc.stride+tc.cols)
		for i := range v {
			v[i] = tensor.F32ToF16(float32(r.NormFloat64()))
		}
		p := make([]float32, tc.n)
		acc0 := make([]float32, tc.cols)
		for i := range p {
			p[i] = float32(r.NormFloat64())
		}
		for i := range acc0 {
			acc0[i] = float32(r.NormFloat64())
		}
		// Reference: the Go loop (the last impl of testImpls is plain Go).
		impls := testImpls()
		want := append([]float32(nil), acc0...)
		impls[len(impls)-1].set()
		AxpysF16(want, p, v, tc.stride, tc.n)
		impls[len(impls)-1].restore()
		for _, im := range impls {
			im.set()
			got := append([]float32(nil), acc0...)
			AxpysF16(got, p, v, tc.stride, tc.n)
			im.restore()
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s cols=%d stride=%d n=%d: col %d = %g, scalar loop %g", im.name, tc.cols, tc.stride, tc.n, i, got[i], want[i])
				}
			}
		}
	}
}
