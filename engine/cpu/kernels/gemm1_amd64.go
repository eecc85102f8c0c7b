package kernels

// One-row companions of gemmF32x4x4/gemmBF16x4x4 with the same summation
// order per output (gemm1_amd64.s): matmulFloatFast uses them for the rows
// and columns the 4×4 tiles do not cover, so every output is the same bits
// whatever the batch.

//go:noescape
func gemmF32x1x4(x *float32, w *float32, wStride, k int, dst *float32)

//go:noescape
func gemmBF16x1x4(x *float32, w *uint16, wStride, k int, dst *float32)

//go:noescape
func gemmF32x1x1(x, w *float32, k int) float32

//go:noescape
func gemmBF16x1x1(x *float32, w *uint16, k int) float32
