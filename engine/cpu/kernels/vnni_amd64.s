#include "textflag.h"

// AVX-512 (F, BW, VL, VNNI) kernels over the packed layout (pack.go).
//
// Registers of the gemm kernels:
//   SI   packed weights (groups back to back, advances through all of them)
//   AX   groups left, CX blocks left in the group
//   DI   dst of activation row 0 for the current group, DX dst row stride (bytes)
//   R8   x quants of row 0 at the current block, R9 row stride (bytes), R10 row 3
//   R11  x scales of row 0, R12 row stride of scales/sums (bytes), R13 row 3
//   BX   x corrections (−off·Σq) of row 0, R14 row 3
//   R15  software prefetch distance of the ×4 kernels (bytes ahead of SI, > 0)
//   Z0-Z7 weight chunks (16 rows × 4 values each), Z8 the 16 row scales
//   Z16-Z19 int32 block sums, Z20-Z23 scale products, Z24-Z27 float sums

// Q8 block: scales and 8 chunks of 64 bytes.
#define LOADQ8 \
	VCVTPH2PS (SI), Z8;     \
	VMOVDQU32 32(SI), Z0;   \
	VMOVDQU32 96(SI), Z1;   \
	VMOVDQU32 160(SI), Z2;  \
	VMOVDQU32 224(SI), Z3;  \
	VMOVDQU32 288(SI), Z4;  \
	VMOVDQU32 352(SI), Z5;  \
	VMOVDQU32 416(SI), Z6;  \
	VMOVDQU32 480(SI), Z7

// Q4 block: scales and 4 chunks of 64 bytes, low nibbles = chunks 0-3,
// high nibbles = chunks 4-7 (Z9 = 0x0f bytes).
#define LOADQ4 \
	VCVTPH2PS (SI), Z8;     \
	VMOVDQU32 32(SI), Z0;   \
	VMOVDQU32 96(SI), Z1;   \
	VMOVDQU32 160(SI), Z2;  \
	VMOVDQU32 224(SI), Z3;  \
	VPSRLW    $4, Z0, Z4;   \
	VPSRLW    $4, Z1, Z5;   \
	VPSRLW    $4, Z2, Z6;   \
	VPSRLW    $4, Z3, Z7;   \
	VPANDD    Z9, Z0, Z0;   \
	VPANDD    Z9, Z1, Z1;   \
	VPANDD    Z9, Z2, Z2;   \
	VPANDD    Z9, Z3, Z3;   \
	VPANDD    Z9, Z4, Z4;   \
	VPANDD    Z9, Z5, Z5;   \
	VPANDD    Z9, Z6, Z6;   \
	VPANDD    Z9, Z7, Z7

// Four activation rows × chunk Z (values off..off+3 of the block).
#define DOT4(off, Z) \
	VPDPBUSD.BCST off(R8), Z, Z16;        \
	VPDPBUSD.BCST off(R8)(R9*1), Z, Z17;  \
	VPDPBUSD.BCST off(R8)(R9*2), Z, Z18;  \
	VPDPBUSD.BCST off(R10), Z, Z19

// Software prefetch of line off of the block R15 bytes ahead into L1 and
// of the block 2·R15 ahead into L2 (as the ×8 kernels: vnni8_amd64.s).
#define PFX4(off) \
	PREFETCHT0 off(SI)(R15*1); \
	PREFETCHT2 off(SI)(R15*2)

#define NOPFX4(off)

