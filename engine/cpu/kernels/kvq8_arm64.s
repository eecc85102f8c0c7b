#include "textflag.h"

// 8-bit KV cache decode kernels (kvq8.go) in NEON: a block's 32 int8
// values are widened to float32 in registers (SXTL twice, SCVTF) and
// scaled by the block's scale, then multiply-added for both query heads.

// Instructions the Go assembler does not know (register numbers).
// SXTL Vd.8H, Vn.8B / SXTL2 Vd.8H, Vn.16B; SXTL Vd.4S, Vn.4H / SXTL2 Vd.4S, Vn.8H.
#define SXTLB(n, d) WORD $(0x0F08A400 | (n)<<5 | (d))
#define SXTLB2(n, d) WORD $(0x4F08A400 | (n)<<5 | (d))
#define SXTLH(n, d) WORD $(0x0F10A400 | (n)<<5 | (d))
#define SXTLH2(n, d) WORD $(0x4F10A400 | (n)<<5 | (d))
// SCVTF Vd.4S, Vn.4S; FMUL / FADD Vd.4S, Vn.4S, Vm.4S; FADDP Vd.4S, Vn.4S, Vm.4S; FADDP Sd, Vn.2S.
#define SCVTF4(n, d) WORD $(0x4E21D800 | (n)<<5 | (d))
#define FMUL4(m, n, d) WORD $(0x6E20DC00 | (m)<<16 | (n)<<5 | (d))
#define FADD4(m, n, d) WORD $(0x4E20D400 | (m)<<16 | (n)<<5 | (d))
#define FADDP4(m, n, d) WORD $(0x6E20D400 | (m)<<16 | (n)<<5 | (d))
#define FADDPS(n, d) WORD $(0x7E30D800 | (n)<<5 | (d))

// WIDEN32: the 32 int8 at (R) into V16-V23 as float32 (V24-V29 scratch),
// R advanced by 32.
#define WIDEN32(R) \
	VLD1.P 32(R), [V24.B16, V25.B16] \
	SXTLB(24, 26) \
	SXTLB2(24, 27) \
	SXTLB(25, 28) \
	SXTLB2(25, 29) \
	SXTLH(26, 16) \
	SXTLH2(26, 17) \
	SXTLH(27, 18) \
	SXTLH2(27, 19) \
	SXTLH(28, 20) \
	SXTLH2(28, 21) \
	SXTLH(29, 22) \
	SXTLH2(29, 23) \
	SCVTF4(16, 16) \
	SCVTF4(17, 17) \
	SCVTF4(18, 18) \
	SCVTF4(19, 19) \
	SCVTF4(20, 20) \
	SCVTF4(21, 21) \
	SCVTF4(22, 22) \
	SCVTF4(23, 23)

// func dotsQ8x2NEON(s0, s1, q0, q1 *float32, k *int8, ks *float32, strideBytes, sstrideBytes, n, nb int)
// Per key: V8-V11 / V12-V15 collect q0 / q1 times the scaled values over
// the blocks (four chains each), summed across lanes at the end.
TEXT ·dotsQ8x2NEON(SB), NOSPLIT, $0-80
	MOVD s0+0(FP), R0
	MOVD s1+8(FP), R1
	MOVD q0+16(FP), R2
	MOVD q1+24(FP), R3
	MOVD k+32(FP), R4
	MOVD ks+40(FP), R5
	MOVD strideBytes+48(FP), R6
	MOVD sstrideBytes+56(FP), R7
	MOVD n+64(FP), R8
	MOVD nb+72(FP), R9

dkey:
	VEOR V8.B16, V8.B16, V8.B16
	VEOR V9.B16, V9.B16, V9.B16
	VEOR V10.B16, V10.B16, V10.B16
	VEOR V11.B16, V11.B16, V11.B16
	VEOR V12.B16, V12.B16, V12.B16
	VEOR V13.B16, V13.B16, V13.B16
	VEOR V14.B16, V14.B16, V14.B16
	VEOR V15.B16, V15.B16, V15.B16
	MOVD R2, R10
	MOVD R3, R11
	MOVD R4, R12
	MOVD R5, R13
	MOVD R9, R14

