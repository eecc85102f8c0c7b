package kernels

// f16Fast: NEON converts halves in registers (FCVTN/FCVTL); the f16 axpy
// sums of attention are the two-row kernels of axpys2_arm64.s.
func f16Fast() bool { return true }

func f32ToF16Fast(dst []uint16, src []float32) int {
	n := len(dst) &^ 7
	if n == 0 {
		return 0
	}
	f32ToF16NEON(&dst[0], &src[0], n)
	return n
}

func f16ToF32Fast(dst []float32, src []uint16) int {
	n := len(dst) &^ 7
	if n == 0 {
		return 0
	}
	f16ToF32NEON(&dst[0], &src[0], n)
	return n
}

func axpysF16Fast(acc, p []float32, v []uint16, stride, n int) int { return 0 }

//go:noescape
func f32ToF16NEON(dst *uint16, src *float32, n int)

//go:noescape
func f16ToF32NEON(dst *float32, src *uint16, n int)
