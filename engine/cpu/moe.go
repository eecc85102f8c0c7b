package cpu

import (
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
)

// The routed experts of a MoE batch on quantized kernels: the batch is
// quantized once (every token goes to TopK experts: quantizing each
// expert's gathered rows again did the same work TopK times), each expert
// gathers its tokens' quantized rows (a quarter of the bytes of the float
// rows) and runs gate and up in one parallel job. Quantization is row by
// row, so the experts see the bits they saw before.

// moeSharedInput enables moeInput (a variable for the test that compares
// it with gathering float rows).
var moeSharedInput = true

// moeInput quantizes x for the experts' gate and up projections, or
// returns nil when they do not all run quantized kernels on the same
// activations (float or exact weights: the float path).
func (b *Backend) moeInput(x *Tensor, w *engine.MoEWeights) *kernels.Input {
	if !moeSharedInput || b.exact || x.cols%kernels.QK != 0 {
		return nil
	}
	for _, ex := range w.Experts {
		for _, m := range []engine.Weight{ex.Gate, ex.Up} {
			if k := ww(m).k; k == nil || !k.Quantized() {
				return nil
			}
		}
	}
	in := inputs.Get().(*kernels.Input)
	in.Reset(x.data, x.rows, x.cols)
	b.parallel(x.rows, max(1, 8192/x.cols), func(lo, hi, _ int) { in.QuantizeRows(lo, hi) })
	return in
}

// moeScratch holds one expert's activations for the quantized path,
// reused from expert to expert of a MoE call: the experts' [n, inter] and
// [n, H] tensors were ~100 MB of garbage per 512-token prefill of a
// 2-layer Qwen3-30B-A3B.
type moeScratch struct{ g, u, y []float32 }

func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

// expertQuantized is expert for the rows `tokens` of the quantized batch
// qx; the [n, H] result lives in sc until the next call.
func (b *Backend) expertQuantized(qx *kernels.Input, tokens []int, e engine.Expert, n, inter, H int, sc *moeScratch) *Tensor {
	in := inputs.Get().(*kernels.Input)
	defer inputs.Put(in)
	in.GatherRows(qx, tokens)
	sc.g, sc.u, sc.y = grow(sc.g, n*inter), grow(sc.u, n*inter), grow(sc.y, n*H)
	g, u, y := &Tensor{n, inter, sc.g}, &Tensor{n, inter, sc.u}, &Tensor{n, H, sc.y}
	b.matmulInputs(in, []*Tensor{g, u}, []*Weight{ww(e.Gate), ww(e.Up)})
	b.SwiGLU(g, g, u) // every value written: no zeroing needed, here or in the MatMuls
	b.MatMul(y, g, e.Down, nil)
	return y
}
