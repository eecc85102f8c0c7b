#include "textflag.h"

// f16 conversions (f16_arm64.go), 8 values a step (n a multiple of 8).
// FCVTN rounds to nearest even (the default FPCR mode, as Go leaves it)
// and keeps subnormal halves (FZ16 clear), as tensor.F32ToF16.

// FCVTN Vd.4H, Vn.4S / FCVTN2 Vd.8H, Vn.4S and FCVTL Vd.4S, Vn.4H /
// FCVTL2 Vd.4S, Vn.8H, which the Go assembler does not know.
#define FCVTN4(n, d) WORD $(0x0E216800 | (n)<<5 | (d))
#define FCVTN24(n, d) WORD $(0x4E216800 | (n)<<5 | (d))
#define FCVTL4(n, d) WORD $(0x0E217800 | (n)<<5 | (d))
#define FCVTL24(n, d) WORD $(0x4E217800 | (n)<<5 | (d))

// func f32ToF16NEON(dst *uint16, src *float32, n int)
TEXT ·f32ToF16NEON(SB), NOSPLIT, $0-24
	MOVD dst+0(FP), R0
	MOVD src+8(FP), R1
	MOVD n+16(FP), R2

tohalf:
	VLD1.P 32(R1), [V0.S4, V1.S4]
	FCVTN4(0, 2)
	FCVTN24(1, 2)
	VST1.P [V2.H8], 16(R0)
	SUBS   $8, R2, R2
	BNE    tohalf
	RET

// func f16ToF32NEON(dst *float32, src *uint16, n int)
TEXT ·f16ToF32NEON(SB), NOSPLIT, $0-24
	MOVD dst+0(FP), R0
	MOVD src+8(FP), R1
	MOVD n+16(FP), R2

tosingle:
	VLD1.P 16(R1), [V0.H8]
	FCVTL4(0, 1)
	FCVTL24(0, 2)
	VST1.P [V1.S4, V2.S4], 32(R0)
	SUBS   $8, R2, R2
	BNE    tosingle
	RET