// BLOCK4(PF4, PF8): lines 0-256 of the block ahead always, 320-448
// through PF4, 512 through PF8 (PFX4 for Q8, NOPFX4 for Q4).
#define BLOCK4(PF4, PF8) \
	VPBROADCASTD (BX), Z16;         \
	VPBROADCASTD (BX)(R12*1), Z17;  \
	VPBROADCASTD (BX)(R12*2), Z18;  \
	VPBROADCASTD (R14), Z19;        \
	PFX4(0);                        \
	DOT4(0, Z0);                    \
	PFX4(64);                       \
	DOT4(4, Z1);                    \
	PFX4(128);                      \
	DOT4(8, Z2);                    \
	PFX4(192);                      \
	DOT4(12, Z3);                   \
	PFX4(256);                      \
	DOT4(16, Z4);                   \
	PF4(320);                       \
	DOT4(20, Z5);                   \
	PF4(384);                       \
	DOT4(24, Z6);                   \
	PF4(448);                       \
	DOT4(28, Z7);                   \
	PF8(512);                       \
	VCVTDQ2PS Z16, Z16;             \
	VCVTDQ2PS Z17, Z17;             \
	VCVTDQ2PS Z18, Z18;             \
	VCVTDQ2PS Z19, Z19;             \
	VMULPS.BCST (R11), Z8, Z20;        \
	VMULPS.BCST (R11)(R12*1), Z8, Z21; \
	VMULPS.BCST (R11)(R12*2), Z8, Z22; \
	VMULPS.BCST (R13), Z8, Z23;        \
	VFMADD231PS Z20, Z16, Z24;      \
	VFMADD231PS Z21, Z17, Z25;      \
	VFMADD231PS Z22, Z18, Z26;      \
	VFMADD231PS Z23, Z19, Z27;      \
	ADDQ $32, R8;                   \
	ADDQ $32, R10;                  \
	ADDQ $4, R11;                   \
	ADDQ $4, R13;                   \
	ADDQ $4, BX;                    \
	ADDQ $4, R14

// Arguments and per-group set-up shared by the ×4 kernels.
#define PROLOGUE4 \
	MOVQ w+0(FP), SI;          \
	MOVQ ngroups+16(FP), AX;   \
	MOVQ dst+56(FP), DI;       \
	MOVQ lddBytes+64(FP), DX;  \
	MOVQ kstride+48(FP), R9;   \
	MOVQ nb+8(FP), R12;        \
	SHLQ $2, R12;              \
	MOVQ pf+72(FP), R15

#define GROUP4 \
	VXORPS Z24, Z24, Z24;          \
	VXORPS Z25, Z25, Z25;          \
	VXORPS Z26, Z26, Z26;          \
	VXORPS Z27, Z27, Z27;          \
	MOVQ nb+8(FP), CX;             \
	MOVQ xq+24(FP), R8;            \
	LEAQ (R8)(R9*2), R10;          \
	ADDQ R9, R10;                  \
	MOVQ xd+32(FP), R11;           \
	LEAQ (R11)(R12*2), R13;        \
	ADDQ R12, R13;                 \
	MOVQ xs+40(FP), BX;            \
	LEAQ (BX)(R12*2), R14;         \
	ADDQ R12, R14

#define STORE4 \
	VMOVUPS Z24, (DI);        \
	VMOVUPS Z25, (DI)(DX*1);  \
	VMOVUPS Z26, (DI)(DX*2);  \
	LEAQ    (DI)(DX*2), CX;   \
	VMOVUPS Z27, (CX)(DX*1);  \
	ADDQ    $64, DI

// func gemmQ8x4VNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes, pf int)
TEXT ·gemmQ8x4VNNI(SB), NOSPLIT, $0-80
	PROLOGUE4

q8x4group:
	GROUP4

q8x4block:
	LOADQ8
	BLOCK4(PFX4, PFX4)
	ADDQ $544, SI
	DECQ CX
	JNZ  q8x4block
	STORE4
	DECQ AX
	JNZ  q8x4group
	VZEROUPPER
	RET

// func gemmQ4x4VNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes, pf int)
TEXT ·gemmQ4x4VNNI(SB), NOSPLIT, $0-80
	PROLOGUE4
	MOVL         $0x0f0f0f0f, CX
	VPBROADCASTD CX, Z9

q4x4group:
	GROUP4

q4x4block:
	LOADQ4
	BLOCK4(NOPFX4, NOPFX4)
	ADDQ $288, SI
	DECQ CX
	JNZ  q4x4block
	STORE4
	DECQ AX
	JNZ  q4x4group
	VZEROUPPER
	RET

// One activation row: two int32 chains (even/odd chunks) to halve the
// VPDPBUSD dependency chain.
#define BLOCK1 \
	VPBROADCASTD  (BX), Z16;     \
	VPXORD        Z17, Z17, Z17; \
	VPDPBUSD.BCST 0(R8), Z0, Z16;  \
	VPDPBUSD.BCST 4(R8), Z1, Z17;  \
	VPDPBUSD.BCST 8(R8), Z2, Z16;  \
	VPDPBUSD.BCST 12(R8), Z3, Z17; \
	VPDPBUSD.BCST 16(R8), Z4, Z16; \
	VPDPBUSD.BCST 20(R8), Z5, Z17; \
	VPDPBUSD.BCST 24(R8), Z6, Z16; \
	VPDPBUSD.BCST 28(R8), Z7, Z17; \
	VPADDD        Z17, Z16, Z16; \
	VCVTDQ2PS     Z16, Z16;      \
	VMULPS.BCST   (R11), Z8, Z20; \
	VFMADD231PS   Z20, Z16, Z24; \
	ADDQ $32, R8;                \
	ADDQ $4, R11;                \
	ADDQ $4, BX

