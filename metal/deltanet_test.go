//go:build linux || darwin

package metal

import (
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/tensor"
)

func f32Host(v []float32, shape ...int) *tensor.Host {
	h := &tensor.Host{Name: "w", Format: tensor.F32, Shape: shape}
	for _, x := range v {
		h.Data = appendF32(h.Data, x)
	}
	return h
}

// TestGatedDeltaNet runs two sequences through prefill (37 and 5 tokens),
// mixed steps, an undone step and a reset, against the CPU backend.
func TestGatedDeltaNet(t *testing.T) {
	b := newBoth(t)
	p := engine.DeltaNetParams{KeyHeads: 2, ValueHeads: 4, KeyDim: 40, ValueDim: 36, ConvKernel: 4, Eps: 1e-6}
	C, vd, nv := p.ConvDim(), p.ValueHeads*p.ValueDim, p.ValueHeads
	scaled := func(n int, s float32) []float32 {
		v := randn(b.rand, n)
		for i := range v {
			v[i] *= s
		}
		return v
	}
	var wm, wc engine.DeltaNetWeights
	wm.Conv, wc.Conv = b.weight(f32Host(scaled(C*p.ConvKernel, 0.5), C, p.ConvKernel))
	wm.ALog, wc.ALog = b.weight(f32Host(scaled(nv, 1), nv))
	wm.DtBias, wc.DtBias = b.weight(f32Host(scaled(nv, 1), nv))
	wm.Norm, wc.Norm = b.weight(f32Host(scaled(p.ValueDim, 1), p.ValueDim))
	var sm, sc [2]engine.DeltaNetState
	for i := range 2 {
		var err error
		if sm[i], err = b.m.NewDeltaNetState(p); err != nil {
			t.Fatal(err)
		}
		if sc[i], err = b.c.NewDeltaNetState(p); err != nil {
			t.Fatal(err)
		}
	}
	step := func(na, nb int) {
		T := na + nb
		qkv, z, bb, a := b.tensor(T, C, nil), b.tensor(T, vd, nil), b.tensor(T, nv, nil), b.tensor(T, nv, nil)
		d := pair{m: b.m.NewTensor(T, vd), c: b.c.NewTensor(T, vd), rows: T, cols: vd}
		seqs := func(s [2]engine.DeltaNetState) []engine.DeltaNetSeq {
			return []engine.DeltaNetSeq{{State: s[0], Row: 0, N: na, Pos: s[0].Len()}, {State: s[1], Row: na, N: nb, Pos: s[1].Len()}}
		}
		b.m.GatedDeltaNet(d.m, qkv.m, z.m, bb.m, a.m, wm, seqs(sm), p)
		b.c.GatedDeltaNet(d.c, qkv.c, z.c, bb.c, a.c, wc, seqs(sc), p)
		b.check("gated deltanet", d, 1e-4)
	}
	step(37, 5)
	step(1, 1)
	step(2, 9)
	// Undo the last step on both, then continue; then reset sequence 0.
	for _, s := range [][2]engine.DeltaNetState{sm, sc} {
		if err := s[0].Truncate(38); err != nil {
			t.Fatal(err)
		}
		if err := s[1].Truncate(6); err != nil {
			t.Fatal(err)
		}
	}
	step(1, 3)
	for _, s := range [][2]engine.DeltaNetState{sm, sc} {
		if err := s[0].Truncate(0); err != nil {
			t.Fatal(err)
		}
		if err := s[1].(engine.TruncateChecker).CanTruncate(3); err == nil {
			t.Fatal("CanTruncate(3) of a recurrent state: no error")
		}
	}
	step(3, 1)
	if sm[0].Len() != 3 || sm[1].Len() != 10 {
		t.Fatalf("state lengths %d, %d; want 3, 10", sm[0].Len(), sm[1].Len())
	}
}
