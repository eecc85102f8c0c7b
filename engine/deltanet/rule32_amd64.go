package deltanet

// gemv32Fast does the columns [0, c) of gemv32 that are a multiple of 16 and returns c.
func gemv32Fast(y, a, b []float32, k, ldb, n int, scale float32) int {
	c := n &^ 15
	if !useAVX512 || c == 0 || k == 0 {
		return 0
	}
	gemv32AVX512(&y[0], &a[0], &b[0], k, 4*ldb, c, scale)
	return c
}

// ger32Fast does the columns [0, c) of ger32 that are a multiple of 16 and returns c.
func ger32Fast(d, s, a, x []float32, m, ld, n int, scale float32) int {
	c := n &^ 15
	if !useAVX512 || c == 0 || m == 0 {
		return 0
	}
	ger32AVX512(&d[0], &s[0], &a[0], &x[0], m, 4*ld, c, scale)
	return c
}

// gemm32Fast does rows [0, r) and columns [0, c) of gemm32 in 4×64 blocks (k > 0).
func gemm32Fast(y []float32, ldy int, a []float32, lda int, b []float32, ldb int, m, k, n int, scale float32) (r, c int) {
	return gemmFast(gemm4x64AVX512, y, ldy, a, lda, b, ldb, m, k, n, scale)
}

//go:noescape
func gemv32AVX512(y, a, b *float32, k, ldbBytes, n int, scale float32)

//go:noescape
func ger32AVX512(d, s, a, x *float32, m, ldBytes, n int, scale float32)

//go:noescape
func gemm4x64AVX512(y, a, b *float32, k, ldyBytes, ldaBytes, ldbBytes int, scale float32)

func scale32Fast(dst, src []float32, a float32) int {
	c := len(src) &^ 15
	if !useAVX512 || c == 0 {
		return 0
	}
	scale32AVX512(&dst[0], &src[0], a, c)
	return c
}

func mul32Fast(dst, x, y []float32) int {
	c := len(x) &^ 15
	if !useAVX512 || c == 0 {
		return 0
	}
	mul32AVX512(&dst[0], &x[0], &y[0], c)
	return c
}

//go:noescape
func scale32AVX512(dst, src *float32, a float32, n int)

//go:noescape
func mul32AVX512(dst, x, y *float32, n int)
