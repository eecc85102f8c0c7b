package deltanet

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
)

func randn(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

func relL2(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

// randomInputs makes inputs with the statistics of a real layer: g from the Qwen gate
// formula, beta in (0,1).
func randomInputs(r *rand.Rand, d Dims, T int) Inputs {
	nv := d.NumValueHeads
	b, a := randn(r, T*nv, 1), randn(r, T*nv, 1)
	aLog, dt := randn(r, nv, 1), randn(r, nv, 1)
	in := Inputs{
		T:    T,
		Q:    randn(r, T*d.NumKeyHeads*d.KeyDim, 1),
		K:    randn(r, T*d.NumKeyHeads*d.KeyDim, 1),
		V:    randn(r, T*nv*d.ValueDim, 1),
		G:    make([]float32, T*nv),
		Beta: make([]float32, T*nv),
	}
	Gates(in.Beta, in.G, b, a, aLog, dt, T, nv)
	return in
}

// reference64 is the recurrent form in float64, written straight from
// torch_recurrent_gated_delta_rule.
func reference64(d Dims, in Inputs, state []float32) (out, final []float64) {
	dk, dv, nv := d.KeyDim, d.ValueDim, d.NumValueHeads
	r := nv / d.NumKeyHeads
	kd := d.NumKeyHeads * dk
	S := make([]float64, len(state))
	for i, v := range state {
		S[i] = float64(v)
	}
	out = make([]float64, in.T*nv*dv)
	norm := func(x []float32) []float64 {
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = float64(v) / math.Sqrt(ss+L2NormEps)
		}
		return y
	}
	for t := 0; t < in.T; t++ {
		for h := 0; h < nv; h++ {
			kh := h / r
			q := norm(in.Q[t*kd+kh*dk : t*kd+(kh+1)*dk])
			k := norm(in.K[t*kd+kh*dk : t*kd+(kh+1)*dk])
			for i := range q {
				q[i] /= math.Sqrt(float64(dk))
			}
			Sh := S[h*dk*dv : (h+1)*dk*dv]
			dec := math.Exp(float64(in.G[t*nv+h]))
			for i := range Sh {
				Sh[i] *= dec
			}
			for j := 0; j < dv; j++ {
				var m float64
				for i := 0; i < dk; i++ {
					m += Sh[i*dv+j] * k[i]
				}
				delta := (float64(in.V[t*nv*dv+h*dv+j]) - m) * float64(in.Beta[t*nv+h])
				var o float64
				for i := 0; i < dk; i++ {
					Sh[i*dv+j] += k[i] * delta
					o += Sh[i*dv+j] * q[i]
				}
				out[t*nv*dv+h*dv+j] = o
			}
		}
	}
	return out, S
}

func to32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

// ruleCase makes random inputs of T tokens and an incoming state (zeros unless
// withState), with the float64 reference's outputs and final state rounded to float32.
func ruleCase(r *rand.Rand, d Dims, T int, withState bool) (in Inputs, init, want, wantState []float32) {
	in = randomInputs(r, d, T)
	init = make([]float32, d.StateSize())
	if withState {
		init = randn(r, d.StateSize(), 0.5)
	}
	out, final := reference64(d, in, init)
	return in, init, to32(out), to32(final)
}

// Tolerance of the float32 delta rule (either form) against the float64 reference, and of
// the chunked form against the recurrent one, as relative L2 error.
const ruleTol = 1e-6

func TestGatedDeltaRuleChunkedMatchesRecurrent(t *testing.T) {
	dims := []Dims{
		{NumKeyHeads: 2, NumValueHeads: 4, KeyDim: 16, ValueDim: 16},
		{NumKeyHeads: 1, NumValueHeads: 3, KeyDim: 32, ValueDim: 8},
		{NumKeyHeads: 2, NumValueHeads: 2, KeyDim: 8, ValueDim: 24},
	}
	r := rand.New(rand.NewPCG(1, 2))
	worst := map[string]float64{}
	defer func() { t.Logf("max rel-L2: %v", worst) }()
	for _, d := range dims {
		for _, T := range []int{1, 2, 7, 63, 64, 65, 128, 150, 200} {
			for _, withState := range []bool{false, true} {
				in, init, wantOut, wantState := ruleCase(r, d, T, withState)

				sRec := append([]float32(nil), init...)
				oRec := make([]float32, T*d.NumValueHeads*d.ValueDim)
				Recurrent(d, in, sRec, oRec)

				sCh := append([]float32(nil), init...)
				oCh := make([]float32, len(oRec))
				Chunked(d, in, sCh, oCh)

				errs := map[string]float64{
					"recurrent out":   relL2(oRec, wantOut),
					"recurrent state": relL2(sRec, wantState),
					"chunked out":     relL2(oCh, wantOut),
					"chunked state":   relL2(sCh, wantState),
					"chunked vs rec":  relL2(oCh, oRec),
					"state ch vs rec": relL2(sCh, sRec),
				}
				for name, e := range errs {
					worst[name] = max(worst[name], e)
					if !(e < ruleTol) {
						t.Errorf("dims %+v T=%d state=%v: %s rel-L2 %.3g, want < %g", d, T, withState, name, e, ruleTol)
					}
				}
			}
		}
	}
}

// Prefill in pieces (chunked) then decode token by token equals one chunked pass.
func TestGatedDeltaRuleSplit(t *testing.T) {
	d := Dims{NumKeyHeads: 2, NumValueHeads: 4, KeyDim: 16, ValueDim: 16}
	r := rand.New(rand.NewPCG(3, 4))
	T := 100
	in := randomInputs(r, d, T)
	vd := d.NumValueHeads * d.ValueDim
	whole := make([]float32, T*vd)
	sWhole := make([]float32, d.StateSize())
	Chunked(d, in, sWhole, whole)

	parts := make([]float32, T*vd)
	s := make([]float32, d.StateSize())
	slice := func(t0, t1 int) Inputs {
		kd, nv := d.NumKeyHeads*d.KeyDim, d.NumValueHeads
		return Inputs{T: t1 - t0, Q: in.Q[t0*kd : t1*kd], K: in.K[t0*kd : t1*kd], V: in.V[t0*vd : t1*vd],
			G: in.G[t0*nv : t1*nv], Beta: in.Beta[t0*nv : t1*nv]}
	}
	Chunked(d, slice(0, 70), s, parts[:70*vd])
	for t0 := 70; t0 < T; t0++ {
		Recurrent(d, slice(t0, t0+1), s, parts[t0*vd:(t0+1)*vd])
	}
	if e := relL2(parts, whole); e > ruleTol {
		t.Errorf("split out rel-L2 %.3g, want < %g", e, ruleTol)
	}
	if e := relL2(s, sWhole); e > ruleTol {
		t.Errorf("split state rel-L2 %.3g, want < %g", e, ruleTol)
	}
}

func TestCausalConv1D(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, K := range []int{1, 2, 4} {
		C, T := 300, 9
		x := randn(r, T*C, 1)
		w := randn(r, C*K, 1)
		init := randn(r, (K-1)*C, 1)
		// Direct formula on state++x.
		full := append(append([]float32(nil), init...), x...)
		want := make([]float32, T*C)
		for tt := 0; tt < T; tt++ {
			for c := 0; c < C; c++ {
				var acc float64
				for j := 0; j < K; j++ {
					acc += float64(w[c*K+j]) * float64(full[(tt+j)*C+c])
				}
				want[tt*C+c] = float32(acc / (1 + math.Exp(-acc)))
			}
		}
		// In pieces: 1, 1, 3, 4 tokens (pieces shorter and longer than K-1).
		state := append([]float32(nil), init...)
		got := make([]float32, T*C)
		t0 := 0
		for _, n := range []int{1, 1, 3, 4} {
			CausalConv1D(got[t0*C:(t0+n)*C], x[t0*C:(t0+n)*C], n, C, w, K, state)
			t0 += n
		}
		if e := relL2(got, want); e > 1e-6 {
			t.Errorf("K=%d: conv rel-L2 %.3g, want < 1e-6", K, e)
		}
		wantState := full[len(full)-(K-1)*C:]
		for i := range wantState {
			if state[i] != wantState[i] {
				t.Fatalf("K=%d: state[%d] = %g, want %g", K, i, state[i], wantState[i])
			}
		}
	}
}

func TestGatedRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	n, dim := 5, 16
	x, z, w := randn(r, n*dim, 2), randn(r, n*dim, 1), randn(r, dim, 1)
	got := make([]float32, n*dim)
	GatedRMSNorm(got, x, z, w, n, dim, 1e-6)
	want := make([]float32, n*dim)
	for i := 0; i < n; i++ {
		var ss float64
		for j := 0; j < dim; j++ {
			ss += float64(x[i*dim+j]) * float64(x[i*dim+j])
		}
		inv := 1 / math.Sqrt(ss/float64(dim)+1e-6)
		for j := 0; j < dim; j++ {
			zz := float64(z[i*dim+j])
			want[i*dim+j] = float32(float64(w[j]) * float64(x[i*dim+j]) * inv * zz / (1 + math.Exp(-zz)))
		}
	}
	if e := relL2(got, want); e > 1e-6 {
		t.Errorf("gated rmsnorm rel-L2 %.3g, want < 1e-6", e)
	}
}

