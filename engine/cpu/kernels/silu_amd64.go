package kernels

func siluMulFast(dst, g, u, e []float32) int {
	n := len(dst) &^ 15
	if !useAVX512F || n == 0 {
		return 0
	}
	siluMulAVX512(&dst[0], &g[0], &u[0], &e[0], n)
	return n
}

func negFast(dst, x []float32) int {
	n := len(dst) &^ 15
	if !useAVX512F || n == 0 {
		return 0
	}
	negAVX512(&dst[0], &x[0], n)
	return n
}

//go:noescape
func siluMulAVX512(dst, gate, up, ex *float32, n int)

//go:noescape
func negAVX512(dst, x *float32, n int)
