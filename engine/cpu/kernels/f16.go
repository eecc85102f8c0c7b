package kernels

// Half-precision (IEEE f16) values for the KV cache: a
// cache stored in f16 is half the memory and half the bytes attention reads
// per decoded token (at 8 concurrent streams of 512+ tokens the float32
// cache is read more than the weights). Conversions round to nearest even
// (tensor.F32ToF16); widening is exact.

import "github.com/macpool/macpool/engine/tensor"

// F16Fast reports whether the f16 kernels below have a vector
// implementation on this machine (otherwise they run scalar Go, slower
// than the float32 kernels they replace).
func F16Fast() bool { return f16Fast() }

// F32ToF16 sets dst[i] = f16(src[i]) (round to nearest even).
func F32ToF16(dst []uint16, src []float32) {
	src = src[:len(dst)]
	c := f32ToF16Fast(dst, src)
	for i := c; i < len(dst); i++ {
		dst[i] = tensor.F32ToF16(src[i])
	}
}

// F16ToF32 sets dst[i] = float32(src[i]).
func F16ToF32(dst []float32, src []uint16) {
	src = src[:len(dst)]
	c := f16ToF32Fast(dst, src)
	for i := c; i < len(dst); i++ {
		dst[i] = tensor.F16ToF32(src[i])
	}
}

// AxpysF16 sets acc += Σ_j p[j]·v[j*stride : j*stride+len(acc)] for j < n,
// with v in f16 (AxpysF32 over a half-precision cache).
func AxpysF16(acc, p []float32, v []uint16, stride, n int) {
	if n <= 0 || len(acc) == 0 {
		return
	}
	p = p[:n]
	_ = v[(n-1)*stride+len(acc)-1]
	c := axpysF16Fast(acc, p, v, stride, n)
	if c == len(acc) || axpysF16TailFast(acc[c:], p, v[c:], stride, n) {
		return
	}
	for j := range n {
		pj := p[j]
		row := v[j*stride+c : j*stride+len(acc)]
		for i, h := range row {
			acc[c+i] += pj * tensor.F16ToF32(h)
		}
	}
}