// GatesOn spreads tokens over workers: every value as a one-token Gates call gives it.
func TestGatesOnMatchesPerToken(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const T, nv = 300, 32
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(3 * r.NormFloat64())
		}
		return v
	}
	b, a, aLog, dt := vec(T*nv), vec(T*nv), vec(nv), vec(nv)
	beta, g := make([]float32, T*nv), make([]float32, T*nv)
	GatesOn(nil, beta, g, b, a, aLog, dt, T, nv)
	wb, wg := make([]float32, nv), make([]float32, nv)
	for tok := 0; tok < T; tok++ {
		Gates(wb, wg, b[tok*nv:(tok+1)*nv], a[tok*nv:(tok+1)*nv], aLog, dt, 1, nv)
		if !slices.Equal(wb, beta[tok*nv:(tok+1)*nv]) || !slices.Equal(wg, g[tok*nv:(tok+1)*nv]) {
			t.Fatalf("token %d: GatesOn differs from a one-token Gates call", tok)
		}
	}
}

func TestGates(t *testing.T) {
	beta, g := make([]float32, 2), make([]float32, 2)
	Gates(beta, g, []float32{0, 2}, []float32{25, -1}, []float32{0.5, 0}, []float32{0, 1}, 1, 2)
	wantG0 := -math.Exp(0.5) * 25 // softplus above threshold 20 is the identity
	wantG1 := -1 * math.Log1p(math.Exp(0))
	if math.Abs(float64(g[0])-wantG0) > 1e-4 || math.Abs(float64(g[1])-wantG1) > 1e-6 {
		t.Errorf("g = %v, want [%g %g]", g, wantG0, wantG1)
	}
	if beta[0] != 0.5 || math.Abs(float64(beta[1])-1/(1+math.Exp(-2))) > 1e-7 {
		t.Errorf("beta = %v", beta)
	}
}

