#include "textflag.h"

// AVX-512 VNNI kernels for packed MLX affine matrices (mlx.go).
// Registers as in vnni_amd64.s, plus R15 = column groups left, Z8 = the 16
// row scales, Z9 = the 16 −bias/128 of the column group, Z10 = 0x0f bytes,
// Z12-Z15 = Σ(x codes)·(−128) of the block per activation row (float).

#define LOADC8 \
	VMOVDQU32 (SI), Z0;     \
	VMOVDQU32 64(SI), Z1;   \
	VMOVDQU32 128(SI), Z2;  \
	VMOVDQU32 192(SI), Z3;  \
	VMOVDQU32 256(SI), Z4;  \
	VMOVDQU32 320(SI), Z5;  \
	VMOVDQU32 384(SI), Z6;  \
	VMOVDQU32 448(SI), Z7

#define LOADC4 \
	VMOVDQU32 (SI), Z0;     \
	VMOVDQU32 64(SI), Z1;   \
	VMOVDQU32 128(SI), Z2;  \
	VMOVDQU32 192(SI), Z3;  \
	VPSRLW    $4, Z0, Z4;   \
	VPSRLW    $4, Z1, Z5;   \
	VPSRLW    $4, Z2, Z6;   \
	VPSRLW    $4, Z3, Z7;   \
	VPANDD    Z10, Z0, Z0;  \
	VPANDD    Z10, Z1, Z1;  \
	VPANDD    Z10, Z2, Z2;  \
	VPANDD    Z10, Z3, Z3;  \
	VPANDD    Z10, Z4, Z4;  \
	VPANDD    Z10, Z5, Z5;  \
	VPANDD    Z10, Z6, Z6;  \
	VPANDD    Z10, Z7, Z7

#define HEAD \
	VPMOVZXWD (SI), Z8;     \
	VPSLLD    $16, Z8, Z8;  \
	VPMOVZXWD 32(SI), Z9;   \
	VPSLLD    $16, Z9, Z9;  \
	ADDQ      $64, SI

// float32 head: 16 scales, 16 −bias/128 (the Q4_K rewrite).
#define HEADF \
	VMOVUPS (SI), Z8;    \
	VMOVUPS 64(SI), Z9;  \
	ADDQ    $128, SI

#define DOT4(off, Z) \
	VPDPBUSD.BCST off(R8), Z, Z16;        \
	VPDPBUSD.BCST off(R8)(R9*1), Z, Z17;  \
	VPDPBUSD.BCST off(R8)(R9*2), Z, Z18;  \
	VPDPBUSD.BCST off(R10), Z, Z19

#define MBLOCK4 \
	VPXORD Z16, Z16, Z16;           \
	VPXORD Z17, Z17, Z17;           \
	VPXORD Z18, Z18, Z18;           \
	VPXORD Z19, Z19, Z19;           \
	DOT4(0, Z0);                    \
	DOT4(4, Z1);                    \
	DOT4(8, Z2);                    \
	DOT4(12, Z3);                   \
	DOT4(16, Z4);                   \
	DOT4(20, Z5);                   \
	DOT4(24, Z6);                   \
	DOT4(28, Z7);                   \
	VCVTDQ2PS Z16, Z16;             \
	VCVTDQ2PS Z17, Z17;             \
	VCVTDQ2PS Z18, Z18;             \
	VCVTDQ2PS Z19, Z19;             \
	VPBROADCASTD (BX), Z12;         \
	VPBROADCASTD (BX)(R12*1), Z13;  \
	VPBROADCASTD (BX)(R12*2), Z14;  \
	VPBROADCASTD (R14), Z15;        \
	VCVTDQ2PS Z12, Z12;             \
	VCVTDQ2PS Z13, Z13;             \
	VCVTDQ2PS Z14, Z14;             \
	VCVTDQ2PS Z15, Z15;             \
	VMULPS    Z8, Z16, Z16;         \
	VMULPS    Z8, Z17, Z17;         \
	VMULPS    Z8, Z18, Z18;         \
	VMULPS    Z8, Z19, Z19;         \
	VFMADD231PS Z12, Z9, Z16;       \
	VFMADD231PS Z13, Z9, Z17;       \
	VFMADD231PS Z14, Z9, Z18;       \
	VFMADD231PS Z15, Z9, Z19;       \
	VFMADD231PS.BCST (R11), Z16, Z24;        \
	VFMADD231PS.BCST (R11)(R12*1), Z17, Z25; \
	VFMADD231PS.BCST (R11)(R12*2), Z18, Z26; \
	VFMADD231PS.BCST (R13), Z19, Z27;        \
	ADDQ $32, R8;                   \
	ADDQ $32, R10;                  \
	ADDQ $4, R11;                   \
	ADDQ $4, R13;                   \
	ADDQ $4, BX;                    \
	ADDQ $4, R14

