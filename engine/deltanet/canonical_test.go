package deltanet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// slice returns rows [t0, t1) of in.
func (in Inputs) slice(d Dims, t0, t1 int) Inputs {
	kd, vd, nv := d.NumKeyHeads*d.KeyDim, d.NumValueHeads*d.ValueDim, d.NumValueHeads
	return Inputs{T: t1 - t0, Q: in.Q[t0*kd : t1*kd], K: in.K[t0*kd : t1*kd], V: in.V[t0*vd : t1*vd],
		G: in.G[t0*nv : t1*nv], Beta: in.Beta[t0*nv : t1*nv], F32: in.F32}
}

// canonicalCalls runs in through CanonicalInto in calls ending at the given cuts (the
// last one at in.T), starting from a copy of state at absolute position pos, with prompt
// rows [0, prompt). It returns the outputs and the final state.
func canonicalCalls(d Dims, in Inputs, state []float32, pos, prompt int, cuts []int) (out, final []float32) {
	vd := d.NumValueHeads * d.ValueDim
	out = make([]float32, in.T*vd)
	final = slices.Clone(state)
	t0 := 0
	for _, t1 := range cuts {
		CanonicalInto(nil, d, in.slice(d, t0, t1), pos+t0, min(t1, max(0, prompt))-min(t0, max(0, prompt)), final, final, out[t0*vd:t1*vd])
		t0 = t1
	}
	return out, final
}

func sameBits(a, b []float32) int {
	bad := 0
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			bad++
		}
	}
	return bad
}

// The canonical rule gives the same bits however a sequence is cut into calls at
// multiples of ChunkSize and at the prompt's end, also when the calls start from a
// position that is not a multiple; generated rows equal one-token Recurrent calls (decode
// steps); and it stays within rounding of the float64 reference. In float64 and in the
// float32 rule (Inputs.F32), within its tolerance.
func TestCanonicalCallBoundaries(t *testing.T) {
	for _, f32 := range []bool{false, true} {
		t.Run(fmt.Sprintf("f32=%v", f32), func(t *testing.T) { testCanonicalCallBoundaries(t, f32) })
	}
}

func testCanonicalCallBoundaries(t *testing.T, f32 bool) {
	r := rand.New(rand.NewPCG(7, 9))
	d := Dims{NumKeyHeads: 2, NumValueHeads: 4, KeyDim: 16, ValueDim: 8}
	const T, prompt = 200, 150 // prompt rows [0, 150): chunks 64, 64, 22
	in := randomInputs(r, d, T)
	in.F32 = f32
	tol := 1e-6
	if f32 {
		tol = rule32Tol
	}
	state := randn(r, d.StateSize(), 0.3)
	vd := d.NumValueHeads * d.ValueDim

	wantOut, wantState := canonicalCalls(d, in, state, 0, prompt, []int{T})
	// Generated rows: one-token Recurrent calls after the prompt.
	dec, decState := canonicalCalls(d, in, state, 0, prompt, []int{prompt})
	dec = append(dec[:prompt*vd], make([]float32, (T-prompt)*vd)...)
	for t := prompt; t < T; t++ {
		Recurrent(d, in.slice(d, t, t+1), decState, dec[t*vd:(t+1)*vd])
	}
	if bad := sameBits(dec, wantOut); bad > 0 {
		t.Errorf("one call vs prompt + decode steps: %d of %d outputs differ", bad, len(dec))
	}
	if bad := sameBits(decState, wantState); bad > 0 {
		t.Errorf("one call vs prompt + decode steps: %d state values differ", bad)
	}
	for _, cuts := range [][]int{
		{64, T}, {128, T}, {64, 128, prompt, T}, {prompt, 151, 170, T}, {64, 160, 161, T},
		{128, 149, T}, // 149 is inside the last prompt chunk: must differ (checked below)
	} {
		t.Run(fmt.Sprint(cuts), func(t *testing.T) {
			out, st := canonicalCalls(d, in, state, 0, prompt, cuts)
			bad, badState := sameBits(out, wantOut), sameBits(st, wantState)
			if slices.Contains(cuts, 149) {
				// A cut inside a prompt chunk is not canonical: the
				// chunked form depends on where its chunk starts.
				if bad == 0 && badState == 0 {
					t.Errorf("cut inside a prompt chunk gave the same bits: the test cannot see chunk boundaries")
				}
				return
			}
			if bad > 0 || badState > 0 {
				t.Errorf("%d of %d outputs and %d state values differ from one call", bad, len(out), badState)
			}
		})
	}
	// Starting at position 40 (a snapshot or a first call that ended there): chunks end
	// at 64, 128, ... absolute.
	off, offState := canonicalCalls(d, in, state, 40, prompt, []int{24, 88, T})
	one, oneState := canonicalCalls(d, in, state, 40, prompt, []int{T})
	if bad := sameBits(off, one) + sameBits(offState, oneState); bad > 0 {
		t.Errorf("from position 40, cuts at absolute 64 and 128: %d values differ from one call", bad)
	}
	// Within rounding of the float64 reference.
	ref, _ := reference64(d, in, state)
	var num, den float64
	for i := range ref {
		e := float64(wantOut[i]) - ref[i]
		num += e * e
		den += ref[i] * ref[i]
	}
	if e := math.Sqrt(num / den); e > tol {
		t.Errorf("canonical vs float64 reference: rel-L2 %.3g", e)
	}
}

// BenchmarkCanonical: 256 tokens with Qwen3.6-35B-A3B sizes as prompt rows (chunked,
// compare BenchmarkChunked) and as generated rows replayed by a resume (recurrent, state
// rounded after every token).
func BenchmarkCanonical(b *testing.B) {
	d := Dims{NumKeyHeads: 16, NumValueHeads: 32, KeyDim: 128, ValueDim: 128}
	r := rand.New(rand.NewPCG(1, 1))
	in := randomInputs(r, d, 256)
	s := make([]float32, d.StateSize())
	out := make([]float32, in.T*d.NumValueHeads*d.ValueDim)
	for _, c := range []struct {
		name   string
		prompt int
	}{{"prompt", 256}, {"generated", 0}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				CanonicalInto(nil, d, in, 0, c.prompt, s, s, out)
			}
		})
	}
}
