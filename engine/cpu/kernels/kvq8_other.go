//go:build !amd64 && !arm64

package kernels

func dotsQ8x2Fast(s0, s1, q0, q1 []float32, k []int8, ks []float32, stride, sstride, n, nb int) bool {
	return false
}

func axpysQ8x2Fast(o0, o1, p0, p1 []float32, v []int8, vs []float32, stride, sstride, n, nb int) bool {
	return false
}
