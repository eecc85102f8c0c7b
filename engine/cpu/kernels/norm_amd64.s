#include "textflag.h"

// func sumSquaresF64AVX512(x *float32, n int) float64
// n > 0, a multiple of 8. Each value is widened to float64 and squared
// exactly (VFMADD231PD of a 24-bit mantissa by itself loses nothing).
TEXT ·sumSquaresF64AVX512(SB), NOSPLIT, $0-24
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPD Z0, Z0, Z0
	VXORPD Z1, Z1, Z1
	VXORPD Z2, Z2, Z2
	VXORPD Z3, Z3, Z3

ss32:
	CMPQ        CX, $32
	JLT         ss8
	VCVTPS2PD   (SI), Z4
	VCVTPS2PD   32(SI), Z5
	VCVTPS2PD   64(SI), Z6
	VCVTPS2PD   96(SI), Z7
	VFMADD231PD Z4, Z4, Z0
	VFMADD231PD Z5, Z5, Z1
	VFMADD231PD Z6, Z6, Z2
	VFMADD231PD Z7, Z7, Z3
	ADDQ        $128, SI
	SUBQ        $32, CX
	JMP         ss32

ss8:
	CMPQ        CX, $8
	JLT         ssdone
	VCVTPS2PD   (SI), Z4
	VFMADD231PD Z4, Z4, Z0
	ADDQ        $32, SI
	SUBQ        $8, CX
	JMP         ss8

ssdone:
	VADDPD        Z1, Z0, Z0
	VADDPD        Z3, Z2, Z2
	VADDPD        Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPD        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPD        X1, X0, X0
	VUNPCKHPD     X0, X0, X1
	VADDSD        X1, X0, X0
	VZEROUPPER
	MOVSD         X0, ret+16(FP)
	RET

// func normScaleAVX512(out, x, w *float32, n int, inv, offset float32)
// out[i] = (offset + w[i]) · (x[i] · inv) for i < n (a multiple of 16),
// the Go loop's float32 operations.
TEXT ·normScaleAVX512(SB), NOSPLIT, $0-40
	MOVQ         out+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         w+16(FP), DX
	MOVQ         n+24(FP), CX
	VBROADCASTSS inv+32(FP), Z0
	VBROADCASTSS offset+36(FP), Z1

nsloop:
	VMULPS  (SI), Z0, Z2
	VADDPS  (DX), Z1, Z3
	VMULPS  Z2, Z3, Z3
	VMOVUPS Z3, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     nsloop
	VZEROUPPER
	RET
