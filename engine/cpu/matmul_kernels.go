package cpu

// Glue to engine/cpu/kernels: weights with a SIMD kernel
// are prepared at upload (quantized ones repacked for AVX-512 VNNI) and
// multiplied by kernels.Matrix.MatMul over ranges of weight rows, one range
// per worker chunk; quantized weights first quantize the activation rows to
// int8 blocks, in parallel.

import (
	"errors"
	"sync"

	"github.com/macpool/macpool/engine/cpu/kernels"
	"github.com/macpool/macpool/engine/tensor"
)

// uploadKernel prepares w.k for a matrix whose format has a kernel.
// copied reports that the kernels hold their own copy of the data (packed
// or quantized at load), so w no longer references h.
func (b *Backend) uploadKernel(w *Weight, h *tensor.Host) (copied bool, err error) {
	if q := b.quantize; q != 0 && quantizable(h) {
		m, err := kernels.QuantizeMatrix(h, q)
		if err != nil {
			return false, err
		}
		w.k, w.format, w.host = m, q, nil
		return true, nil
	}
	if len(h.Shape) != 2 || h.Rows() < 2 {
		return false, nil // vectors: decoded to float32 by Upload
	}
	if prepare, ok := kquantPrepare[h.Format]; ok {
		// K-quants are packed natively for the VNNI kernels, their AVX2
		// one-row versions or the arm64 SDOT kernels (kernels/kquant*.go:
		// the same bits on all; codes kept packed, within 3%
		// of the file size; rows decode bit-identically, so ExactMatMul uses
		// them too).
		// `--quantize q8` requantizes to Q8_0 (above).
		m, err := prepare(h)
		if err == nil {
			w.k, w.host = m, nil
			return true, nil
		}
		if !errors.Is(err, kernels.ErrUnsupported) {
			return false, err // malformed tensor
		}
		if !b.exact && h.Cols()%32 == 0 {
			// No native kernel on this machine (x86 without AVX2, arm64
			// without the dot-product extension): requantized to Q8_0 (1.3× a Q6_K file, 1.9× Q4_K) for
			// the vectorized Q8_0 kernels, ~10× the row decoder's speed.
			// ExactMatMul keeps the exact row decoder.
			m, err := kernels.QuantizeMatrix(h, tensor.Q8_0)
			if err != nil {
				return false, err
			}
			w.k, w.format, w.host = m, tensor.Q8_0, nil
			return true, nil
		}
	}
	m, err := kernels.Prepare(h)
	if err != nil {
		return false, nil // no kernel: the DecodeRow path
	}
	w.k = m
	if m.Copied() {
		w.host = nil
		return true, nil
	}
	return false, nil
}

var kquantPrepare = map[tensor.Format]func(*tensor.Host) (*kernels.Matrix, error){
	tensor.Q4_K: kernels.PrepareQ4K,
	tensor.Q5_K: kernels.PrepareQ5K,
	tensor.Q6_K: kernels.PrepareQ6K,
}

// quantizable: float and k-quant matrices (no kernel of their own yet:
// requantized from their exact row decoding) whose rows are whole blocks
// of 32.
func quantizable(h *tensor.Host) bool {
	switch h.Format {
	case tensor.F32, tensor.F16, tensor.BF16, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K:
		return len(h.Shape) == 2 && h.Rows() > 1 && h.Cols()%32 == 0
	}
	return false
}

var inputs = sync.Pool{New: func() any { return new(kernels.Input) }}

func (b *Backend) matmulKernels(d, xt *Tensor, wt *Weight, bv []float32) {
	M, K, N := xt.rows, xt.cols, wt.rows
	k := wt.k
	in := inputs.Get().(*kernels.Input)
	defer inputs.Put(in)
	in.Reset(xt.data, M, K)
	exact := b.exact && k.Quantized()
	if k.Quantized() && !exact {
		b.parallel(M, max(1, 8192/K), func(lo, hi, _ int) { in.QuantizeRows(lo, hi) })
	}
	if !exact && bv == nil && k.Quantized() {
		b.matmulInputs(in, []*Tensor{d}, []*Weight{wt})
		return
	}
	align := k.RowAlign()
	units := (N + align - 1) / align
	b.parallel(units, max(1, 64/align), func(lo, hi, _ int) {
		n0, n1 := lo*align, min(N, hi*align)
		if exact {
			k.MatMulExact(d.data, N, in, n0, n1)
		} else {
			k.MatMul(d.data, N, in, n0, n1)
		}
		if bv != nil {
			for m := 0; m < M; m++ {
				r := d.data[m*N : (m+1)*N]
				for n := n0; n < n1; n++ {
					r[n] += bv[n]
				}
			}
		}
	})
}

// matmulInputs sets dsts[i] = in·ws[i]ᵀ for quantized weights with the
// already quantized input in, in one parallel job over all the matrices'
// weight rows (a MoE expert's gate and up share their input).
func (b *Backend) matmulInputs(in *kernels.Input, dsts []*Tensor, ws []*Weight) {
	type part struct {
		k            *kernels.Matrix
		d            []float32
		N, align, u0 int // rows, row alignment, first unit
	}
	parts := make([]part, len(ws))
	units, grain, size := 0, 1, 0
	for i, w := range ws {
		a := w.k.RowAlign()
		parts[i] = part{w.k, dsts[i].data, w.rows, a, units}
		units += (w.rows + a - 1) / a
		grain = max(grain, 64/a)
		size += w.k.Bytes()
	}
	run := func(lo, hi, _ int) {
		for _, p := range parts {
			end := p.u0 + (p.N+p.align-1)/p.align
			l, h := max(lo, p.u0), min(hi, end)
			if l < h {
				p.k.MatMul(p.d, p.N, in, (l-p.u0)*p.align, min(p.N, (h-p.u0)*p.align))
			}
		}
	}
	if in.M > decodeRows || size <= decodeChunk*4*b.threads {
		b.parallel(units, grain, run)
		return
	}
	// Decode of a big matrix (the output head: 0.5-1 GB): ~4 chunks per
	// thread would be 100+ MB each, so a thread slowed by another process
	// leaves the other core idle for up to a chunk at the end. Chunks of
	// decodeChunk bytes bound that tail; each costs one atomic add.
	b.parallelGrain(units, max(grain, int(int64(units)*decodeChunk/int64(size))), run)
}

// decodeRows is the most activation rows for which matmulInputs sizes its
// chunks by weight bytes (decodeChunk), and decodeChunk that size: a few
// MiB is ~0.2 ms of streaming, against ~50 ns to claim a chunk.
const (
	decodeRows  = 8
	decodeChunk = 4 << 20
)
