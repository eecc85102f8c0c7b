package deltanet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// rule32Tol is the float32 rule's tolerance (either form, relative L2 of outputs and
// final state) against the float64 reference: float32 rounding (6e-8) grown through the
// ~KeyDim-long dot products, the chunk's forward substitution and the state carried over
// the chunks.
const rule32Tol = 2e-5

// runRule runs the rule in the given form on a copy of state and returns outputs and
// final state.
func runRule(d Dims, in Inputs, state []float32, chunked bool) (out, final []float32) {
	out = make([]float32, in.T*d.NumValueHeads*d.ValueDim)
	final = append([]float32(nil), state...)
	if chunked {
		Chunked(d, in, final, out)
	} else {
		Recurrent(d, in, final, out)
	}
	return out, final
}

// The float32 rule (Inputs.F32) stays within rule32Tol of the float64 reference, in both
// forms, for chunk-sized and ragged lengths, with and without an incoming state, and at
// Qwen3.5/3.6 head sizes (128) where the float32 kernels run whole vectors.
func TestRule32MatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	worst := map[string]float64{}
	defer func() { t.Logf("max rel-L2: %v", worst) }()
	for _, d := range []Dims{
		{NumKeyHeads: 2, NumValueHeads: 4, KeyDim: 16, ValueDim: 16},
		{NumKeyHeads: 1, NumValueHeads: 3, KeyDim: 32, ValueDim: 8},
		{NumKeyHeads: 1, NumValueHeads: 2, KeyDim: 128, ValueDim: 128},
	} {
		for _, T := range []int{1, 2, 7, 63, 64, 65, 150, 200} {
			for _, withState := range []bool{false, true} {
				in, init, want, wantS := ruleCase(r, d, T, withState)
				in.F32 = true
				for _, chunked := range []bool{false, true} {
					out, final := runRule(d, in, init, chunked)
					name := fmt.Sprintf("chunked=%v", chunked)
					for what, e := range map[string]float64{"out": relL2(out, want), "state": relL2(final, wantS)} {
						worst[name+" "+what] = max(worst[name+" "+what], e)
						if !(e < rule32Tol) {
							t.Errorf("dims %+v T=%d state=%v %s: %s rel-L2 %.3g, want < %g", d, T, withState, name, what, e, rule32Tol)
						}
					}
				}
			}
		}
	}
}

// Over a long prompt (2048 tokens, 32 chunks, the state carried through all) the float32
// chunked rule stays as close to the float64 one as over one chunk: no growth of error
// with length, with slow decays (g near 0: the state remembers the whole prompt) and
// fast ones (most of a chunk's exp(G) below the flush).
func TestRule32LongPrompt(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	d := Dims{NumKeyHeads: 1, NumValueHeads: 2, KeyDim: 128, ValueDim: 128}
	const T = 2048
	for _, decay := range []float32{1e-3, 1, 10} {
		in := randomInputs(r, d, T)
		for i := range in.G {
			in.G[i] *= decay
		}
		init := randn(r, d.StateSize(), 0.5)
		want, wantS := runRule(d, in, init, true)
		in.F32 = true
		out, final := runRule(d, in, init, true)
		vd := d.NumValueHeads * d.ValueDim
		head, tail := relL2(out[:64*vd], want[:64*vd]), relL2(out[(T-64)*vd:], want[(T-64)*vd:])
		es := relL2(final, wantS)
		t.Logf("log decays ×%g: first chunk rel-L2 %.3g, last chunk %.3g, final state %.3g", decay, head, tail, es)
		for what, e := range map[string]float64{"first chunk": head, "last chunk": tail, "state": es} {
			if !(e < rule32Tol) {
				t.Errorf("log decays ×%g: %s rel-L2 %.3g against the float64 rule, want < %g", decay, what, e, rule32Tol)
			}
		}
	}
}

// kernel32Tol bounds the float32 kernels against float64 loops, relative to the sum of
// the magnitudes of each element's terms (float32 rounding of a chain of up to 129 terms).
const kernel32Tol = 1e-5