func BenchmarkChunked(b *testing.B) { benchChunked(b, false) }

// benchChunked: 256 tokens with Qwen3.6-35B-A3B sizes through the chunked rule.
func benchChunked(b *testing.B, f32 bool) {
	d := Dims{NumKeyHeads: 16, NumValueHeads: 32, KeyDim: 128, ValueDim: 128}
	r := rand.New(rand.NewPCG(1, 1))
	in := randomInputs(r, d, 256)
	in.F32 = f32
	s := make([]float32, d.StateSize())
	out := make([]float32, in.T*d.NumValueHeads*d.ValueDim)
	for b.Loop() {
		Chunked(d, in, s, out)
	}
}

func BenchmarkRecurrent(b *testing.B) { benchRecurrent(b, false) }

// benchRecurrent: one decode token with Qwen3.6-35B-A3B sizes.
func benchRecurrent(b *testing.B, f32 bool) {
	d := Dims{NumKeyHeads: 16, NumValueHeads: 32, KeyDim: 128, ValueDim: 128}
	r := rand.New(rand.NewPCG(1, 1))
	in := randomInputs(r, d, 1)
	in.F32 = f32
	s := make([]float32, d.StateSize())
	out := make([]float32, in.T*d.NumValueHeads*d.ValueDim)
	for b.Loop() {
		Recurrent(d, in, s, out)
	}
}

// The Into forms leave the incoming state untouched and write what the in-place forms do.
func TestIntoKeepsIncomingState(t *testing.T) {
	d := Dims{NumKeyHeads: 2, NumValueHeads: 4, KeyDim: 8, ValueDim: 8}
	r := rand.New(rand.NewPCG(9, 9))
	for _, c := range []struct {
		T   int
		f32 bool
	}{{1, false}, {70, false}, {1, true}, {70, true}} {
		T := c.T
		in := randomInputs(r, d, T)
		in.F32 = c.f32
		init := randn(r, d.StateSize(), 0.5)
		inPlace := append([]float32(nil), init...)
		from, to := append([]float32(nil), init...), make([]float32, d.StateSize())
		o1, o2 := make([]float32, T*d.NumValueHeads*d.ValueDim), make([]float32, T*d.NumValueHeads*d.ValueDim)
		if T == 1 {
			Recurrent(d, in, inPlace, o1)
			RecurrentInto(nil, d, in, from, to, o2)
		} else {
			Chunked(d, in, inPlace, o1)
			ChunkedInto(nil, d, in, from, to, o2)
		}
		if relL2(o2, o1) != 0 || relL2(to, inPlace) != 0 || relL2(from, init) != 0 {
			t.Errorf("T=%d f32=%v: Into differs from the in-place form or changed its input state", T, c.f32)
		}
	}
}

