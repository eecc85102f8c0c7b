package kernels

import "golang.org/x/sys/cpu"

// axpysF32x2Fast does columns [0, c) of both rows with the two-row
// kernels, in the same column blocks as axpysFast (128-wide, then
// 16-wide, two 16-wide blocks per pass where it can), returning c. The
// caller checked the bounds.
func axpysF32x2Fast(acc0, acc1, p0, p1, v []float32, stride, n int) int {
	if !useAVX512F {
		return 0
	}
	c := 0
	for ; c+128 <= len(acc0); c += 128 {
		axpys128x2AVX512(&acc0[c], &acc1[c], &p0[0], &p1[0], &v[c], 4*stride, n)
	}
	for ; c+32 <= len(acc0); c += 32 {
		axpys32x2AVX512(&acc0[c], &acc1[c], &p0[0], &p1[0], &v[c], 4*stride, n)
	}
	for ; c+16 <= len(acc0); c += 16 {
		axpys16x2AVX512(&acc0[c], &acc1[c], &p0[0], &p1[0], &v[c], 4*stride, n)
	}
	return c
}

// axpysF16x2Fast is axpysF32x2Fast over f16 values (as axpysF16Fast).
// The 128- and 32-wide kernels also prefetch the lines they read shifted
// by pf bytes (the next KV block's; 0: their own lines): a hint that
// changes no result.
func axpysF16x2Fast(acc0, acc1, p0, p1 []float32, v []uint16, stride, n, pf int) int {
	if !useAVX512F {
		return 0
	}
	c := 0
	for ; c+128 <= len(acc0); c += 128 {
		axpys128x2F16AVX512(&acc0[c], &acc1[c], &p0[0], &p1[0], &v[c], 2*stride, n, pf)
	}
	for ; c+32 <= len(acc0); c += 32 {
		axpys32x2F16AVX512(&acc0[c], &acc1[c], &p0[0], &p1[0], &v[c], 2*stride, n, pf)
	}
	for ; c+16 <= len(acc0); c += 16 {
		axpys16x2F16AVX512(&acc0[c], &acc1[c], &p0[0], &p1[0], &v[c], 2*stride, n)
	}
	return c
}

//go:noescape
func axpys128x2AVX512(acc0, acc1, p0, p1, v *float32, strideBytes, n int)

//go:noescape
func axpys16x2AVX512(acc0, acc1, p0, p1, v *float32, strideBytes, n int)

//go:noescape
func axpys32x2AVX512(acc0, acc1, p0, p1, v *float32, strideBytes, n int)

//go:noescape
func axpys32x2F16AVX512(acc0, acc1, p0, p1 *float32, v *uint16, strideBytes, n, pf int)

//go:noescape
func axpys128x2F16AVX512(acc0, acc1, p0, p1 *float32, v *uint16, strideBytes, n, pf int)

//go:noescape
func axpys16x2F16AVX512(acc0, acc1, p0, p1 *float32, v *uint16, strideBytes, n int)

// hasAVX512BW: masked 16-bit loads (the f16 tail kernel).
var hasAVX512BW = cpu.X86.HasAVX512BW

// axpysF16TailFast does AxpysF16's scalar remainder (0 < len(acc) < 16
// columns) with masked vector lanes, bit for bit as the Go loop on amd64
// (multiply, round, add, round); false where it cannot.
func axpysF16TailFast(acc, p []float32, v []uint16, stride, n int) bool {
	if !useAVX512F || !hasAVX512BW || len(acc) == 0 || len(acc) >= 16 || n <= 0 {
		return false
	}
	axpysTailF16AVX512(&acc[0], &p[0], &v[0], 2*stride, n, 1<<len(acc)-1)
	return true
}

//go:noescape
func axpysTailF16AVX512(acc, p *float32, v *uint16, strideBytes, n, mask int)
