package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// TestF16Conversions: the vector conversions equal tensor.F32ToF16 /
// F16ToF32 bit for bit (lengths with tails; values from subnormal to
// overflow, signed zeros, infinities) on every implementation here.
func TestF16Conversions(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	special := []float32{0, float32(math.Copysign(0, -1)), 65504, 65520, -70000, 1e-8, -3e-6, 6.1e-5, 1e-30,
		float32(math.Inf(1)), float32(math.Inf(-1)), 1.00048828125, 1.000732421875}
	for _, im := range testImpls() {
		im.set()
		for _, n := range []int{1, 15, 16, 17, 64, 133} {
			src := make([]float32, n)
			for i := range src {
				src[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(12)-7)))
				if i < len(special) && n > 20 {
					src[i] = special[i]
				}
			}
			h := make([]uint16, n)
			F32ToF16(h, src)
			back := make([]float32, n)
			F16ToF32(back, h)
			for i := range src {
				if want := tensor.F32ToF16(src[i]); h[i] != want {
					t.Fatalf("%s n=%d: F32ToF16(%g) = %#04x, want %#04x", im.name, n, src[i], h[i], want)
				}
				if want := tensor.F16ToF32(h[i]); math.Float32bits(back[i]) != math.Float32bits(want) {
					t.Fatalf("%s n=%d: F16ToF32(%#04x) = %g, want %g", im.name, n, h[i], back[i], want)
				}
			}
		}
		im.restore()
	}
}

// TestAxpysF16: the f16 probability-weighted sum equals a float64 sum of the
// widened values within 1e-6 of Σ|terms| (widths with 128/16 tails, strides
// wider than the row).
func TestAxpysF16(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, im := range testImpls() {
		im.set()
		for _, tc := range []struct{ cols, stride, n int }{{128, 128, 5}, {128, 1024, 33}, {16, 32, 128}, {32, 32, 128}, {7, 32, 128}, {150, 300, 3}, {1, 1, 1}, {16, 32, 7}, {16, 16, 5}, {32, 40, 4}} {
			v := make([]uint16, (tc.n-1)*tc.stride+tc.cols)
			for i := range v {
				v[i] = tensor.F32ToF16(float32(r.NormFloat64()))
			}
			p := make([]float32, tc.n)
			for i := range p {
				p[i] = float32(r.Float64())
			}
			acc := make([]float32, tc.cols)
			for i := range acc {
				acc[i] = float32(r.NormFloat64())
			}
			want := make([]float64, tc.cols)
			abs := make([]float64, tc.cols)
			for c := range acc {
				want[c], abs[c] = float64(acc[c]), math.Abs(float64(acc[c]))
				for j := range tc.n {
					x := float64(p[j]) * float64(tensor.F16ToF32(v[j*tc.stride+c]))
					want[c] += x
					abs[c] += math.Abs(x)
				}
			}
			AxpysF16(acc, p, v, tc.stride, tc.n)
			for c := range acc {
				if math.Abs(float64(acc[c])-want[c]) > 1e-6*abs[c] {
					t.Fatalf("%s %+v col %d: got %g, want %g", im.name, tc, c, acc[c], want[c])
				}
			}
		}
		im.restore()
	}
}

// TestSiLUMulNegBits: the vectorised SiLUMul and Neg give the bits of
// their scalar definitions for every length (tails of the 16-wide loops),
// in place too, on values that include zeros, infinities and subnormals.
func TestSiLUMulNegBits(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 3))
	for _, n := range []int{1, 15, 16, 17, 100, 1027} {
		g, u, e := randF32(r, n), randF32(r, n), randF32(r, n)
		for i := range e {
			e[i] = float32(math.Exp(float64(-g[i])))
		}
		g[0], e[n-1] = 0, float32(math.Inf(1))
		if n > 2 {
			u[1], g[2] = 1e-40, float32(math.Inf(-1))
		}
		want := make([]float32, n)
		neg := make([]float32, n)
		for i := range want {
			want[i] = g[i] / (1 + e[i]) * u[i]
			neg[i] = -g[i]
		}
		got := make([]float32, n)
		SiLUMul(got, g, u, e)
		inPlace := append([]float32(nil), g...)
		SiLUMul(inPlace, inPlace, u, e)
		gotNeg := make([]float32, n)
		Neg(gotNeg, g)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) || math.Float32bits(inPlace[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n=%d: SiLUMul[%d] = %v (in place %v), want %v", n, i, got[i], inPlace[i], want[i])
			}
			if math.Float32bits(gotNeg[i]) != math.Float32bits(neg[i]) {
				t.Fatalf("n=%d: Neg[%d] = %v, want %v", n, i, gotNeg[i], neg[i])
			}
		}
	}
}
