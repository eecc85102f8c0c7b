package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/deltanet"
	"github.com/macpool/macpool/engine/moe"
	"github.com/macpool/macpool/engine/tensor"
)

func f32Weight(t *testing.T, b *Backend, v []float32, shape ...int) engine.Weight {
	t.Helper()
	h := &tensor.Host{Name: "w", Format: tensor.F32, Shape: shape, Data: make([]byte, 4*len(v))}
	for i, x := range v {
		binary.LittleEndian.PutUint32(h.Data[4*i:], math.Float32bits(x))
	}
	w, err := b.Upload(h)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func hybridRelL2(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

func scaled(r *rand.Rand, n int, s float32) []float32 {
	v := randn(r, n)
	for i := range v {
		v[i] *= s
	}
	return v
}

func TestGatedDeltaNetBatchAndUndo(t *testing.T) {
	b := newBackend(t, 2)
	r := rand.New(rand.NewPCG(1, 2))
	p := engine.DeltaNetParams{KeyHeads: 2, ValueHeads: 4, KeyDim: 8, ValueDim: 6, ConvKernel: 4, Eps: 1e-6}
	C, vd, nv := p.ConvDim(), p.ValueHeads*p.ValueDim, p.ValueHeads
	w := engine.DeltaNetWeights{
		Conv:   f32Weight(t, b, scaled(r, C*p.ConvKernel, 0.5), C, p.ConvKernel),
		ALog:   f32Weight(t, b, scaled(r, nv, 1), nv),
		DtBias: f32Weight(t, b, scaled(r, nv, 1), nv),
		Norm:   f32Weight(t, b, scaled(r, p.ValueDim, 1), p.ValueDim),
	}
	type input struct{ qkv, z, bb, a []float32 }
	mk := func(n int) input {
		return input{randn(r, n*C), randn(r, n*vd), randn(r, n*nv), randn(r, n*nv)}
	}
	// run feeds each input to its state in one batch and returns each output.
	run := func(states []engine.DeltaNetState, ins []input) [][]float32 {
		var all input
		var seqs []engine.DeltaNetSeq
		T := 0
		for i, in := range ins {
			n := len(in.bb) / nv
			seqs = append(seqs, engine.DeltaNetSeq{State: states[i], Row: T, N: n, Pos: states[i].Len()})
			all.qkv, all.z = append(all.qkv, in.qkv...), append(all.z, in.z...)
			all.bb, all.a = append(all.bb, in.bb...), append(all.a, in.a...)
			T += n
		}
		dst := b.NewTensor(T, vd)
		b.GatedDeltaNet(dst, tensorOf(b, T, C, all.qkv), tensorOf(b, T, vd, all.z), tensorOf(b, T, nv, all.bb), tensorOf(b, T, nv, all.a), w, seqs, p)
		var out [][]float32
		for _, s := range seqs {
			out = append(out, append([]float32(nil), tt(dst).data[s.Row*vd:(s.Row+s.N)*vd]...))
		}
		return out
	}
	newState := func() engine.DeltaNetState {
		s, err := b.NewDeltaNetState(p)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	prefix, ins := mk(10), []input{mk(70), mk(1), mk(3)}
	// Alone: sequence 1 and 2 continue a 10-token prefix.
	var alone [][]float32
	for i, in := range ins {
		s := newState()
		if i > 0 {
			run([]engine.DeltaNetState{s}, []input{prefix})
		}
		alone = append(alone, run([]engine.DeltaNetState{s}, []input{in})[0])
	}
	states := []engine.DeltaNetState{newState(), newState(), newState()}
	run(states[1:2], []input{prefix})
	run(states[2:3], []input{prefix})
	got := run(states, ins)
	for i := range ins {
		if e := hybridRelL2(got[i], alone[i]); e > 1e-6 {
			t.Errorf("sequence %d: batched vs alone rel-L2 %.3g", i, e)
		}
	}
	if n := states[0].Len(); n != 70 {
		t.Errorf("state length %d, want 70", n)
	}

	// Undo: truncating to the length before the last call restores that state.
	s := states[1]
	fresh := newState()
	run([]engine.DeltaNetState{fresh}, []input{prefix})
	before := run([]engine.DeltaNetState{fresh}, []input{ins[2]})[0]
	if err := s.Truncate(10); err != nil {
		t.Fatalf("undo to 10: %v", err)
	}
	again := run([]engine.DeltaNetState{s}, []input{ins[2]})[0]
	if e := hybridRelL2(again, before); e != 0 {
		t.Errorf("after undo: rel-L2 %.3g, want identical", e)
	}
	if err := s.Truncate(5); err == nil {
		t.Error("truncate to 5: no error, want one")
	}
}

func TestMoE(t *testing.T) {
	b := newBackend(t, 2)
	r := rand.New(rand.NewPCG(3, 4))
	const T, H, I, E, K = 9, 16, 8, 6, 2
	mlp := func() (engine.Expert, [3][]float32) {
		g, u, d := scaled(r, I*H, 0.3), scaled(r, I*H, 0.3), scaled(r, H*I, 0.3)
		return engine.Expert{Gate: f32Weight(t, b, g, I, H), Up: f32Weight(t, b, u, I, H), Down: f32Weight(t, b, d, H, I)}, [3][]float32{g, u, d}
	}
	naive := func(m [3][]float32, x []float32) []float64 {
		h := make([]float64, I)
		for i := range h {
			var g, u float64
			for j := 0; j < H; j++ {
				g += float64(m[0][i*H+j]) * float64(x[j])
				u += float64(m[1][i*H+j]) * float64(x[j])
			}
			h[i] = g / (1 + math.Exp(-g)) * u
		}
		y := make([]float64, H)
		for o := range y {
			for i := range h {
				y[o] += float64(m[2][o*I+i]) * h[i]
			}
		}
		return y
	}
	router := scaled(r, E*H, 1)
	w := &engine.MoEWeights{Router: f32Weight(t, b, router, E, H)}
	var ew [][3][]float32
	for e := 0; e < E; e++ {
		ex, raw := mlp()
		w.Experts = append(w.Experts, ex)
		ew = append(ew, raw)
	}
	shared, sraw := mlp()
	sgate := scaled(r, H, 1)
	x := randn(r, T*H)
	for _, withShared := range []bool{false, true} {
		for _, norm := range []bool{false, true} {
			if withShared {
				w.Shared, w.SharedGate = &shared, f32Weight(t, b, sgate, 1, H)
			} else {
				w.Shared, w.SharedGate = nil, nil
			}
			dst := b.NewTensor(T, H)
			b.MoE(dst, tensorOf(b, T, H, x), w, engine.MoEParams{TopK: K, Normalize: norm})
			want := make([]float32, T*H)
			for tok := 0; tok < T; tok++ {
				xr := x[tok*H : (tok+1)*H]
				logits := make([]float32, E)
				for e := range logits {
					var s float64
					for j := 0; j < H; j++ {
						s += float64(router[e*H+j]) * float64(xr[j])
					}
					logits[e] = float32(s)
				}
				idx, wt := make([]int, K), make([]float32, K)
				moe.Route(logits, K, norm, idx, wt)
				acc := make([]float64, H)
				for s, e := range idx {
					for o, v := range naive(ew[e], xr) {
						acc[o] += float64(wt[s]) * v
					}
				}
				if withShared {
					var g float64
					for j := 0; j < H; j++ {
						g += float64(sgate[j]) * float64(xr[j])
					}
					for o, v := range naive(sraw, xr) {
						acc[o] += v / (1 + math.Exp(-g))
					}
				}
				for o, v := range acc {
					want[tok*H+o] = float32(v)
				}
			}
			if e := hybridRelL2(tt(dst).data, want); e > 1e-5 {
				t.Errorf("shared=%v normalize=%v: rel-L2 %.3g, want < 1e-5", withShared, norm, e)
			}
		}
	}
}

// A sequence longer than deltaPiece (processed in pieces) matches the reference pipeline
// run in one pass.
func TestGatedDeltaNetLongSequence(t *testing.T) {
	b := newBackend(t, 2)
	r := rand.New(rand.NewPCG(5, 6))
	p := engine.DeltaNetParams{KeyHeads: 1, ValueHeads: 2, KeyDim: 4, ValueDim: 4, ConvKernel: 3, Eps: 1e-6}
	C, vd, nv, K := p.ConvDim(), p.ValueHeads*p.ValueDim, p.ValueHeads, p.ConvKernel
	N := deltaPiece + 77
	conv, aLog, dt, nw := scaled(r, C*K, 0.5), scaled(r, nv, 1), scaled(r, nv, 1), scaled(r, p.ValueDim, 1)
	w := engine.DeltaNetWeights{Conv: f32Weight(t, b, conv, C, K), ALog: f32Weight(t, b, aLog, nv),
		DtBias: f32Weight(t, b, dt, nv), Norm: f32Weight(t, b, nw, p.ValueDim)}
	qkv, z, bb, a := randn(r, N*C), randn(r, N*vd), randn(r, N*nv), randn(r, N*nv)
	st, err := b.NewDeltaNetState(p)
	if err != nil {
		t.Fatal(err)
	}
	dst := b.NewTensor(N, vd)
	b.GatedDeltaNet(dst, tensorOf(b, N, C, qkv), tensorOf(b, N, vd, z), tensorOf(b, N, nv, bb), tensorOf(b, N, nv, a),
		w, []engine.DeltaNetSeq{{State: st, Row: 0, N: N}}, p)

	d := dims(p)
	kd := p.KeyHeads * p.KeyDim
	mixed := make([]float32, N*C)
	deltanet.CausalConv1D(mixed, qkv, N, C, conv, K, make([]float32, (K-1)*C))
	in := deltanet.Inputs{T: N, Q: make([]float32, N*kd), K: make([]float32, N*kd), V: make([]float32, N*vd),
		G: make([]float32, N*nv), Beta: make([]float32, N*nv)}
	for i := 0; i < N; i++ {
		copy(in.Q[i*kd:], mixed[i*C:i*C+kd])
		copy(in.K[i*kd:], mixed[i*C+kd:i*C+2*kd])
		copy(in.V[i*vd:], mixed[i*C+2*kd:(i+1)*C])
	}
	deltanet.Gates(in.Beta, in.G, bb, a, aLog, dt, N, nv)
	want := make([]float32, N*vd)
	deltanet.Chunked(d, in, make([]float32, d.StateSize()), want)
	deltanet.GatedRMSNorm(want, want, z, nw, N*nv, p.ValueDim, p.Eps)
	if e := hybridRelL2(tt(dst).data, want); e > 1e-6 {
		t.Errorf("pieces vs one pass rel-L2 %.3g, want < 1e-6", e)
	}
	if st.Len() != N {
		t.Errorf("state length %d, want %d", st.Len(), N)
	}
}

// With a PromptEnd, one long call (pieces of about deltaPiece inside) gives the bits of
// calls cut at absolute multiples of the chunk size and at the prompt's end followed by
// one-token decode steps, outputs and state, from a position that is not a multiple.
func TestGatedDeltaNetPromptEndPieces(t *testing.T) {
	b := newBackend(t, 2)
	r := rand.New(rand.NewPCG(7, 8))
	p := engine.DeltaNetParams{KeyHeads: 1, ValueHeads: 2, KeyDim: 4, ValueDim: 4, ConvKernel: 3, Eps: 1e-6}
	C, vd, nv, K := p.ConvDim(), p.ValueHeads*p.ValueDim, p.ValueHeads, p.ConvKernel
	const pos0 = 40 // the first call's rows
	N := deltaPiece + 150
	total := pos0 + N
	promptEnd := total - 30
	w := engine.DeltaNetWeights{Conv: f32Weight(t, b, scaled(r, C*K, 0.5), C, K), ALog: f32Weight(t, b, scaled(r, nv, 1), nv),
		DtBias: f32Weight(t, b, scaled(r, nv, 1), nv), Norm: f32Weight(t, b, scaled(r, p.ValueDim, 1), p.ValueDim)}
	qkv, z, bb, a := randn(r, total*C), randn(r, total*vd), randn(r, total*nv), randn(r, total*nv)
	// feed runs rows [t0, t1) through st in one call and returns the outputs.
	feed := func(st engine.DeltaNetState, t0, t1 int) []float32 {
		n := t1 - t0
		dst := b.NewTensor(n, vd)
		b.GatedDeltaNet(dst, tensorOf(b, n, C, qkv[t0*C:t1*C]), tensorOf(b, n, vd, z[t0*vd:t1*vd]),
			tensorOf(b, n, nv, bb[t0*nv:t1*nv]), tensorOf(b, n, nv, a[t0*nv:t1*nv]),
			w, []engine.DeltaNetSeq{{State: st, Row: 0, N: n, Pos: st.Len(), PromptEnd: promptEnd}}, p)
		return tt(dst).data
	}
	newState := func() engine.DeltaNetState {
		st, err := b.NewDeltaNetState(p)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	one := newState()
	feed(one, 0, pos0)
	got := feed(one, pos0, total)

	cut := newState()
	feed(cut, 0, pos0)
	var want []float32
	for _, c := range [][2]int{{pos0, 64}, {64, 64 + deltaPiece}, {64 + deltaPiece, promptEnd}} {
		want = append(want, feed(cut, c[0], c[1])...)
	}
	for t0 := promptEnd; t0 < total; t0++ {
		want = append(want, feed(cut, t0, t0+1)...)
	}
	bad := 0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("one call vs cut calls: %d of %d outputs differ", bad, len(want))
	}
	s1, s2 := one.(*deltaState), cut.(*deltaState)
	for i := range s1.rule {
		if math.Float32bits(s1.rule[i]) != math.Float32bits(s2.rule[i]) {
			t.Fatalf("state value %d: %g vs %g", i, s1.rule[i], s2.rule[i])
		}
	}
}

// MatMulShared gives the bits of one MatMul (or MatMulPrecise) per weight: quantized
// weights of several sizes and formats (one input quantized once, one job), a float32
// weight among them (one MatMul each), and PreciseHybrid (float32 activations).
func TestMatMulSharedBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	const K = 256
	for _, precise := range []bool{false, true} {
		b, err := New(Config{Threads: 2, PreciseHybrid: precise})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		up := func(f tensor.Format, rows int) engine.Weight {
			h, _ := host(t, r, f, rows, K)
			w, err := b.Upload(h)
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		sets := map[string][]engine.Weight{
			"q8_0":   {up(tensor.Q8_0, 96), up(tensor.Q8_0, 32), up(tensor.Q8_0, 8)},
			"mixed":  {up(tensor.Q6_K, 48), up(tensor.Q4_K, 64), up(tensor.Q8_0, 16)},
			"with32": {up(tensor.Q8_0, 64), f32Weight(t, b, scaled(r, 16*K, 1), 16, K)},
		}
		for name, ws := range sets {
			for _, M := range []int{1, 3, 16, 40} {
				t.Run(fmt.Sprintf("precise=%v/%s/M%d", precise, name, M), func(t *testing.T) {
					x := tensorOf(b, M, K, randn(r, M*K))
					// The shared products first: the references must not leave
					// this x's quantization in the pooled input.
					got, want := make([]engine.Tensor, len(ws)), make([]engine.Tensor, len(ws))
					for i, w := range ws {
						got[i], want[i] = b.NewTensor(M, w.Rows()), b.NewTensor(M, w.Rows())
					}
					b.MatMulShared(got, x, ws, true)
					for i, w := range ws {
						b.MatMulPrecise(want[i], x, w)
						if bad := diffBits(got[i].(*Tensor).data, want[i].(*Tensor).data); bad > 0 {
							t.Errorf("weight %d: %d values differ from MatMulPrecise", i, bad)
						}
					}
					x = tensorOf(b, M, K, randn(r, M*K))
					b.MatMulShared(got, x, ws, false)
					for i := range ws {
						b.MatMul(want[i], x, ws[i], nil)
						if bad := diffBits(got[i].(*Tensor).data, want[i].(*Tensor).data); bad > 0 {
							t.Errorf("weight %d: %d values differ from MatMul", i, bad)
						}
					}
				})
			}
		}
	}
}

func diffBits(a, b []float32) int {
	bad := 0
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			bad++
		}
	}
	return bad
}
