//go:build linux || darwin

package metal

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/tensor"
)

// TestMoE compares the MoE block (routing, gathered experts, shared expert)
// with the CPU backend for several token counts and weight formats.
func TestMoE(t *testing.T) {
	b := newBoth(t)
	const E, H, inter, shared = 6, 64, 40, 24
	for _, c := range []struct {
		name   string
		f      tensor.Format
		shared bool
		norm   bool
		k      int
	}{{"bf16", tensor.BF16, false, true, 2}, {"q8_0+shared", tensor.Q8_0, true, false, 3}} {
		mk := func(rows, cols int) (engine.Weight, engine.Weight) {
			f := c.f
			if f == tensor.Q8_0 && cols%32 != 0 {
				f = tensor.BF16
			}
			return b.weight(hostOf(b.rand, f, rows, cols))
		}
		var wm, wc engine.MoEWeights
		wm.Router, wc.Router = mk(E, H)
		for range E {
			var em, ec engine.Expert
			em.Gate, ec.Gate = mk(inter, H)
			em.Up, ec.Up = mk(inter, H)
			em.Down, ec.Down = mk(H, inter)
			wm.Experts, wc.Experts = append(wm.Experts, em), append(wc.Experts, ec)
		}
		if c.shared {
			var em, ec engine.Expert
			em.Gate, ec.Gate = mk(shared, H)
			em.Up, ec.Up = mk(shared, H)
			em.Down, ec.Down = mk(H, shared)
			wm.Shared, wc.Shared = &em, &ec
			wm.SharedGate, wc.SharedGate = mk(1, H)
		}
		p := engine.MoEParams{TopK: c.k, Normalize: c.norm}
		for _, T := range []int{1, 5, 33} {
			x := b.tensor(T, H, nil)
			d := pair{m: b.m.NewTensor(T, H), c: b.c.NewTensor(T, H), rows: T, cols: H}
			b.m.MoE(d.m, x.m, &wm, p)
			b.c.MoE(d.c, x.c, &wc, p)
			b.check("moe "+c.name, d, 1e-5)
		}
	}
}

// TestMoERouteNaN: a token whose router logits are NaN (a NaN input row)
// still routes inside the expert table (the gathered kernels would read a
// pointer at index 0xffffffff, a crash) and its output is NaN, so the step
// fails downstream (ErrNaNLogits); the other token's row is unaffected.
func TestMoERouteNaN(t *testing.T) {
	be := newEmu(t)
	r := rand.New(rand.NewPCG(13, 14))
	const E, H, inter = 6, 64, 40
	up := func(rows, cols int) engine.Weight {
		w, err := be.Upload(hostOf(r, tensor.BF16, rows, cols))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	var w engine.MoEWeights
	w.Router = up(E, H)
	for range E {
		w.Experts = append(w.Experts, engine.Expert{Gate: up(inter, H), Up: up(inter, H), Down: up(H, inter)})
	}
	xv := randn(r, 2*H)
	xv[3] = float32(math.NaN())
	x, y := be.NewTensor(2, H), be.NewTensor(2, H)
	be.Write(x, xv)
	be.MoE(y, x, &w, engine.MoEParams{TopK: 2, Normalize: true})
	out := make([]float32, 2*H)
	if err := be.Read(y, out); err != nil {
		t.Fatal(err)
	}
	for i, v := range out {
		if nan := math.IsNaN(float64(v)); nan != (i < H) {
			t.Fatalf("output %d = %v: want NaN exactly in the NaN token's row", i, v)
		}
	}
}
