#include "textflag.h"

// AVX-512F float kernels (F32/BF16 weights × float32 activations).

// Float GEMM tile: 4 activation rows × 4 weight rows, dot-product form
// (Z0-Z15 hold the 16 partial sums, reduced at the end).
//   R8 x row 0, R9 x row stride (bytes), R10 x row 3
//   SI w row 0, DX w row stride (bytes), R11 w row 3
//   CX values left (multiple of 16), DI dst, BX dst row stride (bytes)

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

// Reduce Za..Zd (one x row against 4 weight rows) to 4 floats at off(DI).
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

#define PROLOGUEF \
	MOVQ x+0(FP), R8;             \
	MOVQ xStride+8(FP), R9;       \
	LEAQ (R8)(R9*2), R10;         \
	ADDQ R9, R10;                 \
	MOVQ w+16(FP), SI;            \
	MOVQ wStride+24(FP), DX;      \
	LEAQ (SI)(DX*2), R11;         \
	ADDQ DX, R11;                 \
	MOVQ k+32(FP), CX;            \
	MOVQ dst+40(FP), DI;          \
	MOVQ dstStride+48(FP), BX;    \
	VXORPS Z0, Z0, Z0;   VXORPS Z1, Z1, Z1;   VXORPS Z2, Z2, Z2;   VXORPS Z3, Z3, Z3;   \
	VXORPS Z4, Z4, Z4;   VXORPS Z5, Z5, Z5;   VXORPS Z6, Z6, Z6;   VXORPS Z7, Z7, Z7;   \
	VXORPS Z8, Z8, Z8;   VXORPS Z9, Z9, Z9;   VXORPS Z10, Z10, Z10; VXORPS Z11, Z11, Z11; \
	VXORPS Z12, Z12, Z12; VXORPS Z13, Z13, Z13; VXORPS Z14, Z14, Z14; VXORPS Z15, Z15, Z15

#define EPILOGUEF \
	REDUCE4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0);       \
	VMOVUPS X0, (DI);                                  \
	REDUCE4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4);       \
	VMOVUPS X4, (DI)(BX*1);                            \
	REDUCE4(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8);   \
	VMOVUPS X8, (DI)(BX*2);                            \
	LEAQ    (DI)(BX*2), DI;                            \
	REDUCE4(Z12, Z13, Z14, Z15, Y12, Y13, Y14, Y15, X12); \
	VMOVUPS X12, (DI)(BX*1);                           \
	VZEROUPPER

// func gemmF32x4x4(x *float32, xStride int, w *float32, wStride, k int, dst *float32, dstStride int)
// Any k > 0: the last k%16 values are loaded under a mask (zeroing; masked
// lanes are not read, so no fault past the end).
TEXT ·gemmF32x4x4(SB), NOSPLIT, $0-56
	PROLOGUEF
	CMPQ CX, $16
	JLT  f32x4tail

f32x4loop:
	LOADX4
	VMOVUPS (SI), Z20
	VMOVUPS (SI)(DX*1), Z21
	VMOVUPS (SI)(DX*2), Z22
	VMOVUPS (R11), Z23
	ADDQ    $64, SI
	ADDQ    $64, R11
	FMA4x4
	SUBQ    $16, CX
	CMPQ    CX, $16
	JGE     f32x4loop

f32x4tail:
	TESTQ     CX, CX
	JZ        f32x4done
	MOVL      $1, AX
	SHLL      CX, AX
	DECL      AX
	KMOVW     AX, K1
	VMOVUPS.Z (R8), K1, Z16
	VMOVUPS.Z (R8)(R9*1), K1, Z17
	VMOVUPS.Z (R8)(R9*2), K1, Z18
	VMOVUPS.Z (R10), K1, Z19
	VMOVUPS.Z (SI), K1, Z20
	VMOVUPS.Z (SI)(DX*1), K1, Z21
	VMOVUPS.Z (SI)(DX*2), K1, Z22
	VMOVUPS.Z (R11), K1, Z23
	FMA4x4

f32x4done:
	EPILOGUEF
	RET