// R12 = row stride of the per-block arrays = (ngr·bpg)·4 bytes.
#define PROLOGUE4 \
	MOVQ w+0(FP), SI;          \
	MOVQ ngroups+24(FP), AX;   \
	MOVQ dst+64(FP), DI;       \
	MOVQ lddBytes+72(FP), DX;  \
	MOVQ kstride+56(FP), R9;   \
	MOVQ ngr+8(FP), R12;       \
	IMULQ bpg+16(FP), R12;     \
	SHLQ $2, R12;              \
	MOVL $0x0f0f0f0f, CX;      \
	VPBROADCASTD CX, Z10

#define GROUP4 \
	VXORPS Z24, Z24, Z24;          \
	VXORPS Z25, Z25, Z25;          \
	VXORPS Z26, Z26, Z26;          \
	VXORPS Z27, Z27, Z27;          \
	MOVQ ngr+8(FP), R15;           \
	MOVQ xq+32(FP), R8;            \
	LEAQ (R8)(R9*2), R10;          \
	ADDQ R9, R10;                  \
	MOVQ xd+40(FP), R11;           \
	LEAQ (R11)(R12*2), R13;        \
	ADDQ R12, R13;                 \
	MOVQ xs+48(FP), BX;            \
	LEAQ (BX)(R12*2), R14;         \
	ADDQ R12, R14

#define STORE4 \
	VMOVUPS Z24, (DI);        \
	VMOVUPS Z25, (DI)(DX*1);  \
	VMOVUPS Z26, (DI)(DX*2);  \
	LEAQ    (DI)(DX*2), CX;   \
	VMOVUPS Z27, (CX)(DX*1);  \
	ADDQ    $64, DI

// func gemmMLX8x4VNNI(w *byte, ngr, bpg, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmMLX8x4VNNI(SB), NOSPLIT, $0-80
	PROLOGUE4

m8x4group:
	GROUP4

m8x4cgroup:
	HEAD
	MOVQ bpg+16(FP), CX

m8x4block:
	LOADC8
	MBLOCK4
	ADDQ $512, SI
	DECQ CX
	JNZ  m8x4block
	DECQ R15
	JNZ  m8x4cgroup
	STORE4
	DECQ AX
	JNZ  m8x4group
	VZEROUPPER
	RET

// func gemmMLX4x4VNNI(w *byte, ngr, bpg, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmMLX4x4VNNI(SB), NOSPLIT, $0-80
	PROLOGUE4

m4x4group:
	GROUP4

m4x4cgroup:
	HEAD
	MOVQ bpg+16(FP), CX

m4x4block:
	LOADC4
	MBLOCK4
	ADDQ $256, SI
	DECQ CX
	JNZ  m4x4block
	DECQ R15
	JNZ  m4x4cgroup
	STORE4
	DECQ AX
	JNZ  m4x4group
	VZEROUPPER
	RET

#define MBLOCK1 \
	VPXORD        Z16, Z16, Z16; \
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
	VPBROADCASTD  (BX), Z12;     \
	VCVTDQ2PS     Z12, Z12;      \
	VMULPS        Z8, Z16, Z16;  \
	VFMADD231PS   Z12, Z9, Z16;  \
	VFMADD231PS.BCST (R11), Z16, Z24; \
	ADDQ $32, R8;                \
	ADDQ $4, R11;                \
	ADDQ $4, BX

