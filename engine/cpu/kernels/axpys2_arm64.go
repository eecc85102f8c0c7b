package kernels

// axpysF32x2Fast does columns [0, c) of both rows with the NEON two-row
// kernels (32 or 16 columns a pass, the accumulators in registers) and
// returns c; the rest go through the Go loop. Each column is the fused
// multiply-add chain of the Go loop (which arm64 compiles to FMADD), in
// the same order, so the bits are the one-row loop's.
func axpysF32x2Fast(acc0, acc1, p0, p1, v []float32, stride, n int) int {
	c := 0
	for ; c+32 <= len(acc0); c += 32 {
		axpys32x2F32NEON(&acc0[c], &acc1[c], &p0[0], &p1[0], &v[c], 4*stride, n)
	}
	for ; c+16 <= len(acc0); c += 16 {
		axpys16x2F32NEON(&acc0[c], &acc1[c], &p0[0], &p1[0], &v[c], 4*stride, n)
	}
	return c
}

// axpysF16x2Fast is axpysF32x2Fast over f16 values, widened exactly in
// registers (FCVTL); pf (a prefetch distance on amd64) is not used.
func axpysF16x2Fast(acc0, acc1, p0, p1 []float32, v []uint16, stride, n, pf int) int {
	c := 0
	for ; c+32 <= len(acc0); c += 32 {
		axpys32x2F16NEON(&acc0[c], &acc1[c], &p0[0], &p1[0], &v[c], 2*stride, n)
	}
	for ; c+16 <= len(acc0); c += 16 {
		axpys16x2F16NEON(&acc0[c], &acc1[c], &p0[0], &p1[0], &v[c], 2*stride, n)
	}
	return c
}

func axpysF16TailFast(acc, p []float32, v []uint16, stride, n int) bool { return false }

//go:noescape
func axpys32x2F32NEON(acc0, acc1, p0, p1, v *float32, strideBytes, n int)

//go:noescape
func axpys16x2F32NEON(acc0, acc1, p0, p1, v *float32, strideBytes, n int)

//go:noescape
func axpys32x2F16NEON(acc0, acc1, p0, p1 *float32, v *uint16, strideBytes, n int)

//go:noescape
func axpys16x2F16NEON(acc0, acc1, p0, p1 *float32, v *uint16, strideBytes, n int)
