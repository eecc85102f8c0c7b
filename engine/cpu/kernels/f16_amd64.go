package kernels

func f16Fast() bool { return useAVX512F }

func f32ToF16Fast(dst []uint16, src []float32) int {
	n := len(dst) &^ 15
	if !useAVX512F || n == 0 {
		return 0
	}
	f32ToF16AVX512(&dst[0], &src[0], n)
	return n
}

func f16ToF32Fast(dst []float32, src []uint16) int {
	n := len(dst) &^ 15
	if !useAVX512F || n == 0 {
		return 0
	}
	f16ToF32AVX512(&dst[0], &src[0], n)
	return n
}

// axpysF16Fast does the columns [0, c) of acc it can, returning c (the
// caller checked the bounds).
func axpysF16Fast(acc, p []float32, v []uint16, stride, n int) int {
	if !useAVX512F {
		return 0
	}
	c := 0
	for ; c+128 <= len(acc); c += 128 {
		axpys128F16AVX512(&acc[c], &p[0], &v[c], 2*stride, n)
	}
	for ; c+16 <= len(acc); c += 16 {
		axpys16F16AVX512(&acc[c], &p[0], &v[c], 2*stride, n)
	}
	return c
}

//go:noescape
func f16ToF32AVX512(dst *float32, src *uint16, n int)

//go:noescape
func f32ToF16AVX512(dst *uint16, src *float32, n int)

//go:noescape
func axpys128F16AVX512(acc, p *float32, v *uint16, strideBytes, n int)

//go:noescape
func axpys16F16AVX512(acc, p *float32, v *uint16, strideBytes, n int)
