#include "textflag.h"

// func siluMulAVX512(dst, gate, up, ex *float32, n int)
// dst[i] = g[i] / (1 + e[i]) * u[i] for n > 0, a multiple of 16: the
// add, divide and multiply each rounded as the scalar Go code rounds them.
TEXT ·siluMulAVX512(SB), NOSPLIT, $0-40
	MOVQ         dst+0(FP), DI
	MOVQ         gate+8(FP), SI
	MOVQ         up+16(FP), DX
	MOVQ         ex+24(FP), R8
	MOVQ         n+32(FP), CX
	SHRQ         $4, CX
	MOVL         $0x3f800000, AX // 1.0
	VPBROADCASTD AX, Z31

silumulloop:
	VADDPS  (R8), Z31, Z0
	VMOVUPS (SI), Z1
	VDIVPS  Z0, Z1, Z1
	VMULPS  (DX), Z1, Z1
	VMOVUPS Z1, (DI)
	ADDQ    $64, DI
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, R8
	DECQ    CX
	JNZ     silumulloop
	VZEROUPPER
	RET

// func negAVX512(dst, x *float32, n int)
// dst[i] = −x[i] (the sign bit flipped) for n > 0, a multiple of 16.
TEXT ·negAVX512(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	SHRQ         $4, CX
	MOVL         $0x80000000, AX
	VPBROADCASTD AX, Z31

negloop:
	VPXORD  (SI), Z31, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, DI
	ADDQ    $64, SI
	DECQ    CX
	JNZ     negloop
	VZEROUPPER
	RET
