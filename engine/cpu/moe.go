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

// expertQuantized is expert for the rows `tokens` of the quantized batch
// qx: a new [n, H] tensor.
func (b *Backend) expertQuantized(qx *kernels.Input, tokens []int, e engine.Expert, n, inter, H int) engine.Tensor {
	in := inputs.Get().(*kernels.Input)
	defer inputs.Put(in)
	in.GatherRows(qx, tokens)
	g, u := b.NewTensor(n, inter), b.NewTensor(n, inter)
	b.matmulInputs(in, []*Tensor{tt(g), tt(u)}, []*Weight{ww(e.Gate), ww(e.Up)})
	b.SwiGLU(g, g, u)
	y := b.NewTensor(n, H)
	b.MatMul(y, g, e.Down, nil)
	b.Release(g)
	b.Release(u)
	return y
}