// func gemmBF16x4x4(x *float32, xStride int, w *uint16, wStride, k int, dst *float32, dstStride int)
TEXT ·gemmBF16x4x4(SB), NOSPLIT, $0-56
	PROLOGUEF

bf16x4loop:
	LOADX4
	VPMOVZXWD (SI), Z20
	VPMOVZXWD (SI)(DX*1), Z21
	VPMOVZXWD (SI)(DX*2), Z22
	VPMOVZXWD (R11), Z23
	VPSLLD    $16, Z20, Z20
	VPSLLD    $16, Z21, Z21
	VPSLLD    $16, Z22, Z22
	VPSLLD    $16, Z23, Z23
	ADDQ      $32, SI
	ADDQ      $32, R11
	FMA4x4
	SUBQ      $16, CX
	JNZ       bf16x4loop
	EPILOGUEF
	RET

// func gemmNN8x32(a *float32, lda int, b *float32, ldb, k int, dst *float32, ldd int, cols int)
// dst[i, j] = Σ_c a[i, c]·b[c, j] for 8 rows i and the first cols (1..32)
// of 32 columns j (strides in bytes, k > 0): 16 accumulators, per c two
// (masked) loads of b and 8 broadcasts of a; masked stores.
TEXT ·gemmNN8x32(SB), NOSPLIT, $0-64
	MOVQ  cols+56(FP), CX
	MOVQ  $1, AX
	SHLQ  CX, AX
	DECQ  AX
	KMOVW AX, K1 // columns 0-15
	SHRQ  $16, AX
	KMOVW AX, K2 // columns 16-31
	MOVQ a+0(FP), R8
	MOVQ lda+8(FP), R9
	MOVQ b+16(FP), SI
	MOVQ ldb+24(FP), DX
	MOVQ k+32(FP), CX
	MOVQ dst+40(FP), DI
	MOVQ ldd+48(FP), BX
	LEAQ (R8)(R9*4), R10 // row 4
	VXORPS Z0, Z0, Z0;   VXORPS Z1, Z1, Z1;   VXORPS Z2, Z2, Z2;   VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4;   VXORPS Z5, Z5, Z5;   VXORPS Z6, Z6, Z6;   VXORPS Z7, Z7, Z7
	VXORPS Z8, Z8, Z8;   VXORPS Z9, Z9, Z9;   VXORPS Z10, Z10, Z10; VXORPS Z11, Z11, Z11
	VXORPS Z12, Z12, Z12; VXORPS Z13, Z13, Z13; VXORPS Z14, Z14, Z14; VXORPS Z15, Z15, Z15
	LEAQ (R9)(R9*2), R11 // 3·lda

nnloop:
	VMOVUPS.Z    (SI), K1, Z16
	VMOVUPS.Z    64(SI), K2, Z17
	VBROADCASTSS (R8), Z18
	VBROADCASTSS (R8)(R9*1), Z19
	VBROADCASTSS (R8)(R9*2), Z20
	VBROADCASTSS (R8)(R11*1), Z21
	VBROADCASTSS (R10), Z22
	VBROADCASTSS (R10)(R9*1), Z23
	VBROADCASTSS (R10)(R9*2), Z24
	VBROADCASTSS (R10)(R11*1), Z25
	VFMADD231PS  Z16, Z18, Z0
	VFMADD231PS  Z17, Z18, Z1
	VFMADD231PS  Z16, Z19, Z2
	VFMADD231PS  Z17, Z19, Z3
	VFMADD231PS  Z16, Z20, Z4
	VFMADD231PS  Z17, Z20, Z5
	VFMADD231PS  Z16, Z21, Z6
	VFMADD231PS  Z17, Z21, Z7
	VFMADD231PS  Z16, Z22, Z8
	VFMADD231PS  Z17, Z22, Z9
	VFMADD231PS  Z16, Z23, Z10
	VFMADD231PS  Z17, Z23, Z11
	VFMADD231PS  Z16, Z24, Z12
	VFMADD231PS  Z17, Z24, Z13
	VFMADD231PS  Z16, Z25, Z14
	VFMADD231PS  Z17, Z25, Z15
	ADDQ         $4, R8
	ADDQ         $4, R10
	ADDQ         DX, SI
	DECQ         CX
	JNZ          nnloop
	LEAQ    (BX)(BX*2), R11
	VMOVUPS Z0, K1, (DI)
	VMOVUPS Z1, K2, 64(DI)
	VMOVUPS Z2, K1, (DI)(BX*1)
	VMOVUPS Z3, K2, 64(DI)(BX*1)
	VMOVUPS Z4, K1, (DI)(BX*2)
	VMOVUPS Z5, K2, 64(DI)(BX*2)
	VMOVUPS Z6, K1, (DI)(R11*1)
	VMOVUPS Z7, K2, 64(DI)(R11*1)
	LEAQ    (DI)(BX*4), DI
	VMOVUPS Z8, K1, (DI)
	VMOVUPS Z9, K2, 64(DI)
	VMOVUPS Z10, K1, (DI)(BX*1)
	VMOVUPS Z11, K2, 64(DI)(BX*1)
	VMOVUPS Z12, K1, (DI)(BX*2)
	VMOVUPS Z13, K2, 64(DI)(BX*2)
	VMOVUPS Z14, K1, (DI)(R11*1)
	VMOVUPS Z15, K2, 64(DI)(R11*1)
	VZEROUPPER
	RET

