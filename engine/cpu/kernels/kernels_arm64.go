package kernels

import (
	"golang.org/x/sys/cpu"
)

// arm64: NEON (always present) for the float32 dot, SDOT (ARMv8.2
// dot-product extension, every Apple M-series core) for the int8 block
// sums of Q8_0/Q4_0 and of the packed K-quants (kquant_arm64.s), FMLA for
// attention's two-row axpy sums (axpys2_arm64.s). CI runs this package's tests as a linux/arm64 binary
// under qemu-user (.ci/run), so every NEON/SDOT path is checked against the
// Go reference there; speed on real cores is measured only on a Mac.
var useDotProd = cpu.ARM64.HasASIMDDP

const (
	hasAxpy    = false
	hasDotF32  = true
	hasDotBF16 = false
)

func impl() string {
	if useDotProd {
		return "neon+dotprod"
	}
	return "neon"
}

var gemmF32Fast func(x *float32, xStride int, w *float32, wStride, k int, dst *float32, dstStride int)

var gemmNNFast func(a *float32, lda int, b *float32, ldb, k int, dst *float32, ldd, cols int)

var expSubFast func(x *float32, n int, mx float32) float32

var maxFast func(x *float32, n int) float32

var argmaxFast func(x *float32, n int) int

func usePacked() bool { return false }

func dotsFast(dst, q, k []float32, stride, n int) int  { return 0 }
func axpysFast(acc, p, v []float32, stride, n int) int { return 0 }

func axpyFast(dst []float32, a float32, x []float32) { axpyGo(dst, a, x) }

// dotF32Fast: len(a) is a multiple of 32 (DotF32 passes the body).
func dotF32Fast(a, b []float32) float32 {
	var p [16]float32
	dotF32NEON(&a[0], &b[0], len(a), &p)
	var s float32
	for _, v := range p {
		s += v
	}
	return s
}

func dotBF16Fast(x []float32, w []uint16) float32 { return dotBF16Go(x, w) }

func quantizeRow(x []float32, q []int8, d []float32, s8, s128 []int32) {
	quantizeRowGo(x, q, d, s8, s128)
}

// blockChunk is how many block sums one assembly call returns.
const blockChunk = 64

func dotQ8Rows(w []byte, q []int8, d []float32, nb int) float32 {
	if !useDotProd {
		return dotQ8RowsGo(w, q, d, nb)
	}
	return dotRowsSDOT(w, q, d, nb, BlockQ8_0, dotQ8BlocksSDOT)
}

func dotQ4Rows(w []byte, q []int8, d []float32, nb int) float32 {
	if !useDotProd {
		return dotQ4RowsGo(w, q, d, nb)
	}
	return dotRowsSDOT(w, q, d, nb, BlockQ4_0, dotQ4BlocksSDOT)
}

// dotRowsSDOT gets the exact int32 sum of every block from the assembly
// and scales them as the Go reference does.
func dotRowsSDOT(w []byte, q []int8, d []float32, nb, bs int, blocks func(w *byte, q *int8, nb int, out *int32)) float32 {
	_, _, _ = w[nb*bs-1], q[nb*QK-1], d[nb-1]
	var sums [blockChunk]int32
	var s float32
	for b0 := 0; b0 < nb; b0 += blockChunk {
		n := min(blockChunk, nb-b0)
		blocks(&w[b0*bs], &q[b0*QK], n, &sums[0])
		for j := range n {
			b := b0 + j
			s += float32(sums[j]) * (f16(w[b*bs:]) * d[b])
		}
	}
	return s
}

func packedKernel(m *Matrix, cols int, w []byte, ngroups int, in *Input, i int, dst []float32, ldd int) {
	panic("kernels: packed layout on arm64")
}

func matmulFloatFast(m *Matrix, dst []float32, ldd int, in *Input, n0, n1 int) bool { return false }

// Implemented in kernels_arm64.s.

//go:noescape
func dotF32NEON(a, b *float32, n int, out *[16]float32)

//go:noescape
func dotQ8BlocksSDOT(w *byte, q *int8, nb int, out *int32)

//go:noescape
func dotQ4BlocksSDOT(w *byte, q *int8, nb int, out *int32)

func packedKernel8(m *Matrix, w []byte, ngroups int, x8 *input8, i int, dst []float32, ldd int, next *[]byte) {
	panic("kernels: packed layout without VNNI")
}
