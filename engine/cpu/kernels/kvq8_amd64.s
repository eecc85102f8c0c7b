#include "textflag.h"

// 8-bit KV cache attention kernels (kvq8.go), AVX-512F: a block of 32
// int8 values is sign-extended and converted to two vectors of 16 floats.

// func dotsQ8x2AVX512(s0, s1, q0, q1 *float32, k *int8, ks *float32, strideBytes, sstrideBytes, n, nb int)
// Per key: Z0/Z1 collect Σ_b ks_b·(q·k_b) lane-wise for the two heads, then
// one horizontal sum of both. SI/DX the key's values and scales, AX/BX the
// block cursors, R14 the byte offset into q0/q1, R15 blocks left.
TEXT ·dotsQ8x2AVX512(SB), NOSPLIT, $0-80
	MOVQ s0+0(FP), DI
	MOVQ s1+8(FP), R8
	MOVQ q0+16(FP), R9
	MOVQ q1+24(FP), R10
	MOVQ k+32(FP), SI
	MOVQ ks+40(FP), DX
	MOVQ strideBytes+48(FP), R11
	MOVQ sstrideBytes+56(FP), R12
	MOVQ n+64(FP), CX
	MOVQ nb+72(FP), R13

dkey:
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	MOVQ   SI, AX
	MOVQ   DX, BX
	XORQ   R14, R14
	MOVQ   R13, R15

dblock:
	VPMOVSXBD    (AX), Z2
	VPMOVSXBD    16(AX), Z3
	VCVTDQ2PS    Z2, Z2
	VCVTDQ2PS    Z3, Z3
	VBROADCASTSS (BX), Z4
	VMULPS       (R9)(R14*1), Z2, Z5
	VFMADD231PS  64(R9)(R14*1), Z3, Z5
	VFMADD231PS  Z4, Z5, Z0
	VMULPS       (R10)(R14*1), Z2, Z6
	VFMADD231PS  64(R10)(R14*1), Z3, Z6
	VFMADD231PS  Z4, Z6, Z1
	ADDQ         $32, AX
	ADDQ         $4, BX
	ADDQ         $128, R14
	DECQ         R15
	JNZ          dblock

	VEXTRACTF64X4 $1, Z0, Y2
	VADDPS        Y2, Y0, Y0
	VEXTRACTF64X4 $1, Z1, Y3
	VADDPS        Y3, Y1, Y1
	VHADDPS       Y1, Y0, Y0 // per 128-bit lane: s0 pairs, s1 pairs
	VEXTRACTF128  $1, Y0, X2
	VADDPS        X2, X0, X0
	VHADDPS       X0, X0, X0 // s0, s1, s0, s1
	VMOVSS        X0, (DI)
	VPSRLQ        $32, X0, X3
	VMOVSS        X3, (R8)
	ADDQ          $4, DI
	ADDQ          $4, R8
	ADDQ          R11, SI
	ADDQ          R12, DX
	DECQ          CX
	JNZ           dkey
	VZEROUPPER
	RET

// func axpysQ8x2AVX512(o0, o1, p0, p1 *float32, v *int8, vs *float32, strideBytes, sstrideBytes, n, nb int)
// One block of 32 output values at a time (Z0-Z3: o0 and o1's), over all n
// positions: o += (p·vs)·v. AX/BX the position's values and scale, R14
// the position, R13 positions left, R15 blocks left.
TEXT ·axpysQ8x2AVX512(SB), NOSPLIT, $0-80
	MOVQ o0+0(FP), DI
	MOVQ o1+8(FP), R8
	MOVQ p0+16(FP), R9
	MOVQ p1+24(FP), R10
	MOVQ v+32(FP), SI
	MOVQ vs+40(FP), DX
	MOVQ strideBytes+48(FP), R11
	MOVQ sstrideBytes+56(FP), R12
	MOVQ nb+72(FP), R15

ablock:
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS (R8), Z2
	VMOVUPS 64(R8), Z3
	MOVQ    SI, AX
	MOVQ    DX, BX
	XORQ    R14, R14
	MOVQ    n+64(FP), R13

apos:
	VPMOVSXBD    (AX), Z4
	VPMOVSXBD    16(AX), Z5
	VCVTDQ2PS    Z4, Z4
	VCVTDQ2PS    Z5, Z5
	VBROADCASTSS (BX), Z6
	VMULPS.BCST  (R9)(R14*4), Z6, Z7
	VMULPS.BCST  (R10)(R14*4), Z6, Z8
	VFMADD231PS  Z7, Z4, Z0
	VFMADD231PS  Z7, Z5, Z1
	VFMADD231PS  Z8, Z4, Z2
	VFMADD231PS  Z8, Z5, Z3
	ADDQ         R11, AX
	ADDQ         R12, BX
	INCQ         R14
	DECQ         R13
	JNZ          apos

	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, (R8)
	VMOVUPS Z3, 64(R8)
	ADDQ    $128, DI
	ADDQ    $128, R8
	ADDQ    $32, SI
	ADDQ    $4, DX
	DECQ    R15
	JNZ     ablock
	VZEROUPPER
	RET
