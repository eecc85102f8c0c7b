package kernels

// sumSquaresFast sums the squares of x's first 8·⌊len/8⌋ values in float64
// and returns how many it took.
func sumSquaresFast(x []float32) (float64, int) {
	n := len(x) &^ 7
	if !useAVX512F || n == 0 {
		return 0, 0
	}
	return sumSquaresF64AVX512(&x[0], n), n
}

// normScaleFast is RMSNorm's scaling of the first 16·⌊len/16⌋ values;
// it returns how many it did.
func normScaleFast(out, x, w []float32, inv, offset float32) int {
	n := len(x) &^ 15
	if !useAVX512F || n == 0 {
		return 0
	}
	normScaleAVX512(&out[0], &x[0], &w[0], n, inv, offset)
	return n
}

//go:noescape
func sumSquaresF64AVX512(x *float32, n int) float64

//go:noescape
func normScaleAVX512(out, x, w *float32, n int, inv, offset float32)
