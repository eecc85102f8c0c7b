//go:build !amd64

package deltanet

// Portable kernels only off amd64 (kernels.go).

func gemv64Fast(y, a, b []float64, k, ldb, n int, scale float64) int { return 0 }

func ger64Fast(s, a, x []float64, m, lds, n int, scale float64) int { return 0 }

func widen64Fast(dst []float64, src []float32) int { return 0 }

func narrow32Fast(dst []float32, src []float64) int { return 0 }

func gemm64Fast(y []float64, ldy int, a []float64, lda int, b []float64, ldb int, m, k, n int, scale float64) (r, c int) {
	return 0, 0
}

func convAcc64Fast(acc, w []float64, x []float32) int { return 0 }

func narrow32StreamFast(dst []float32, src []float64) int { return 0 }

func round32Fast(s []float64) int { return 0 }

func gemv32Fast(y, a, b []float32, k, ldb, n int, scale float32) int { return 0 }

func ger32Fast(d, s, a, x []float32, m, ld, n int, scale float32) int { return 0 }

func gemm32Fast(y []float32, ldy int, a []float32, lda int, b []float32, ldb int, m, k, n int, scale float32) (r, c int) {
	return 0, 0
}

func scale32Fast(dst, src []float32, a float32) int { return 0 }

func mul32Fast(dst, x, y []float32) int { return 0 }
