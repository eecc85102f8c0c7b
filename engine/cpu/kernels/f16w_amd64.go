package kernels

// F16 weights on AVX-512: the structure of
// matmulFloatFast (4×4 tiles over chunks of 64 weight rows, one-row
// kernels for the activation rows and weight rows the tiles leave over)
// with halves widened in registers (f16w_amd64.s). Every output is summed
// in the tiles' order, so a row's result does not depend on the batch.
func matmulF16Fast(m *Matrix, dst []float32, ldd int, in *Input, n0, n1 int) bool {
	K := in.K
	if !useAVX512F || !useF16Kernel || K%16 != 0 || K == 0 {
		return false
	}
	M := in.M
	M4 := M &^ 3
	const nChunk = 64 // weight rows that stay in L2 while all x rows pass
	for c0 := n0; c0 < n1; c0 += nChunk {
		c1 := min(n1, c0+nChunk)
		c4 := c0 + (c1-c0)&^3
		for i := 0; i < M4; i += 4 {
			x := in.X[i*K : (i+4)*K]
			for n := c0; n < c4; n += 4 {
				_ = dst[(i+3)*ldd+n+3]
				w := m.u16[n*K : (n+4)*K]
				gemmF16x4x4(&x[0], 4*K, &w[0], 2*K, K, &dst[i*ldd+n], 4*ldd)
			}
		}
		for i := M4; i < M; i++ {
			x := in.X[i*K : (i+1)*K]
			for n := c0; n < c4; n += 4 {
				_ = dst[i*ldd+n+3]
				w := m.u16[n*K : (n+4)*K]
				gemmF16x1x4(&x[0], &w[0], 2*K, K, &dst[i*ldd+n])
			}
		}
		for n := c4; n < c1; n++ {
			w := m.u16[n*K : (n+1)*K]
			for i := range M {
				x := in.X[i*K : (i+1)*K]
				dst[i*ldd+n] = gemmF16x1x1(&x[0], &w[0], K)
			}
		}
	}
	return true
}

// useF16Kernel enables matmulF16Fast (a variable for A/B benchmarks; off:
// the row decode + DotF32 path).
var useF16Kernel = true

//go:noescape
func gemmF16x4x4(x *float32, xStride int, w *uint16, wStride, k int, dst *float32, dstStride int)

//go:noescape
func gemmF16x1x4(x *float32, w *uint16, wStride, k int, dst *float32)

//go:noescape
func gemmF16x1x1(x *float32, w *uint16, k int) float32
