package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/tensor"
)

// TestMoESharedInputBitIdentical: the experts' quantized rows gathered from
// one quantization of the batch give the bits of quantizing each expert's
// gathered float rows (quantized weights; batches from a few rows to
// AMX-sized ones).
func TestMoESharedInputBitIdentical(t *testing.T) {
	b := newBackend(t, 2)
	r := rand.New(rand.NewPCG(5, 6))
	const H, I, E, K = 256, 256, 4, 2
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_K} {
		up := func(rows, cols int) engine.Weight {
			h, _ := host(t, r, f, rows, cols)
			w, err := b.Upload(h)
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		w := &engine.MoEWeights{Router: f32Weight(t, b, scaled(r, E*H, 1), E, H)}
		for range E {
			w.Experts = append(w.Experts, engine.Expert{Gate: up(I, H), Up: up(I, H), Down: up(H, I)})
		}
		for _, T := range []int{1, 5, 40, 97} {
			t.Run(fmt.Sprintf("%v/T%d", f, T), func(t *testing.T) {
				x := tensorOf(b, T, H, randn(r, T*H))
				run := func(shared bool) []float32 {
					defer func(v bool) { moeSharedInput = v }(moeSharedInput)
					moeSharedInput = shared
					dst := b.NewTensor(T, H)
					b.MoE(dst, x, w, engine.MoEParams{TopK: K, Normalize: true})
					return dst.(*Tensor).data
				}
				want, got := run(false), run(true)
				bad := 0
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						if bad < 3 {
							t.Errorf("token %d value %d: gathered float rows %v, shared input %v", i/H, i%H, want[i], got[i])
						}
						bad++
					}
				}
				if bad > 0 {
					t.Errorf("%d of %d values differ", bad, len(got))
				}
			})
		}
	}
}
