#include "textflag.h"

// One-activation-row float kernels that sum every output in exactly the
// order of the 4×4 tiles in gemm_amd64.s: one 16-lane accumulator per
// output, FMAs in k order (a masked FMA for the last k%16 values of F32),
// then the same reduction tree (REDUCE4's: halves, two horizontal adds,
// 128-bit halves). A row's result is then the same bits whether it was
// computed in a tile of 4 rows or alone, so logits do not depend on the
// batch a sequence shares (failover resumes by prefilling tokens that
// were decoded one at a time).

// Reduce the 16 lanes of Z0 into X0 lane 0 in REDUCE4's order.
#define REDUCE1 \
	VEXTRACTF64X4 $1, Z0, Y24; \
	VADDPS        Y24, Y0, Y0; \
	VHADDPS       Y0, Y0, Y0;  \
	VHADDPS       Y0, Y0, Y0;  \
	VEXTRACTF32X4 $1, Y0, X24; \
	VADDPS        X24, X0, X0

// Reduce Za..Zd to 4 floats in xa (REDUCE4 of gemm_amd64.s).
#define REDUCE4B(a, b, c, d, ya, yb, yc, yd, xa) \
	VEXTRACTF64X4 $1, a, Y24; \
	VADDPS        Y24, ya, ya; \
	VEXTRACTF64X4 $1, b, Y24; \
	VADDPS        Y24, yb, yb; \
	VEXTRACTF64X4 $1, c, Y24; \
	VADDPS        Y24, yc, yc; \
	VEXTRACTF64X4 $1, d, Y24; \
	VADDPS        Y24, yd, yd; \
	VHADDPS       yb, ya, ya;  \
	VHADDPS       yd, yc, yc;  \
	VHADDPS       yc, ya, ya;  \
	VEXTRACTF32X4 $1, ya, X24; \
	VADDPS        X24, xa, xa

#define FMA1x4 \
	VFMADD231PS Z20, Z16, Z0; \
	VFMADD231PS Z21, Z16, Z1; \
	VFMADD231PS Z22, Z16, Z2; \
	VFMADD231PS Z23, Z16, Z3

#define PROLOGUE1x4 \
	MOVQ   x+0(FP), R8;        \
	MOVQ   w+8(FP), SI;        \
	MOVQ   wStride+16(FP), DX; \
	LEAQ   (SI)(DX*2), R11;    \
	ADDQ   DX, R11;            \
	MOVQ   k+24(FP), CX;       \
	MOVQ   dst+32(FP), DI;     \
	VXORPS Z0, Z0, Z0;         \
	VXORPS Z1, Z1, Z1;         \
	VXORPS Z2, Z2, Z2;         \
	VXORPS Z3, Z3, Z3

// func gemmF32x1x4(x *float32, w *float32, wStride, k int, dst *float32)
// dst[j] = Σ x[c]·w[j][c] for 4 weight rows j (stride in bytes), any k > 0.
TEXT ·gemmF32x1x4(SB), NOSPLIT, $0-40
	PROLOGUE1x4
	CMPQ CX, $16
	JLT  f1x4tail

f1x4loop:
	VMOVUPS (R8), Z16
	VMOVUPS (SI), Z20
	VMOVUPS (SI)(DX*1), Z21
	VMOVUPS (SI)(DX*2), Z22
	VMOVUPS (R11), Z23
	ADDQ    $64, R8
	ADDQ    $64, SI
	ADDQ    $64, R11
	FMA1x4
	SUBQ    $16, CX
	CMPQ    CX, $16
	JGE     f1x4loop

f1x4tail:
	TESTQ     CX, CX
	JZ        f1x4done
	MOVL      $1, AX
	SHLL      CX, AX
	DECL      AX
	KMOVW     AX, K1
	VMOVUPS.Z (R8), K1, Z16
	VMOVUPS.Z (SI), K1, Z20
	VMOVUPS.Z (SI)(DX*1), K1, Z21
	VMOVUPS.Z (SI)(DX*2), K1, Z22
	VMOVUPS.Z (R11), K1, Z23
	FMA1x4

f1x4done:
	REDUCE4B(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0)
	VMOVUPS X0, (DI)
	VZEROUPPER
	RET

// func gemmBF16x1x4(x *float32, w *uint16, wStride, k int, dst *float32)
// k > 0, multiple of 16.
TEXT ·gemmBF16x1x4(SB), NOSPLIT, $0-40
	PROLOGUE1x4

b1x4loop:
	VMOVUPS   (R8), Z16
	VPMOVZXWD (SI), Z20
	VPMOVZXWD (SI)(DX*1), Z21
	VPMOVZXWD (SI)(DX*2), Z22
	VPMOVZXWD (R11), Z23
	VPSLLD    $16, Z20, Z20
	VPSLLD    $16, Z21, Z21
	VPSLLD    $16, Z22, Z22
	VPSLLD    $16, Z23, Z23
	ADDQ      $64, R8
	ADDQ      $32, SI
	ADDQ      $32, R11
	FMA1x4
	SUBQ      $16, CX
	JNZ       b1x4loop
	REDUCE4B(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0)
	VMOVUPS X0, (DI)
	VZEROUPPER
	RET

// func gemmF32x1x1(x, w *float32, k int) float32
// Any k > 0.
TEXT ·gemmF32x1x1(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), R8
	MOVQ   w+8(FP), SI
	MOVQ   k+16(FP), CX
	VXORPS Z0, Z0, Z0
	CMPQ   CX, $16
	JLT    f1x1tail

f1x1loop:
	VMOVUPS     (R8), Z16
	VMOVUPS     (SI), Z20
	ADDQ        $64, R8
	ADDQ        $64, SI
	VFMADD231PS Z20, Z16, Z0
	SUBQ        $16, CX
	CMPQ        CX, $16
	JGE         f1x1loop

f1x1tail:
	TESTQ       CX, CX
	JZ          f1x1done
	MOVL        $1, AX
	SHLL        CX, AX
	DECL        AX
	KMOVW       AX, K1
	VMOVUPS.Z   (R8), K1, Z16
	VMOVUPS.Z   (SI), K1, Z20
	VFMADD231PS Z20, Z16, Z0

f1x1done:
	REDUCE1
	MOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func gemmBF16x1x1(x *float32, w *uint16, k int) float32
// k > 0, multiple of 16.
TEXT ·gemmBF16x1x1(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), R8
	MOVQ   w+8(FP), SI
	MOVQ   k+16(FP), CX
	VXORPS Z0, Z0, Z0

b1x1loop:
	VMOVUPS     (R8), Z16
	VPMOVZXWD   (SI), Z20
	VPSLLD      $16, Z20, Z20
	ADDQ        $64, R8
	ADDQ        $32, SI
	VFMADD231PS Z20, Z16, Z0
	SUBQ        $16, CX
	JNZ         b1x1loop
	REDUCE1
	MOVSS X0, ret+24(FP)
	VZEROUPPER
	RET