// Q, K and V as views into shared rows (Inputs.Stride, the conv output's layout) give the
// bits of separate dense slices, in every form and both precisions.
func TestStridedInputs(t *testing.T) {
	d := Dims{NumKeyHeads: 2, NumValueHeads: 4, KeyDim: 16, ValueDim: 8}
	r := rand.New(rand.NewPCG(21, 22))
	kd, vd, C := d.NumKeyHeads*d.KeyDim, d.NumValueHeads*d.ValueDim, d.ConvDim()
	for _, c := range []struct {
		T   int
		f32 bool
	}{{1, false}, {70, false}, {1, true}, {70, true}} {
		T, f32 := c.T, c.f32
		in := randomInputs(r, d, T)
		in.F32 = f32
		rows := make([]float32, T*C)
		for tk := 0; tk < T; tk++ {
			copy(rows[tk*C:], in.Q[tk*kd:(tk+1)*kd])
			copy(rows[tk*C+kd:], in.K[tk*kd:(tk+1)*kd])
			copy(rows[tk*C+2*kd:], in.V[tk*vd:(tk+1)*vd])
		}
		st := Inputs{T: T, Q: rows, K: rows[kd:], V: rows[2*kd:], G: in.G, Beta: in.Beta, Stride: C, F32: f32}
		init := randn(r, d.StateSize(), 0.5)
		for name, run := range map[string]func(Inputs, []float32, []float32){
			"recurrent": func(x Inputs, s, o []float32) { Recurrent(d, x, s, o) },
			"chunked":   func(x Inputs, s, o []float32) { Chunked(d, x, s, o) },
			"canonical": func(x Inputs, s, o []float32) { CanonicalInto(nil, d, x, 3, T/2, s, s, o) },
		} {
			s1, s2 := append([]float32(nil), init...), append([]float32(nil), init...)
			o1, o2 := make([]float32, T*vd), make([]float32, T*vd)
			run(in, s1, o1)
			run(st, s2, o2)
			if bad := sameBits(o1, o2) + sameBits(s1, s2); bad > 0 {
				t.Errorf("T=%d f32=%v %s: %d values differ with strided inputs", T, f32, name, bad)
			}
		}
	}
}

// BenchmarkRecurrentCold is BenchmarkRecurrent with the state read from and written to
// memory the caches do not hold (64 sequences' states in turn, 128 MiB each way), as in
// a decode step that streams the weights between two visits of a layer.
func BenchmarkRecurrentCold(b *testing.B) { benchRecurrentCold(b, false) }

func benchRecurrentCold(b *testing.B, f32 bool) {
	d := Dims{NumKeyHeads: 16, NumValueHeads: 32, KeyDim: 128, ValueDim: 128}
	r := rand.New(rand.NewPCG(1, 1))
	in := randomInputs(r, d, 1)
	in.F32 = f32
	const n = 64
	from, to := make([][]float32, n), make([][]float32, n)
	for i := range from {
		from[i], to[i] = make([]float32, d.StateSize()), make([]float32, d.StateSize())
	}
	out := make([]float32, in.T*d.NumValueHeads*d.ValueDim)
	i := 0
	for b.Loop() {
		RecurrentInto(nil, d, in, from[i%n], to[i%n], out)
		i++
	}
}

// CausalConv1DActOn hands act every output value exactly once, after the convolution,
// and leaves the state as CausalConv1D does.
func TestCausalConv1DAct(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	const K = 4
	for _, dims := range [][2]int{{1, 300}, {9, 1100}, {70, 64}} {
		T, C := dims[0], dims[1]
		x, w, init := randn(r, T*C, 1), randn(r, C*K, 1), randn(r, (K-1)*C, 1)
		want, wantState := make([]float32, T*C), append([]float32(nil), init...)
		CausalConv1D(want, x, T, C, w, K, wantState)
		got, state := make([]float32, T*C), append([]float32(nil), init...)
		var seen atomic.Int64
		CausalConv1DActOn(nil, got, x, T, C, w, K, state, func(block, tmp []float32) {
			if len(tmp) != len(block) {
				t.Errorf("tmp of %d for a block of %d", len(tmp), len(block))
			}
			seen.Add(int64(len(block)))
			for i, v := range block {
				block[i] = v / (1 + float32(math.Exp(float64(-v))))
			}
		})
		if n := seen.Load(); n != int64(T*C) {
			t.Errorf("T=%d C=%d: act saw %d values, want %d", T, C, n, T*C)
		}
		if e := relL2(got, want); e > 1e-6 {
			t.Errorf("T=%d C=%d: rel-L2 %.3g vs CausalConv1D", T, C, e)
		}
		if bad := sameBits(state, wantState); bad > 0 {
			t.Errorf("T=%d C=%d: %d state values differ", T, C, bad)
		}
	}
}
