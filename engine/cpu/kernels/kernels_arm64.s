#include "textflag.h"

// NEON kernels (unverified on hardware; see kernels_arm64.go).

// SDOT Vd.4S, Vn.16B, Vm.16B (ARMv8.2 dot product), which the Go
// assembler does not know: Vd += Σ4 int8(Vn)·int8(Vm) per 32-bit lane.
#define SDOT(m, n, d) WORD $(0x4E809400 | (m)<<16 | (n)<<5 | (d))

// func dotF32NEON(a, b *float32, n int, out *[16]float32)
// n > 0, a multiple of 16; out gets 16 partial sums.
TEXT ·dotF32NEON(SB), NOSPLIT, $0-32
	MOVD a+0(FP), R0
	MOVD b+8(FP), R1
	MOVD n+16(FP), R2
	MOVD out+24(FP), R3
	VEOR V0.B16, V0.B16, V0.B16
	VEOR V1.B16, V1.B16, V1.B16
	VEOR V2.B16, V2.B16, V2.B16
	VEOR V3.B16, V3.B16, V3.B16

f32loop:
	VLD1.P 64(R0), [V4.S4, V5.S4, V6.S4, V7.S4]
	VLD1.P 64(R1), [V8.S4, V9.S4, V10.S4, V11.S4]
	VFMLA  V4.S4, V8.S4, V0.S4
	VFMLA  V5.S4, V9.S4, V1.S4
	VFMLA  V6.S4, V10.S4, V2.S4
	VFMLA  V7.S4, V11.S4, V3.S4
	SUBS   $16, R2, R2
	BNE    f32loop
	VST1   [V0.S4, V1.S4, V2.S4, V3.S4], (R3)
	RET

// func dotQ8BlocksSDOT(w *byte, q *int8, nb int, out *int32)
// w: nb ggml Q8_0 blocks (34 bytes); q: nb×32 int8; out[b] = Σ q_w·q_x.
TEXT ·dotQ8BlocksSDOT(SB), NOSPLIT, $0-32
	MOVD w+0(FP), R0
	MOVD q+8(FP), R1
	MOVD nb+16(FP), R2
	MOVD out+24(FP), R3

q8loop:
	ADD    $2, R0, R4
	VLD1   (R4), [V0.B16, V1.B16]
	VLD1.P 32(R1), [V2.B16, V3.B16]
	VEOR   V4.B16, V4.B16, V4.B16
	SDOT(2, 0, 4)
	SDOT(3, 1, 4)
	VADDV  V4.S4, V4
	VMOV   V4.S[0], R5
	MOVW   R5, (R3)
	ADD    $4, R3
	ADD    $34, R0
	SUBS   $1, R2, R2
	BNE    q8loop
	RET

// func dotQ4BlocksSDOT(w *byte, q *int8, nb int, out *int32)
// w: nb ggml Q4_0 blocks (18 bytes: low nibbles = values 0-15, high
// nibbles = 16-31, value = nibble − 8).
TEXT ·dotQ4BlocksSDOT(SB), NOSPLIT, $0-32
	MOVD  w+0(FP), R0
	MOVD  q+8(FP), R1
	MOVD  nb+16(FP), R2
	MOVD  out+24(FP), R3
	VMOVI $15, V8.B16
	VMOVI $8, V9.B16

q4loop:
	ADD    $2, R0, R4
	VLD1   (R4), [V0.B16]
	VAND   V8.B16, V0.B16, V1.B16
	VUSHR  $4, V0.B16, V0.B16
	VSUB   V9.B16, V1.B16, V1.B16
	VSUB   V9.B16, V0.B16, V0.B16
	VLD1.P 32(R1), [V2.B16, V3.B16]
	VEOR   V4.B16, V4.B16, V4.B16
	SDOT(2, 1, 4)
	SDOT(3, 0, 4)
	VADDV  V4.S4, V4
	VMOV   V4.S[0], R5
	MOVW   R5, (R3)
	ADD    $4, R3
	ADD    $18, R0
	SUBS   $1, R2, R2
	BNE    q4loop
	RET
