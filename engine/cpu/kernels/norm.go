package kernels

import "math"

// RMSNorm sets out = (offset + w) · x / sqrt(mean(x²) + eps), out and x of
// one length (w at least as long; out may be x). The squares are summed in
// float64, where each is exact: the order of the sum (vector lanes here,
// chains in the Go loop) moves it by ~1e-16 relative, below what the
// float32 rounding of the scale can see, and the scaling itself is the
// same float32 operations element by element on every path.
func RMSNorm(out, x, w []float32, eps, offset float32) {
	n := len(x)
	out, w = out[:n], w[:n]
	if n == 0 {
		return
	}
	ss, i := sumSquaresFast(x)
	var s0, s1, s2, s3 float64
	for ; i+4 <= n; i += 4 {
		v := x[i : i+4 : i+4]
		s0 += float64(v[0]) * float64(v[0])
		s1 += float64(v[1]) * float64(v[1])
		s2 += float64(v[2]) * float64(v[2])
		s3 += float64(v[3]) * float64(v[3])
	}
	for ; i < n; i++ {
		s0 += float64(x[i]) * float64(x[i])
	}
	ss += (s0 + s1) + (s2 + s3)
	inv := float32(1 / math.Sqrt(ss/float64(n)+float64(eps)))
	i = normScaleFast(out, x, w, inv, offset)
	for ; i < n; i++ {
		out[i] = (offset + w[i]) * (x[i] * inv)
	}
}
