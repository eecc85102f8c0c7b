package kernels

// Two-row attention axpy-sums. In a decode step the group
// query vectors of one kv head read the same K and V blocks; these do two
// rows per pass so each K/V vector is loaded (and, for f16, widened) once
// for both. Each row's result is bit-identical to the one-row kernel's
// (same accumulator chains, FMA order and final combination for every
// column), which keeps generated positions batch invariant.

import "unsafe"

// AxpysF32x2 is AxpysF32(acc0, p0, v, stride, n) and AxpysF32(acc1, p1, v,
// stride, n), bit for bit; len(acc0) == len(acc1).
func AxpysF32x2(acc0, acc1, p0, p1, v []float32, stride, n int) {
	if len(acc0) != len(acc1) {
		panic("kernels: AxpysF32x2 rows of different lengths")
	}
	if n <= 0 || len(acc0) == 0 {
		return
	}
	p0, p1 = p0[:n], p1[:n]
	_ = v[(n-1)*stride+len(acc0)-1]
	c := axpysF32x2Fast(acc0, acc1, p0, p1, v, stride, n)
	if c == len(acc0) {
		return
	}
	// Columns [c, len) take the one-row kernel's remainder path (fewer
	// than 16 columns there, so no vector kernel either way).
	AxpysF32(acc0[c:], p0, v[c:], stride, n)
	AxpysF32(acc1[c:], p1, v[c:], stride, n)
}

// AxpysF16x2 is AxpysF16(acc0, p0, v, stride, n) and AxpysF16(acc1, p1, v,
// stride, n), bit for bit; len(acc0) == len(acc1).
func AxpysF16x2(acc0, acc1, p0, p1 []float32, v []uint16, stride, n int) {
	AxpysF16x2Next(acc0, acc1, p0, p1, v, nil, stride, n)
}

// AxpysF16x2Next is AxpysF16x2 (the same bits) that also asks for next
// into the cache while it sums v: next is laid out as v (the same rows of
// the following KV block; nil for none) and only read by prefetches, which
// never fault, so it needs no particular length.
func AxpysF16x2Next(acc0, acc1, p0, p1 []float32, v, next []uint16, stride, n int) {
	if len(acc0) != len(acc1) {
		panic("kernels: AxpysF16x2 rows of different lengths")
	}
	if n <= 0 || len(acc0) == 0 {
		return
	}
	p0, p1 = p0[:n], p1[:n]
	_ = v[(n-1)*stride+len(acc0)-1]
	pf := 0
	if len(next) > 0 {
		pf = int(uintptr(unsafe.Pointer(&next[0])) - uintptr(unsafe.Pointer(&v[0])))
	}
	c := axpysF16x2Fast(acc0, acc1, p0, p1, v, stride, n, pf)
	if c == len(acc0) {
		return
	}
	AxpysF16(acc0[c:], p0, v[c:], stride, n)
	AxpysF16(acc1[c:], p1, v[c:], stride, n)
}
