package deltanet

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

var useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasOSXSAVE

// gemv64Fast does the columns [0, c) of gemv64 that are a multiple of 8 and returns c.
func gemv64Fast(y, a, b []float64, k, ldb, n int, scale float64) int {
	c := n &^ 7
	if !useAVX512 || c == 0 || k == 0 {
		return 0
	}
	gemv64AVX512(&y[0], &a[0], &b[0], k, 8*ldb, c, scale)
	return c
}

// gemm64Fast does rows [0, r) and columns [0, c) of gemm64 in 4×32 blocks (k > 0).
func gemm64Fast(y []float64, ldy int, a []float64, lda int, b []float64, ldb int, m, k, n int, scale float64) (r, c int) {
	return gemmFast(gemm4x32AVX512, y, ldy, a, lda, b, ldb, m, k, n, scale)
}

// gemmFast is gemm64Fast or gemm32Fast: blocks of 4 rows and 4 vectors of columns with
// block, the AVX-512 kernel of one in their precision (strides in bytes).
func gemmFast[F float32 | float64](block func(y, a, b *F, k, ldyBytes, ldaBytes, ldbBytes int, scale F), y []F, ldy int, a []F, lda int, b []F, ldb int, m, k, n int, scale F) (r, c int) {
	if !useAVX512 {
		return 0, 0
	}
	size := int(unsafe.Sizeof(y[0]))
	cols := 4 * 64 / size
	r, c = m&^3, n&^(cols-1)
	if r == 0 || c == 0 {
		return 0, 0
	}
	_ = b[(k-1)*ldb+c-1]
	for i := 0; i < r; i += 4 {
		for j := 0; j < c; j += cols {
			block(&y[i*ldy+j], &a[i*lda], &b[j], k, size*ldy, size*lda, size*ldb, scale)
		}
	}
	return r, c
}

func ger64Fast(s, a, x []float64, m, lds, n int, scale float64) int {
	c := n &^ 7
	if !useAVX512 || c == 0 || m == 0 {
		return 0
	}
	ger64AVX512(&s[0], &a[0], &x[0], m, 8*lds, c, scale)
	return c
}

func convAcc64Fast(acc, w []float64, x []float32) int {
	c := len(x) &^ 7
	if !useAVX512 || c == 0 {
		return 0
	}
	convAcc64AVX512(&acc[0], &w[0], &x[0], c)
	return c
}

func narrow32StreamFast(dst []float32, src []float64) int {
	c := len(src) &^ 7
	if !useAVX512 || c == 0 || uintptr(unsafe.Pointer(&dst[0]))%32 != 0 {
		return 0
	}
	narrow32NTAVX512(&dst[0], &src[0], c)
	return c
}

func round32Fast(s []float64) int {
	c := len(s) &^ 7
	if !useAVX512 || c == 0 {
		return 0
	}
	round32AVX512(&s[0], c)
	return c
}

func widen64Fast(dst []float64, src []float32) int {
	c := len(src) &^ 7
	if !useAVX512 || c == 0 {
		return 0
	}
	widen64AVX512(&dst[0], &src[0], c)
	return c
}

func narrow32Fast(dst []float32, src []float64) int {
	c := len(src) &^ 7
	if !useAVX512 || c == 0 {
		return 0
	}
	narrow32AVX512(&dst[0], &src[0], c)
	return c
}

//go:noescape
func gemv64AVX512(y, a, b *float64, k, ldbBytes, n int, scale float64)

//go:noescape
func gemm4x32AVX512(y, a, b *float64, k, ldyBytes, ldaBytes, ldbBytes int, scale float64)

//go:noescape
func ger64AVX512(s, a, x *float64, m, ldsBytes, n int, scale float64)

//go:noescape
func widen64AVX512(dst *float64, src *float32, n int)

//go:noescape
func narrow32AVX512(dst *float32, src *float64, n int)

//go:noescape
func convAcc64AVX512(acc, w *float64, x *float32, n int)

//go:noescape
func narrow32NTAVX512(dst *float32, src *float64, n int)

//go:noescape
func round32AVX512(s *float64, n int)