dblock:
	WIDEN32(R12)
	VLD1R.P 4(R13), [V30.S4]
	FMUL4(30, 16, 16)
	FMUL4(30, 17, 17)
	FMUL4(30, 18, 18)
	FMUL4(30, 19, 19)
	FMUL4(30, 20, 20)
	FMUL4(30, 21, 21)
	FMUL4(30, 22, 22)
	FMUL4(30, 23, 23)
	VLD1.P 64(R10), [V24.S4, V25.S4, V26.S4, V27.S4]
	VFMLA  V24.S4, V16.S4, V8.S4
	VFMLA  V25.S4, V17.S4, V9.S4
	VFMLA  V26.S4, V18.S4, V10.S4
	VFMLA  V27.S4, V19.S4, V11.S4
	VLD1.P 64(R10), [V24.S4, V25.S4, V26.S4, V27.S4]
	VFMLA  V24.S4, V20.S4, V8.S4
	VFMLA  V25.S4, V21.S4, V9.S4
	VFMLA  V26.S4, V22.S4, V10.S4
	VFMLA  V27.S4, V23.S4, V11.S4
	VLD1.P 64(R11), [V24.S4, V25.S4, V26.S4, V27.S4]
	VFMLA  V24.S4, V16.S4, V12.S4
	VFMLA  V25.S4, V17.S4, V13.S4
	VFMLA  V26.S4, V18.S4, V14.S4
	VFMLA  V27.S4, V19.S4, V15.S4
	VLD1.P 64(R11), [V24.S4, V25.S4, V26.S4, V27.S4]
	VFMLA  V24.S4, V20.S4, V12.S4
	VFMLA  V25.S4, V21.S4, V13.S4
	VFMLA  V26.S4, V22.S4, V14.S4
	VFMLA  V27.S4, V23.S4, V15.S4
	SUBS   $1, R14, R14
	BNE    dblock

	FADD4(9, 8, 8)
	FADD4(11, 10, 10)
	FADD4(10, 8, 8)
	FADDP4(8, 8, 8)
	FADDPS(8, 8)
	FMOVS.P F8, 4(R0)
	FADD4(13, 12, 12)
	FADD4(15, 14, 14)
	FADD4(14, 12, 12)
	FADDP4(12, 12, 12)
	FADDPS(12, 12)
	FMOVS.P F12, 4(R1)
	ADD    R6, R4, R4
	ADD    R7, R5, R5
	SUBS   $1, R8, R8
	BNE    dkey
	RET

// func axpysQ8x2NEON(o0, o1, p0, p1 *float32, v *int8, vs *float32, strideBytes, sstrideBytes, n, nb int)
// Per block of 32 output values (V0-V7 of o0, V8-V15 of o1), over the n
// values: o += (scale·p[j]) · v[j] (fused), as the Go loop.
TEXT ·axpysQ8x2NEON(SB), NOSPLIT, $0-80
	MOVD o0+0(FP), R0
	MOVD o1+8(FP), R1
	MOVD v+32(FP), R4
	MOVD vs+40(FP), R5
	MOVD strideBytes+48(FP), R6
	MOVD sstrideBytes+56(FP), R7
	MOVD nb+72(FP), R9

ablock:
	VLD1 (R0), [V0.S4, V1.S4, V2.S4, V3.S4]
	ADD  $64, R0, R15
	VLD1 (R15), [V4.S4, V5.S4, V6.S4, V7.S4]
	VLD1 (R1), [V8.S4, V9.S4, V10.S4, V11.S4]
	ADD  $64, R1, R15
	VLD1 (R15), [V12.S4, V13.S4, V14.S4, V15.S4]
	MOVD p0+16(FP), R2
	MOVD p1+24(FP), R3
	MOVD R4, R12
	MOVD R5, R13
	MOVD n+64(FP), R8

aval:
	MOVD    R12, R19
	WIDEN32(R19)
	VLD1R   (R13), [V24.S4]
	VLD1R.P 4(R2), [V30.S4]
	VLD1R.P 4(R3), [V31.S4]
	FMUL4(24, 30, 30)
	FMUL4(24, 31, 31)
	VFMLA   V30.S4, V16.S4, V0.S4
	VFMLA   V30.S4, V17.S4, V1.S4
	VFMLA   V30.S4, V18.S4, V2.S4
	VFMLA   V30.S4, V19.S4, V3.S4
	VFMLA   V30.S4, V20.S4, V4.S4
	VFMLA   V30.S4, V21.S4, V5.S4
	VFMLA   V30.S4, V22.S4, V6.S4
	VFMLA   V30.S4, V23.S4, V7.S4
	VFMLA   V31.S4, V16.S4, V8.S4
	VFMLA   V31.S4, V17.S4, V9.S4
	VFMLA   V31.S4, V18.S4, V10.S4
	VFMLA   V31.S4, V19.S4, V11.S4
	VFMLA   V31.S4, V20.S4, V12.S4
	VFMLA   V31.S4, V21.S4, V13.S4
	VFMLA   V31.S4, V22.S4, V14.S4
	VFMLA   V31.S4, V23.S4, V15.S4
	ADD     R6, R12, R12
	ADD     R7, R13, R13
	SUBS    $1, R8, R8
	BNE     aval

	VST1 [V0.S4, V1.S4, V2.S4, V3.S4], (R0)
	ADD  $64, R0, R15
	VST1 [V4.S4, V5.S4, V6.S4, V7.S4], (R15)
	VST1 [V8.S4, V9.S4, V10.S4, V11.S4], (R1)
	ADD  $64, R1, R15
	VST1 [V12.S4, V13.S4, V14.S4, V15.S4], (R15)
	ADD  $128, R0, R0
	ADD  $128, R1, R1
	ADD  $32, R4, R4
	ADD  $4, R5, R5
	SUBS $1, R9, R9
	BNE  ablock
	RET
