#include "textflag.h"

// AVX-512F kernels for F16 weights × float32 activations (f16w.go): the
// BF16 kernels of gemm_amd64.s / gemm1_amd64.s with VCVTPH2PS widening the
// halves in registers. The summation order per output is theirs (one
// 16-lane accumulator per output, FMAs in k order, the same reduction
// tree), so a row's result is the same bits in a 4×4 tile or alone.
// Registers as in gemm_amd64.s.

#define FMA4x4 \
	VFMADD231PS Z20, Z16, Z0;  \
	VFMADD231PS Z21, Z16, Z1;  \
	VFMADD231PS Z22, Z16, Z2;  \
	VFMADD231PS Z23, Z16, Z3;  \
	VFMADD231PS Z20, Z17, Z4;  \
	VFMADD231PS Z21, Z17, Z5;  \
	VFMADD231PS Z22, Z17, Z6;  \
	VFMADD231PS Z23, Z17, Z7;  \
	VFMADD231PS Z20, Z18, Z8;  \
	VFMADD231PS Z21, Z18, Z9;  \
	VFMADD231PS Z22, Z18, Z10; \
	VFMADD231PS Z23, Z18, Z11; \
	VFMADD231PS Z20, Z19, Z12; \
	VFMADD231PS Z21, Z19, Z13; \
	VFMADD231PS Z22, Z19, Z14; \
	VFMADD231PS Z23, Z19, Z15

#define LOADX4 \
	VMOVUPS (R8), Z16;        \
	VMOVUPS (R8)(R9*1), Z17;  \
	VMOVUPS (R8)(R9*2), Z18;  \
	VMOVUPS (R10), Z19;       \
	ADDQ    $64, R8;          \
	ADDQ    $64, R10

#define REDUCE4(a, b, c, d, ya, yb, yc, yd, xa) \
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

#define REDUCE1 \
	VEXTRACTF64X4 $1, Z0, Y24; \
	VADDPS        Y24, Y0, Y0; \
	VHADDPS       Y0, Y0, Y0;  \
	VHADDPS       Y0, Y0, Y0;  \
	VEXTRACTF32X4 $1, Y0, X24; \
	VADDPS        X24, X0, X0

// func gemmF16x4x4(x *float32, xStride int, w *uint16, wStride, k int, dst *float32, dstStride int)
// k > 0, multiple of 16.
TEXT ·gemmF16x4x4(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), R8
	MOVQ xStride+8(FP), R9
	LEAQ (R8)(R9*2), R10
	ADDQ R9, R10
	MOVQ w+16(FP), SI
	MOVQ wStride+24(FP), DX
	LEAQ (SI)(DX*2), R11
	ADDQ DX, R11
	MOVQ k+32(FP), CX
	MOVQ dst+40(FP), DI
	MOVQ dstStride+48(FP), BX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z5, Z5, Z5
	VXORPS Z6, Z6, Z6
	VXORPS Z7, Z7, Z7
	VXORPS Z8, Z8, Z8
	VXORPS Z9, Z9, Z9
	VXORPS Z10, Z10, Z10
	VXORPS Z11, Z11, Z11
	VXORPS Z12, Z12, Z12
	VXORPS Z13, Z13, Z13
	VXORPS Z14, Z14, Z14
	VXORPS Z15, Z15, Z15

h4x4loop:
	LOADX4
	VCVTPH2PS (SI), Z20
	VCVTPH2PS (SI)(DX*1), Z21
	VCVTPH2PS (SI)(DX*2), Z22
	VCVTPH2PS (R11), Z23
	ADDQ      $32, SI
	ADDQ      $32, R11
	FMA4x4
	SUBQ      $16, CX
	JNZ       h4x4loop
	REDUCE4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0)
	VMOVUPS X0, (DI)
	REDUCE4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4)
	VMOVUPS X4, (DI)(BX*1)
	REDUCE4(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8)
	VMOVUPS X8, (DI)(BX*2)
	LEAQ    (DI)(BX*2), DI
	REDUCE4(Z12, Z13, Z14, Z15, Y12, Y13, Y14, Y15, X12)
	VMOVUPS X12, (DI)(BX*1)
	VZEROUPPER
	RET

// func gemmF16x1x4(x *float32, w *uint16, wStride, k int, dst *float32)
// One activation row × 4 weight rows; k > 0, multiple of 16.
TEXT ·gemmF16x1x4(SB), NOSPLIT, $0-40
	MOVQ   x+0(FP), R8
	MOVQ   w+8(FP), SI
	MOVQ   wStride+16(FP), DX
	LEAQ   (SI)(DX*2), R11
	ADDQ   DX, R11
	MOVQ   k+24(FP), CX
	MOVQ   dst+32(FP), DI
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3

h1x4loop:
	PREFETCHT0  1024(SI)
	PREFETCHT0  1024(SI)(DX*1)
	PREFETCHT0  1024(SI)(DX*2)
	PREFETCHT0  1024(R11)
	VMOVUPS     (R8), Z16
	VCVTPH2PS   (SI), Z20
	VCVTPH2PS   (SI)(DX*1), Z21
	VCVTPH2PS   (SI)(DX*2), Z22
	VCVTPH2PS   (R11), Z23
	ADDQ        $64, R8
	ADDQ        $32, SI
	ADDQ        $32, R11
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z21, Z16, Z1
	VFMADD231PS Z22, Z16, Z2
	VFMADD231PS Z23, Z16, Z3
	SUBQ        $16, CX
	JNZ         h1x4loop
	REDUCE4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0)
	VMOVUPS X0, (DI)
	VZEROUPPER
	RET

// func gemmF16x1x1(x *float32, w *uint16, k int) float32
// k > 0, multiple of 16.
TEXT ·gemmF16x1x1(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), R8
	MOVQ   w+8(FP), SI
	MOVQ   k+16(FP), CX
	VXORPS Z0, Z0, Z0

h1x1loop:
	VMOVUPS     (R8), Z16
	VCVTPH2PS   (SI), Z20
	ADDQ        $64, R8
	ADDQ        $32, SI
	VFMADD231PS Z20, Z16, Z0
	SUBQ        $16, CX
	JNZ         h1x1loop
	REDUCE1
	MOVSS X0, ret+24(FP)
	VZEROUPPER
	RET