#define GROUP1 \
	VXORPS Z24, Z24, Z24;  \
	MOVQ nb+8(FP), CX;     \
	MOVQ xq+24(FP), R8;    \
	MOVQ xd+32(FP), R11;   \
	MOVQ xs+40(FP), BX

// func quantizeQ8AVX512(x *float32, nb int, q *int8, d *float32, s8, s128 *int32)
// Per block of 32: a = max(amax, 1e-30), d = a/127, q = round-to-even(x·(127/a))
// (saturated to int8, though |q| <= 127), and −8·Σq, −128·Σq.
TEXT ·quantizeQ8AVX512(SB), NOSPLIT, $0-48
	MOVQ         x+0(FP), SI
	MOVQ         nb+8(FP), CX
	MOVQ         q+16(FP), DI
	MOVQ         d+24(FP), DX
	MOVQ         s8+32(FP), R8
	MOVQ         s128+40(FP), R9
	MOVL         $0x7fffffff, AX
	VPBROADCASTD AX, Z31
	MOVL         $0x42fe0000, AX // 127.0
	VMOVD        AX, X30
	MOVL         $0x0da24260, AX // 1e-30: floor of amax (finite 127/amax)
	VMOVD        AX, X29

qloop:
	VMOVUPS       (SI), Z0
	VMOVUPS       64(SI), Z1
	VANDPS        Z31, Z0, Z2
	VANDPS        Z31, Z1, Z3
	VMAXPS        Z3, Z2, Z2
	VEXTRACTF64X4 $1, Z2, Y3
	VMAXPS        Y3, Y2, Y2
	VEXTRACTF128  $1, Y2, X3
	VMAXPS        X3, X2, X2
	VPERMILPS     $0x4e, X2, X3
	VMAXPS        X3, X2, X2
	VPERMILPS     $0xb1, X2, X3
	VMAXPS        X3, X2, X2
	VMAXSS        X29, X2, X2
	VDIVSS        X30, X2, X4
	VMOVSS        X4, (DX)
	VDIVSS        X2, X30, X5
	VBROADCASTSS  X5, Z5
	VMULPS        Z5, Z0, Z0
	VMULPS        Z5, Z1, Z1
	VCVTPS2DQ     Z0, Z0
	VCVTPS2DQ     Z1, Z1
	VPMOVSDB      Z0, (DI)
	VPMOVSDB      Z1, 16(DI)
	VPADDD        Z1, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDD        Y1, Y0, Y0
	VEXTRACTI128  $1, Y0, X1
	VPADDD        X1, X0, X0
	VPSHUFD       $0x4e, X0, X1
	VPADDD        X1, X0, X0
	VPSHUFD       $0xb1, X0, X1
	VPADDD        X1, X0, X0
	VMOVD         X0, AX
	MOVL          AX, BX
	SHLL          $3, AX
	NEGL          AX
	MOVL          AX, (R8)
	SHLL          $7, BX
	NEGL          BX
	MOVL          BX, (R9)
	ADDQ          $128, SI
	ADDQ          $32, DI
	ADDQ          $4, DX
	ADDQ          $4, R8
	ADDQ          $4, R9
	DECQ          CX
	JNZ           qloop
	VZEROUPPER
	RET

// func dotsF32AVX512(dst, q, k *float32, strideBytes, n, hd int)
// dst[j] = Σ_i q[i]·k[j·stride + i] for j < n (n > 0 a multiple of 4;
// hd > 0 a multiple of 16): 4 keys per pass share the loads of q.
TEXT ·dotsF32AVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DX
	MOVQ q+8(FP), SI
	MOVQ k+16(FP), DI
	MOVQ strideBytes+24(FP), R8
	MOVQ n+32(FP), CX
	SHRQ $2, CX

dotsouter:
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	MOVQ   hd+40(FP), BX
	MOVQ   SI, R12
	MOVQ   DI, R9
	LEAQ   (DI)(R8*1), R10
	LEAQ   (DI)(R8*2), R11
	LEAQ   (R10)(R8*2), R13