// The float32 kernels (AVX-512 where the CPU has it, 16-column blocks and tails) are
// within kernel32Tol of float64 loops, gemm32 gives every element the bits of gemv32, and
// scale32/mul32 those of Go's multiply, for every width, depth and stride.
func TestKernels32(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	near := func(got float32, want, mag float64) bool {
		return math.Abs(float64(got)-want) <= kernel32Tol*mag
	}
	for _, n := range []int{1, 15, 16, 48, 64, 72, 128, 136, 256, 272} {
		for _, k := range []int{0, 1, 3, 64, 129} {
			for _, scale := range []float32{1, 0.75} {
				ld := n + 5
				a, b, y := to32(randf64(r, max(1, k))), to32(randf64(r, max(1, k)*ld)), to32(randf64(r, n))
				got := append([]float32(nil), y...)
				gemv32(got, a, b, k, ld, n, scale)
				for j := range got {
					want, mag := float64(scale)*float64(y[j]), math.Abs(float64(scale)*float64(y[j]))
					for x := 0; x < k; x++ {
						p := float64(a[x]) * float64(b[x*ld+j])
						want, mag = want+p, mag+math.Abs(p)
					}
					if !near(got[j], want, mag) {
						t.Fatalf("n=%d k=%d scale=%g: gemv32 y[%d] = %v, want %v", n, k, scale, j, got[j], want)
					}
				}
				if scale == 1 && k == 1 {
					// One multiply per element: the same bits as Go's.
					sc, mu := make([]float32, n), make([]float32, n)
					scale32(sc, y, a[0])
					mul32(mu, y, b[:n])
					for j := range y {
						if sc[j] != a[0]*y[j] || mu[j] != y[j]*b[j] {
							t.Fatalf("n=%d: scale32/mul32 [%d] = %v/%v, want %v/%v", n, j, sc[j], mu[j], a[0]*y[j], y[j]*b[j])
						}
					}
				}
				m := k
				s, x := to32(randf64(r, max(1, m)*ld)), to32(randf64(r, n))
				d := make([]float32, len(s))
				ger32(d, s, a, x, m, ld, n, scale)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						p, q := float64(a[i])*float64(x[j]), float64(scale)*float64(s[i*ld+j])
						if !near(d[i*ld+j], p+q, math.Abs(p)+math.Abs(q)) {
							t.Fatalf("n=%d m=%d scale=%g: ger32 d[%d,%d] = %v, want %v", n, m, scale, i, j, d[i*ld+j], p+q)
						}
					}
				}
				inPlace := append([]float32(nil), s...)
				ger32(inPlace, inPlace, a, x, m, ld, n, scale)
				for i := 0; i < m; i++ {
					if bad := sameBits(inPlace[i*ld:i*ld+n], d[i*ld:i*ld+n]); bad > 0 {
						t.Fatalf("n=%d m=%d: ger32 in place differs in %d values of row %d", n, m, bad, i)
					}
				}
				for _, rows := range []int{1, 4, 7, 9} {
					A := to32(randf64(r, rows*max(1, k)))
					Y := to32(randf64(r, rows*ld))
					want := append([]float32(nil), Y...)
					for i := 0; i < rows; i++ {
						gemv32(want[i*ld:], A[i*max(1, k):], b, k, ld, n, scale)
					}
					gemm32(Y, ld, A, max(1, k), b, ld, rows, k, n, scale)
					if bad := sameBits(Y, want); bad > 0 {
						t.Fatalf("n=%d k=%d rows=%d: gemm32 differs from gemv32 in %d values", n, k, rows, bad)
					}
				}
			}
		}
	}
}

// BenchmarkChunked32, BenchmarkRecurrent32 and BenchmarkRecurrentCold32 are the
// benchmarks without 32 with the float32 rule.
func BenchmarkChunked32(b *testing.B)       { benchChunked(b, true) }
func BenchmarkRecurrent32(b *testing.B)     { benchRecurrent(b, true) }
func BenchmarkRecurrentCold32(b *testing.B) { benchRecurrentCold(b, true) }