#define GROUP1 \
	VXORPS Z24, Z24, Z24;  \
	MOVQ ngr+8(FP), R15;   \
	MOVQ xq+32(FP), R8;    \
	MOVQ xd+40(FP), R11;   \
	MOVQ xs+48(FP), BX

// The one-row (decode) kernels prefetch 2048 / 1024 bytes ahead, as the
// Q8_0 / Q4_0 ones do (see prefetchQ8 in kernels_amd64.go).

// func gemmMLX8x1VNNI(w *byte, ngr, bpg, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32)
TEXT ·gemmMLX8x1VNNI(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ ngroups+24(FP), AX
	MOVQ dst+56(FP), DI

m8x1group:
	GROUP1

m8x1cgroup:
	HEAD
	MOVQ bpg+16(FP), CX

m8x1block:
	PREFETCHT0 2048(SI)
	PREFETCHT0 2112(SI)
	PREFETCHT0 2176(SI)
	PREFETCHT0 2240(SI)
	PREFETCHT0 2304(SI)
	PREFETCHT0 2368(SI)
	PREFETCHT0 2432(SI)
	PREFETCHT0 2496(SI)
	LOADC8
	MBLOCK1
	ADDQ $512, SI
	DECQ CX
	JNZ  m8x1block
	DECQ R15
	JNZ  m8x1cgroup
	VMOVUPS Z24, (DI)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     m8x1group
	VZEROUPPER
	RET

// func gemmMLX4x1VNNI(w *byte, ngr, bpg, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32)
TEXT ·gemmMLX4x1VNNI(SB), NOSPLIT, $0-64
	MOVQ         w+0(FP), SI
	MOVQ         ngroups+24(FP), AX
	MOVQ         dst+56(FP), DI
	MOVL         $0x0f0f0f0f, CX
	VPBROADCASTD CX, Z10

m4x1group:
	GROUP1

m4x1cgroup:
	HEAD
	MOVQ bpg+16(FP), CX

m4x1block:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	PREFETCHT0 1152(SI)
	PREFETCHT0 1216(SI)
	LOADC4
	MBLOCK1
	ADDQ $256, SI
	DECQ CX
	JNZ  m4x1block
	DECQ R15
	JNZ  m4x1cgroup
	VMOVUPS Z24, (DI)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     m4x1group
	VZEROUPPER
	RET

// func gemmMLXF4x4VNNI(w *byte, ngr, bpg, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
// gemmMLX4x4VNNI with float32 heads.
TEXT ·gemmMLXF4x4VNNI(SB), NOSPLIT, $0-80
	PROLOGUE4

mf4x4group:
	GROUP4

mf4x4cgroup:
	HEADF
	MOVQ bpg+16(FP), CX

mf4x4block:
	LOADC4
	MBLOCK4
	ADDQ $256, SI
	DECQ CX
	JNZ  mf4x4block
	DECQ R15
	JNZ  mf4x4cgroup
	STORE4
	DECQ AX
	JNZ  mf4x4group
	VZEROUPPER
	RET

// func gemmMLXF4x1VNNI(w *byte, ngr, bpg, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32)
// gemmMLX4x1VNNI with float32 heads.
TEXT ·gemmMLXF4x1VNNI(SB), NOSPLIT, $0-64
	MOVQ         w+0(FP), SI
	MOVQ         ngroups+24(FP), AX
	MOVQ         dst+56(FP), DI
	MOVL         $0x0f0f0f0f, CX
	VPBROADCASTD CX, Z10

mf4x1group:
	GROUP1

mf4x1cgroup:
	HEADF
	MOVQ bpg+16(FP), CX

mf4x1block:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	PREFETCHT0 1152(SI)
	PREFETCHT0 1216(SI)
	LOADC4
	MBLOCK1
	ADDQ $256, SI
	DECQ CX
	JNZ  mf4x1block
	DECQ R15
	JNZ  mf4x1cgroup
	VMOVUPS Z24, (DI)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     mf4x1group
	VZEROUPPER
	RET
