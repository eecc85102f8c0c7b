package cpu

import (
	"fmt"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
	"github.com/macpool/macpool/engine/tensor"
)

// mBlock is how many rows of x one pass over a chunk of weight rows covers:
// x rows of a block stay in cache while each weight row is loaded (and
// decoded) once per block.
const mBlock = 32

// MatMul sets dst = x·wᵀ (+ bias). Work is split over weight rows, so every
// weight byte is read by one goroutine; a weight row is decoded once per
// block of mBlock rows of x and reused for all of them.
func (b *Backend) MatMul(dst, x engine.Tensor, w engine.Weight, bias engine.Weight) {
	d, xt, wt := tt(dst), tt(x), ww(w)
	M, K, N := xt.rows, xt.cols, wt.rows
	if wt.cols != K || d.rows != M || d.cols != N {
		panic(fmt.Sprintf("cpu: matmul x [%d, %d] · w [%d, %d]ᵀ into [%d, %d]", M, K, wt.rows, wt.cols, d.rows, d.cols))
	}
	var bv []float32
	if bias != nil {
		bw := ww(bias)
		if bw.rows*bw.cols != N || bw.f32 == nil {
			panic(fmt.Sprintf("cpu: matmul bias [%d, %d] for %d outputs", bw.rows, bw.cols, N))
		}
		bv = bw.f32
	}
	if wt.k != nil { // SIMD kernels (matmul_kernels.go)
		b.matmulKernels(d, xt, wt, bv)
		return
	}
	// Decode (M < 4): fused kernels that read each weight byte once. Otherwise
	// each weight row is decoded to float32 once per block of mBlock x rows
	// and multiplied with the SIMD float32 dot (engine/cpu/kernels).
	fused := M < 4 && wt.u16 != nil && wt.format == tensor.BF16
	// Chunks of weight rows: big enough to amortise scheduling, small
	// enough to balance (parallel makes ~4 chunks per thread).
	b.parallel(N, 16, func(lo, hi, wk int) {
		if fused {
			for m := 0; m < M; m++ {
				xr, out := xt.row(m), d.row(m)
				for n := lo; n < hi; n++ {
					out[n] = kernels.DotBF16(xr, wt.u16[n*K:(n+1)*K])
				}
			}
		} else {
			buf := b.scratchBuf(wk, K)
			for m0 := 0; m0 < M; m0 += mBlock {
				m1 := min(M, m0+mBlock)
				for n := lo; n < hi; n++ {
					wr := wt.rowF32(n, buf)
					for m := m0; m < m1; m++ {
						d.data[m*N+n] = kernels.DotF32(xt.row(m), wr)
					}
				}
			}
		}
		if bv != nil {
			for m := 0; m < M; m++ {
				r := d.data[m*N : (m+1)*N]
				for n := lo; n < hi; n++ {
					r[n] += bv[n]
				}
			}
		}
	})
}

// dot is the float32 dot product (SIMD where available).
func dot(a, b []float32) float32 { return kernels.DotF32(a, b) }
