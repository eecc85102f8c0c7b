package kernels

// SiLUMul sets dst[i] = g[i] / (1 + e[i]) * u[i], rounding each step to
// float32 (e = exp(−g): silu(g)·u, the SwiGLU of a Qwen MLP). The AVX-512
// loop uses the same IEEE operations, so every element has the bits of the
// Go loop. dst may be g, u or e.
func SiLUMul(dst, g, u, e []float32) {
	n := len(dst)
	g, u, e = g[:n], u[:n], e[:n]
	c := siluMulFast(dst, g, u, e)
	for i := c; i < n; i++ {
		dst[i] = g[i] / (1 + e[i]) * u[i]
	}
}

// Neg sets dst[i] = −x[i].
func Neg(dst, x []float32) {
	x = x[:len(dst)]
	c := negFast(dst, x)
	for i := c; i < len(dst); i++ {
		dst[i] = -x[i]
	}
}
