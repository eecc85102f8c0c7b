//go:build !amd64 && !arm64

package kernels

const (
	hasAxpy    = false
	hasDotF32  = false
	hasDotBF16 = false
)

func impl() string { return "go" }

var gemmF32Fast func(x *float32, xStride int, w *float32, wStride, k int, dst *float32, dstStride int)

var gemmNNFast func(a *float32, lda int, b *float32, ldb, k int, dst *float32, ldd, cols int)

var expSubFast func(x *float32, n int, mx float32) float32

var maxFast func(x *float32, n int) float32

var argmaxFast func(x *float32, n int) int

func usePacked() bool { return false }

func dotsFast(dst, q, k []float32, stride, n int) int  { return 0 }
func axpysFast(acc, p, v []float32, stride, n int) int { return 0 }

func axpyFast(dst []float32, a float32, x []float32) { axpyGo(dst, a, x) }

func dotF32Fast(a, b []float32) float32           { return dotF32Go(a, b) }
func dotBF16Fast(x []float32, w []uint16) float32 { return dotBF16Go(x, w) }

func quantizeRow(x []float32, q []int8, d []float32, s8, s128 []int32) {
	quantizeRowGo(x, q, d, s8, s128)
}

func dotQ8Rows(w []byte, q []int8, d []float32, nb int) float32 { return dotQ8RowsGo(w, q, d, nb) }
func dotQ4Rows(w []byte, q []int8, d []float32, nb int) float32 { return dotQ4RowsGo(w, q, d, nb) }

func packedKernel(m *Matrix, cols int, w []byte, ngroups int, in *Input, i int, dst []float32, ldd int) {
	panic("kernels: packed layout without VNNI")
}

func matmulFloatFast(m *Matrix, dst []float32, ldd int, in *Input, n0, n1 int) bool { return false }

func packedKernel8(m *Matrix, w []byte, ngroups int, x8 *input8, i int, dst []float32, ldd int, next *[]byte) {
	panic("kernels: packed layout without VNNI")
}