dotsinner:
	VMOVUPS     (R12), Z4
	VFMADD231PS (R9), Z4, Z0
	VFMADD231PS (R10), Z4, Z1
	VFMADD231PS (R11), Z4, Z2
	VFMADD231PS (R13), Z4, Z3
	ADDQ        $64, R12
	ADDQ        $64, R9
	ADDQ        $64, R10
	ADDQ        $64, R11
	ADDQ        $64, R13
	SUBQ        $16, BX
	JNZ         dotsinner
	VEXTRACTF64X4 $1, Z0, Y5
	VADDPS        Y5, Y0, Y0
	VEXTRACTF64X4 $1, Z1, Y5
	VADDPS        Y5, Y1, Y1
	VEXTRACTF64X4 $1, Z2, Y5
	VADDPS        Y5, Y2, Y2
	VEXTRACTF64X4 $1, Z3, Y5
	VADDPS        Y5, Y3, Y3
	VHADDPS       Y1, Y0, Y0
	VHADDPS       Y3, Y2, Y2
	VHADDPS       Y2, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VMOVUPS       X0, (DX)
	ADDQ          $16, DX
	LEAQ          (DI)(R8*4), DI
	DECQ          CX
	JNZ           dotsouter
	VZEROUPPER
	RET

// func axpys128AVX512(acc, p, v *float32, strideBytes, n int)
// acc[0:128] += Σ_j p[j]·v[j·stride : j·stride+128] (n > 0), with acc in
// registers for the whole sum.
TEXT ·axpys128AVX512(SB), NOSPLIT, $0-40
	MOVQ    acc+0(FP), DX
	MOVQ    p+8(FP), SI
	MOVQ    v+16(FP), DI
	MOVQ    strideBytes+24(FP), R8
	MOVQ    n+32(FP), CX
	VMOVUPS (DX), Z0
	VMOVUPS 64(DX), Z1
	VMOVUPS 128(DX), Z2
	VMOVUPS 192(DX), Z3
	VMOVUPS 256(DX), Z4
	VMOVUPS 320(DX), Z5
	VMOVUPS 384(DX), Z6
	VMOVUPS 448(DX), Z7

axpys128loop:
	VBROADCASTSS (SI), Z8
	VFMADD231PS  (DI), Z8, Z0
	VFMADD231PS  64(DI), Z8, Z1
	VFMADD231PS  128(DI), Z8, Z2
	VFMADD231PS  192(DI), Z8, Z3
	VFMADD231PS  256(DI), Z8, Z4
	VFMADD231PS  320(DI), Z8, Z5
	VFMADD231PS  384(DI), Z8, Z6
	VFMADD231PS  448(DI), Z8, Z7
	ADDQ         $4, SI
	ADDQ         R8, DI
	DECQ         CX
	JNZ          axpys128loop
	VMOVUPS      Z0, (DX)
	VMOVUPS      Z1, 64(DX)
	VMOVUPS      Z2, 128(DX)
	VMOVUPS      Z3, 192(DX)
	VMOVUPS      Z4, 256(DX)
	VMOVUPS      Z5, 320(DX)
	VMOVUPS      Z6, 384(DX)
	VMOVUPS      Z7, 448(DX)
	VZEROUPPER
	RET

// func axpys16AVX512(acc, p, v *float32, strideBytes, n int)
// The same for 16 columns, with four accumulators (one FMA chain of n
// steps would wait on the FMA latency).
TEXT ·axpys16AVX512(SB), NOSPLIT, $0-40
	MOVQ    acc+0(FP), DX
	MOVQ    p+8(FP), SI
	MOVQ    v+16(FP), DI
	MOVQ    strideBytes+24(FP), R8
	MOVQ    n+32(FP), CX
	VMOVUPS (DX), Z0
	VXORPS  Z1, Z1, Z1
	VXORPS  Z2, Z2, Z2
	VXORPS  Z3, Z3, Z3
	MOVQ    CX, BX
	SHRQ    $2, BX
	JZ      axpys16tail