// func expSubAVX512(x *float32, n int, mx float32) float32
// x[j] = exp(x[j] − mx) in place (Cephes expf: clamp to [−87, ...], n =
// round(t·log2 e), two-part ln 2 reduction, degree-6 polynomial, VSCALEFPS),
// returns Σ x[j] (16 float32 lanes, then summed). n > 0.
TEXT ·expSubAVX512(SB), NOSPLIT, $0-28
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS mx+16(FP), Z20
	MOVL         $0xc2ae0000, AX // -87
	VPBROADCASTD AX, Z21
	MOVL         $0x3fb8aa3b, AX // log2 e
	VPBROADCASTD AX, Z22
	MOVL         $0xbf318000, AX // -0.693359375
	VPBROADCASTD AX, Z23
	MOVL         $0x395e8083, AX // 2.12194440e-4
	VPBROADCASTD AX, Z24
	MOVL         $0x39506967, AX // 1.9875691500e-4
	VPBROADCASTD AX, Z25
	MOVL         $0x3ab743ce, AX // 1.3981999507e-3
	VPBROADCASTD AX, Z26
	MOVL         $0x3c088908, AX // 8.3334519073e-3
	VPBROADCASTD AX, Z27
	MOVL         $0x3d2aa9c1, AX // 4.1665795894e-2
	VPBROADCASTD AX, Z28
	MOVL         $0x3e2aaaaa, AX // 1.6666665459e-1
	VPBROADCASTD AX, Z29
	MOVL         $0x3f000000, AX // 5.0000001201e-1
	VPBROADCASTD AX, Z30
	MOVL         $0x3f800000, AX // 1
	VPBROADCASTD AX, Z31
	VXORPS       Z19, Z19, Z19
	MOVQ         $0xffff, AX
	KMOVW        AX, K1

exploop:
	CMPQ CX, $16
	JGE  expfull
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1

expfull:
	VMOVUPS.Z   (SI), K1, Z0
	VSUBPS      Z20, Z0, Z0
	VMAXPS      Z21, Z0, Z0
	VMULPS      Z22, Z0, Z1
	VRNDSCALEPS $0, Z1, Z1
	VFMADD231PS Z23, Z1, Z0
	VFMADD231PS Z24, Z1, Z0
	VMULPS      Z0, Z0, Z2
	VMOVAPS     Z25, Z3
	VFMADD213PS Z26, Z0, Z3
	VFMADD213PS Z27, Z0, Z3
	VFMADD213PS Z28, Z0, Z3
	VFMADD213PS Z29, Z0, Z3
	VFMADD213PS Z30, Z0, Z3
	VADDPS      Z31, Z0, Z4
	VFMADD231PS Z2, Z3, Z4
	VSCALEFPS   Z1, Z4, Z4
	VMOVUPS     Z4, K1, (SI)
	VADDPS      Z4, Z19, K1, Z19
	ADDQ        $64, SI
	SUBQ        $16, CX
	JGT         exploop
	VEXTRACTF64X4 $1, Z19, Y0
	VADDPS        Y0, Y19, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VHADDPS       X0, X0, X0
	VHADDPS       X0, X0, X0
	VZEROUPPER
	MOVSS         X0, ret+24(FP)
	RET