axpys16loop4:
	VBROADCASTSS 0(SI), Z8
	VFMADD231PS  (DI), Z8, Z0
	ADDQ         R8, DI
	VBROADCASTSS 4(SI), Z9
	VFMADD231PS  (DI), Z9, Z1
	ADDQ         R8, DI
	VBROADCASTSS 8(SI), Z10
	VFMADD231PS  (DI), Z10, Z2
	ADDQ         R8, DI
	VBROADCASTSS 12(SI), Z11
	VFMADD231PS  (DI), Z11, Z3
	ADDQ         R8, DI
	ADDQ         $16, SI
	DECQ         BX
	JNZ          axpys16loop4
	VADDPS       Z1, Z0, Z0
	VADDPS       Z3, Z2, Z2
	VADDPS       Z2, Z0, Z0

axpys16tail:
	ANDQ $3, CX
	JZ   axpys16done

axpys16loop:
	VBROADCASTSS (SI), Z8
	VFMADD231PS  (DI), Z8, Z0
	ADDQ         $4, SI
	ADDQ         R8, DI
	DECQ         CX
	JNZ          axpys16loop

axpys16done:
	VMOVUPS      Z0, (DX)
	VZEROUPPER
	RET

// Software prefetch of one block DX bytes ahead of SI into L1 (PREFETCHT0)
// and of the block 2·DX ahead into L2 (PREFETCHT2): a single thread
// streaming from DRAM needs more lines in flight than the out-of-order
// window gives a compute-heavy loop, and the far L2 prefetches add to
// what the L1 fill buffers hold (0.45 GB of Q8_0 weights, one thread:
// 13.2 → 15.3 GB/s of thread CPU time with the L2 half, gemm8 session 3).
#define PFQ8 \
	PREFETCHT0 0(SI)(DX*1); \
	PREFETCHT2 0(SI)(DX*2); \
	PREFETCHT0 64(SI)(DX*1); \
	PREFETCHT2 64(SI)(DX*2); \
	PREFETCHT0 128(SI)(DX*1); \
	PREFETCHT2 128(SI)(DX*2); \
	PREFETCHT0 192(SI)(DX*1); \
	PREFETCHT2 192(SI)(DX*2); \
	PREFETCHT0 256(SI)(DX*1); \
	PREFETCHT2 256(SI)(DX*2); \
	PREFETCHT0 320(SI)(DX*1); \
	PREFETCHT2 320(SI)(DX*2); \
	PREFETCHT0 384(SI)(DX*1); \
	PREFETCHT2 384(SI)(DX*2); \
	PREFETCHT0 448(SI)(DX*1); \
	PREFETCHT2 448(SI)(DX*2); \
	PREFETCHT0 512(SI)(DX*1); \
	PREFETCHT2 512(SI)(DX*2)

#define PFQ4 \
	PREFETCHT0 0(SI)(DX*1); \
	PREFETCHT2 0(SI)(DX*2); \
	PREFETCHT0 64(SI)(DX*1); \
	PREFETCHT2 64(SI)(DX*2); \
	PREFETCHT0 128(SI)(DX*1); \
	PREFETCHT2 128(SI)(DX*2); \
	PREFETCHT0 192(SI)(DX*1); \
	PREFETCHT2 192(SI)(DX*2); \
	PREFETCHT0 256(SI)(DX*1); \
	PREFETCHT2 256(SI)(DX*2)

// func gemmQ8x1VNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, pf int)
TEXT ·gemmQ8x1VNNI(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ ngroups+16(FP), AX
	MOVQ dst+48(FP), DI
	MOVQ pf+56(FP), DX

q8x1pgroup:
	GROUP1

q8x1pblock:
	PFQ8
	LOADQ8
	BLOCK1
	ADDQ $544, SI
	DECQ CX
	JNZ  q8x1pblock
	VMOVUPS Z24, (DI)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     q8x1pgroup
	VZEROUPPER
	RET

// func gemmQ4x1VNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, pf int)
TEXT ·gemmQ4x1VNNI(SB), NOSPLIT, $0-64
	MOVQ         w+0(FP), SI
	MOVQ         ngroups+16(FP), AX
	MOVQ         dst+48(FP), DI
	MOVQ         pf+56(FP), DX
	MOVL         $0x0f0f0f0f, CX
	VPBROADCASTD CX, Z9

q4x1pgroup:
	GROUP1

q4x1pblock:
	PFQ4
	LOADQ4
	BLOCK1
	ADDQ $288, SI
	DECQ CX
	JNZ  q4x1pblock
	VMOVUPS Z24, (DI)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     q4x1pgroup
	VZEROUPPER
	RET