// MAXREDUCE leaves the largest of Z0's 16 lanes in every lane of X0 (Y1 scratch).
#define MAXREDUCE \
	VEXTRACTF64X4 $1, Z0, Y1;   \
	VMAXPS        Y1, Y0, Y0;   \
	VEXTRACTF128  $1, Y0, X1;   \
	VMAXPS        X1, X0, X0;   \
	VPERMILPS     $0x4e, X0, X1; \
	VMAXPS        X1, X0, X0;   \
	VPERMILPS     $0xb1, X0, X1; \
	VMAXPS        X1, X0, X0

// func maxAVX512(x *float32, n int) float32
// max of x[0:n], n > 0 (masked tail; masked-off lanes keep −Inf).
TEXT ·maxAVX512(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	MOVL         $0xff800000, AX // −Inf
	VPBROADCASTD AX, Z0
	VMOVAPS      Z0, Z1
	MOVQ         $0xffff, AX
	KMOVW        AX, K1

maxloop:
	CMPQ CX, $16
	JGE  maxfull
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1
	VMOVAPS Z1, Z2
	VMOVUPS (SI), K1, Z2
	VMAXPS  Z2, Z0, Z0
	JMP     maxdone

maxfull:
	VMAXPS (SI), Z0, Z0
	ADDQ   $64, SI
	SUBQ   $16, CX
	JNZ    maxloop

maxdone:
	MAXREDUCE
	VZEROUPPER
	MOVSS         X0, ret+16(FP)
	RET

// func argmaxAVX512(x *float32, n int) int
// The first index of the largest non-NaN value of x[0:n]; n > 0 and x[0]
// is not NaN, so that value is in x. Pass 1 keeps per-lane maxima with
// the accumulator as VMAXPS's second operand, which it returns when the
// loaded value is NaN (NaNs are skipped, as engine.Argmax skips them);
// pass 2 compares 16 values at a time with the maximum (equal-ordered: NaN
// never matches, −0 matches +0 as == does) and stops at the first match.
TEXT ·argmaxAVX512(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	MOVQ         SI, DI
	MOVQ         CX, DX
	MOVL         $0xff800000, AX // −Inf
	VPBROADCASTD AX, Z0
	VMOVAPS      Z0, Z3

am1loop:
	CMPQ    CX, $16
	JLT     am1tail
	VMOVUPS (SI), Z2
	VMAXPS  Z0, Z2, Z0
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     am1loop

am1tail:
	TESTQ   CX, CX
	JZ      am1reduce
	MOVQ    $1, AX
	SHLQ    CX, AX
	DECQ    AX
	KMOVW   AX, K1
	VMOVAPS Z3, Z2
	VMOVUPS (SI), K1, Z2 // masked-off lanes keep −Inf
	VMAXPS  Z0, Z2, Z0

am1reduce:
	MAXREDUCE
	VBROADCASTSS  X0, Z0
	XORQ          BX, BX // index of the first value at DI

am2loop:
	CMPQ   DX, $16
	JLT    am2tail
	VCMPPS $0, (DI), Z0, K2 // EQ_OQ
	KMOVW  K2, AX
	TESTL  AX, AX
	JNZ    am2found
	ADDQ   $64, DI
	ADDQ   $16, BX
	SUBQ   $16, DX
	JMP    am2loop

am2tail:
	MOVQ      DX, CX
	MOVQ      $1, R8
	SHLQ      CX, R8
	DECQ      R8
	KMOVW     R8, K1
	VMOVUPS.Z (DI), K1, Z2
	VCMPPS    $0, Z2, Z0, K2
	KMOVW     K2, AX
	ANDL      R8, AX // zeroed lanes past n would match a maximum of 0

am2found:
	BSFL      AX, AX
	ADDQ      BX, AX
	MOVQ      AX, ret+16(FP)
	VZEROUPPER
	RET
