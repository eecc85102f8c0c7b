#include "textflag.h"

// AVX-512 VNNI kernels for packed Q5_K matrices (kquant5.go). Registers as
// in kquant6_amd64.s, except: BX the corrections S128 = −128·Σq of row 0
// (row stride R12, as the scales), Z8 the 16 rows' d and Z31 their dmin/128
// (float32) of the current super-block, Z18/Z19 the block's scales
// a = d·sc and mins mb = (dmin/128)·m, Z28 = 1/128, Z29/Z30 = byte masks
// 0x10/0x0f.

#define MASKS5 \
	MOVL         $0x10101010, AX; \
	VPBROADCASTD AX, Z29;         \
	MOVL         $0x0f0f0f0f, AX; \
	VPBROADCASTD AX, Z30;         \
	MOVL         $0x3c000000, AX; \
	VPBROADCASTD AX, Z28

// UNPACK5 makes the 5-bit codes of a block (at SI) from its four nibble
// chunks L_j and the fifth-bit chunk H: for chunk c, bit c of H moved to
// bit 4 by a word shift and OR-ed in under the mask 0x10 (VPTERNLOGD $0xf8:
// dst | (src2 & src3)).
#define UNPACK5 \
	VMOVDQU32  256(SI), Z9;          \
	VPANDD     (SI), Z30, Z0;        \
	VPANDD     64(SI), Z30, Z1;      \
	VPANDD     128(SI), Z30, Z2;     \
	VPANDD     192(SI), Z30, Z3;     \
	VPSLLW     $4, Z9, Z10;          \
	VPSLLW     $3, Z9, Z11;          \
	VPTERNLOGD $0xf8, Z29, Z10, Z0;  \
	VPTERNLOGD $0xf8, Z29, Z11, Z1;  \
	VPSLLW     $2, Z9, Z10;          \
	VPSLLW     $1, Z9, Z11;          \
	VPTERNLOGD $0xf8, Z29, Z10, Z2;  \
	VPTERNLOGD $0xf8, Z29, Z11, Z3;  \
	VPSRLW     $4, (SI), Z4;         \
	VPSRLW     $4, 64(SI), Z5;       \
	VPSRLW     $4, 128(SI), Z6;      \
	VPSRLW     $4, 192(SI), Z7;      \
	VPANDD     Z30, Z4, Z4;          \
	VPANDD     Z30, Z5, Z5;          \
	VPANDD     Z30, Z6, Z6;          \
	VPANDD     Z30, Z7, Z7;          \
	VPTERNLOGD $0xf8, Z29, Z9, Z4;   \
	VPSRLW     $1, Z9, Z10;          \
	VPSRLW     $2, Z9, Z11;          \
	VPTERNLOGD $0xf8, Z29, Z10, Z5;  \
	VPTERNLOGD $0xf8, Z29, Z11, Z6;  \
	VPSRLW     $3, Z9, Z10;          \
	VPTERNLOGD $0xf8, Z29, Z10, Z7

// SCALES5: a = float32(d·float32(sc)), mb = (dmin/128)·float32(m).
#define SCALES5 \
	VPMOVZXBD (R10), Z18;    \
	VPMOVZXBD 16(R10), Z19;  \
	VCVTDQ2PS Z18, Z18;      \
	VCVTDQ2PS Z19, Z19;      \
	VMULPS    Z8, Z18, Z18;  \
	VMULPS    Z31, Z19, Z19

// HEAD5 loads d and dmin/128 at the start of each super-block.
#define HEAD5(label) \
	TESTQ     $7, CX;        \
	JNZ       label;         \
	VCVTPH2PS (R10), Z8;     \
	VCVTPH2PS 32(R10), Z31;  \
	VMULPS    Z28, Z31, Z31; \
	ADDQ      $64, R10;      \
label:

// ROW5: one activation row (quants XQ, correction XS, scale XD) over the
// block into ACC, with int32 chains I0/I1 (values 0-15 / 16-31).
#define ROW5(XQ, XS, XD, I0, I1, ACC) \
	VPXORD        I0, I0, I0;       \
	VPXORD        I1, I1, I1;       \
	VPDPBUSD.BCST 0 XQ, Z0, I0;     \
	VPDPBUSD.BCST 16 XQ, Z4, I1;    \
	VPDPBUSD.BCST 4 XQ, Z1, I0;     \
	VPDPBUSD.BCST 20 XQ, Z5, I1;    \
	VPDPBUSD.BCST 8 XQ, Z2, I0;     \
	VPDPBUSD.BCST 24 XQ, Z6, I1;    \
	VPDPBUSD.BCST 12 XQ, Z3, I0;    \
	VPDPBUSD.BCST 28 XQ, Z7, I1;    \
	VPADDD        I1, I0, I0;       \
	VCVTDQ2PS     I0, I0;           \
	VMULPS        Z18, I0, I0;      \
	VPBROADCASTD  XS, I1;           \
	VCVTDQ2PS     I1, I1;           \
	VFMADD231PS   Z19, I1, I0;      \
	VFMADD231PS.BCST XD, I0, ACC

// ROW5F: ROW5 for the 8-row kernels: one int32 chain (eight rows in
// flight hide its latency; the 4-row kernels keep two), the corrections
// stored as float32 (q5x8: exact, |S128| < 2^24) and broadcast by the FMA.
#define ROW5F(XQ, XSF, XD, I0, ACC) \
	VPXORD        I0, I0, I0;       \
	VPDPBUSD.BCST 0 XQ, Z0, I0;     \
	VPDPBUSD.BCST 4 XQ, Z1, I0;     \
	VPDPBUSD.BCST 8 XQ, Z2, I0;     \
	VPDPBUSD.BCST 12 XQ, Z3, I0;    \
	VPDPBUSD.BCST 16 XQ, Z4, I0;    \
	VPDPBUSD.BCST 20 XQ, Z5, I0;    \
	VPDPBUSD.BCST 24 XQ, Z6, I0;    \
	VPDPBUSD.BCST 28 XQ, Z7, I0;    \
	VCVTDQ2PS     I0, I0;           \
	VMULPS        Z18, I0, I0;      \
	VFMADD231PS.BCST XSF, Z19, I0;  \
	VFMADD231PS.BCST XD, I0, ACC

// func gemmQ5Kx1VNNI(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, pf int)
// DX = pf: the codes pf bytes ahead are prefetched to L1, 2·pf ahead to L2.
TEXT ·gemmQ5Kx1VNNI(SB), NOSPLIT, $0-72
	MASKS5
	MOVQ w+0(FP), SI
	MOVQ hd+8(FP), R10
	MOVQ ngroups+24(FP), AX
	MOVQ dst+56(FP), DI
	MOVQ pf+64(FP), DX

q5x1group:
	VXORPS Z24, Z24, Z24
	MOVQ   nb+16(FP), CX
	MOVQ   xq+32(FP), R8
	MOVQ   xd+40(FP), R11
	MOVQ   xs+48(FP), BX

q5x1block:
	HEAD5(q5x1nohead)
	PREFETCHT0 0(SI)(DX*1)
	PREFETCHT2 0(SI)(DX*2)
	PREFETCHT0 64(SI)(DX*1)
	PREFETCHT2 64(SI)(DX*2)
	PREFETCHT0 128(SI)(DX*1)
	PREFETCHT2 128(SI)(DX*2)
	PREFETCHT0 192(SI)(DX*1)
	PREFETCHT2 192(SI)(DX*2)
	PREFETCHT0 256(SI)(DX*1)
	PREFETCHT2 256(SI)(DX*2)
	UNPACK5
	SCALES5
	ROW5((R8), (BX), (R11), Z16, Z17, Z24)
	ADDQ $320, SI
	ADDQ $32, R10
	ADDQ $32, R8
	ADDQ $4, R11
	ADDQ $4, BX
	DECQ CX
	JNZ  q5x1block
	VMOVUPS Z24, (DI)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     q5x1group
	VZEROUPPER
	RET

// func gemmQ5Kx4VNNI(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ5Kx4VNNI(SB), NOSPLIT, $0-80
	MASKS5
	MOVQ w+0(FP), SI
	MOVQ hd+8(FP), R10
	MOVQ ngroups+24(FP), AX
	MOVQ dst+64(FP), DI
	MOVQ lddBytes+72(FP), DX
	MOVQ kstride+56(FP), R9
	MOVQ nb+16(FP), R12
	SHLQ $2, R12

q5x4group:
	VXORPS Z24, Z24, Z24
	VXORPS Z25, Z25, Z25
	VXORPS Z26, Z26, Z26
	VXORPS Z27, Z27, Z27
	MOVQ   nb+16(FP), CX
	MOVQ   xq+32(FP), R8
	LEAQ   (R8)(R9*2), R15
	ADDQ   R9, R15
	MOVQ   xd+40(FP), R11
	LEAQ   (R11)(R12*2), R13
	ADDQ   R12, R13
	MOVQ   xs+48(FP), BX
	LEAQ   (BX)(R12*2), R14
	ADDQ   R12, R14

q5x4block:
	HEAD5(q5x4nohead)
	UNPACK5
	SCALES5
	ROW5((R8), (BX), (R11), Z16, Z17, Z24)
	ROW5((R8)(R9*1), (BX)(R12*1), (R11)(R12*1), Z20, Z21, Z25)
	ROW5((R8)(R9*2), (BX)(R12*2), (R11)(R12*2), Z12, Z13, Z26)
	ROW5((R15), (R14), (R13), Z14, Z15, Z27)
	ADDQ $320, SI
	ADDQ $32, R10
	ADDQ $32, R8
	ADDQ $32, R15
	ADDQ $4, R11
	ADDQ $4, R13
	ADDQ $4, BX
	ADDQ $4, R14
	DECQ CX
	JNZ  q5x4block
	VMOVUPS Z24, (DI)
	VMOVUPS Z25, (DI)(DX*1)
	VMOVUPS Z26, (DI)(DX*2)
	LEAQ    (DI)(DX*2), CX
	VMOVUPS Z27, (CX)(DX*1)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     q5x4group
	VZEROUPPER
	RET

// func gemmQ5Kx8VNNI(w, hd *byte, nb, ngroups int, xq *int8, kstride int, xds *uint32, dst *float32, lddBytes int)
// Eight activation rows: quants at xq + r·kstride (R8 rows 0-3, R15 rows
// 4-7, R13 = 3·kstride), per block 8 scales then 8 float32 corrections at R11.
TEXT ·gemmQ5Kx8VNNI(SB), NOSPLIT, $0-72
	MASKS5
	MOVQ w+0(FP), SI
	MOVQ hd+8(FP), R10
	MOVQ ngroups+24(FP), AX
	MOVQ dst+56(FP), DI
	MOVQ lddBytes+64(FP), DX
	MOVQ kstride+40(FP), R9
	LEAQ (R9)(R9*2), R13

q5x8group:
	VXORPS Z20, Z20, Z20
	VXORPS Z21, Z21, Z21
	VXORPS Z22, Z22, Z22
	VXORPS Z23, Z23, Z23
	VXORPS Z24, Z24, Z24
	VXORPS Z25, Z25, Z25
	VXORPS Z26, Z26, Z26
	VXORPS Z27, Z27, Z27
	MOVQ   nb+16(FP), CX
	MOVQ   xq+32(FP), R8
	LEAQ   (R8)(R9*4), R15
	MOVQ   xds+48(FP), R11

q5x8block:
	HEAD5(q5x8nohead)
	UNPACK5
	SCALES5
	ROW5F((R8), 32(R11), 0(R11), Z12, Z20)
	ROW5F((R8)(R9*1), 36(R11), 4(R11), Z14, Z21)
	ROW5F((R8)(R9*2), 40(R11), 8(R11), Z16, Z22)
	ROW5F((R8)(R13*1), 44(R11), 12(R11), Z10, Z23)
	ROW5F((R15), 48(R11), 16(R11), Z12, Z24)
	ROW5F((R15)(R9*1), 52(R11), 20(R11), Z14, Z25)
	ROW5F((R15)(R9*2), 56(R11), 24(R11), Z16, Z26)
	ROW5F((R15)(R13*1), 60(R11), 28(R11), Z10, Z27)
	ADDQ $320, SI
	ADDQ $32, R10
	ADDQ $32, R8
	ADDQ $32, R15
	ADDQ $64, R11
	DECQ CX
	JNZ  q5x8block
	VMOVUPS Z20, (DI)
	VMOVUPS Z21, (DI)(DX*1)
	VMOVUPS Z22, (DI)(DX*2)
	LEAQ    (DI)(DX*2), CX
	VMOVUPS Z23, (CX)(DX*1)
	LEAQ    (DI)(DX*4), CX
	VMOVUPS Z24, (CX)
	VMOVUPS Z25, (CX)(DX*1)
	VMOVUPS Z26, (CX)(DX*2)
	LEAQ    (CX)(DX*2), CX
	VMOVUPS Z27, (CX)(DX*1)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     q5x8group
	VZEROUPPER
	RET

// UNPACK4K: Q4_K codes (kquant.go: the Q5_K layout without the H chunk).
#define UNPACK4K \
	VPANDD (SI), Z30, Z0;      \
	VPANDD 64(SI), Z30, Z1;    \
	VPANDD 128(SI), Z30, Z2;   \
	VPANDD 192(SI), Z30, Z3;   \
	VPSRLW $4, (SI), Z4;       \
	VPSRLW $4, 64(SI), Z5;     \
	VPSRLW $4, 128(SI), Z6;    \
	VPSRLW $4, 192(SI), Z7;    \
	VPANDD Z30, Z4, Z4;        \
	VPANDD Z30, Z5, Z5;        \
	VPANDD Z30, Z6, Z6;        \
	VPANDD Z30, Z7, Z7

// The Q4_K kernels: the Q5_K ones with UNPACK4K and blocks of 256 bytes.

// func gemmQ4Kx1VNNI(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, pf int)
// DX = pf: the codes pf bytes ahead are prefetched to L1, 2·pf ahead to L2.
TEXT ·gemmQ4Kx1VNNI(SB), NOSPLIT, $0-72
	MASKS5
	MOVQ w+0(FP), SI
	MOVQ hd+8(FP), R10
	MOVQ ngroups+24(FP), AX
	MOVQ dst+56(FP), DI
	MOVQ pf+64(FP), DX

q4x1group:
	VXORPS Z24, Z24, Z24
	MOVQ   nb+16(FP), CX
	MOVQ   xq+32(FP), R8
	MOVQ   xd+40(FP), R11
	MOVQ   xs+48(FP), BX

q4x1block:
	HEAD5(q4x1nohead)
	PREFETCHT0 0(SI)(DX*1)
	PREFETCHT2 0(SI)(DX*2)
	PREFETCHT0 64(SI)(DX*1)
	PREFETCHT2 64(SI)(DX*2)
	PREFETCHT0 128(SI)(DX*1)
	PREFETCHT2 128(SI)(DX*2)
	PREFETCHT0 192(SI)(DX*1)
	PREFETCHT2 192(SI)(DX*2)
	UNPACK4K
	SCALES5
	ROW5((R8), (BX), (R11), Z16, Z17, Z24)
	ADDQ $256, SI
	ADDQ $32, R10
	ADDQ $32, R8
	ADDQ $4, R11
	ADDQ $4, BX
	DECQ CX
	JNZ  q4x1block
	VMOVUPS Z24, (DI)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     q4x1group
	VZEROUPPER
	RET

// func gemmQ4Kx4VNNI(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ4Kx4VNNI(SB), NOSPLIT, $0-80
	MASKS5
	MOVQ w+0(FP), SI
	MOVQ hd+8(FP), R10
	MOVQ ngroups+24(FP), AX
	MOVQ dst+64(FP), DI
	MOVQ lddBytes+72(FP), DX
	MOVQ kstride+56(FP), R9
	MOVQ nb+16(FP), R12
	SHLQ $2, R12

q4x4group:
	VXORPS Z24, Z24, Z24
	VXORPS Z25, Z25, Z25
	VXORPS Z26, Z26, Z26
	VXORPS Z27, Z27, Z27
	MOVQ   nb+16(FP), CX
	MOVQ   xq+32(FP), R8
	LEAQ   (R8)(R9*2), R15
	ADDQ   R9, R15
	MOVQ   xd+40(FP), R11
	LEAQ   (R11)(R12*2), R13
	ADDQ   R12, R13
	MOVQ   xs+48(FP), BX
	LEAQ   (BX)(R12*2), R14
	ADDQ   R12, R14

q4x4block:
	HEAD5(q4x4nohead)
	UNPACK4K
	SCALES5
	ROW5((R8), (BX), (R11), Z16, Z17, Z24)
	ROW5((R8)(R9*1), (BX)(R12*1), (R11)(R12*1), Z20, Z21, Z25)
	ROW5((R8)(R9*2), (BX)(R12*2), (R11)(R12*2), Z12, Z13, Z26)
	ROW5((R15), (R14), (R13), Z14, Z15, Z27)
	ADDQ $256, SI
	ADDQ $32, R10
	ADDQ $32, R8
	ADDQ $32, R15
	ADDQ $4, R11
	ADDQ $4, R13
	ADDQ $4, BX
	ADDQ $4, R14
	DECQ CX
	JNZ  q4x4block
	VMOVUPS Z24, (DI)
	VMOVUPS Z25, (DI)(DX*1)
	VMOVUPS Z26, (DI)(DX*2)
	LEAQ    (DI)(DX*2), CX
	VMOVUPS Z27, (CX)(DX*1)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     q4x4group
	VZEROUPPER
	RET

// func gemmQ4Kx8VNNI(w, hd *byte, nb, ngroups int, xq *int8, kstride int, xds *uint32, dst *float32, lddBytes int)
// Eight activation rows: quants at xq + r·kstride (R8 rows 0-3, R15 rows
// 4-7, R13 = 3·kstride), per block 8 scales then 8 float32 corrections at R11.
TEXT ·gemmQ4Kx8VNNI(SB), NOSPLIT, $0-72
	MASKS5
	MOVQ w+0(FP), SI
	MOVQ hd+8(FP), R10
	MOVQ ngroups+24(FP), AX
	MOVQ dst+56(FP), DI
	MOVQ lddBytes+64(FP), DX
	MOVQ kstride+40(FP), R9
	LEAQ (R9)(R9*2), R13

q4x8group:
	VXORPS Z20, Z20, Z20
	VXORPS Z21, Z21, Z21
	VXORPS Z22, Z22, Z22
	VXORPS Z23, Z23, Z23
	VXORPS Z24, Z24, Z24
	VXORPS Z25, Z25, Z25
	VXORPS Z26, Z26, Z26
	VXORPS Z27, Z27, Z27
	MOVQ   nb+16(FP), CX
	MOVQ   xq+32(FP), R8
	LEAQ   (R8)(R9*4), R15
	MOVQ   xds+48(FP), R11

q4x8block:
	HEAD5(q4x8nohead)
	UNPACK4K
	SCALES5
	ROW5F((R8), 32(R11), 0(R11), Z12, Z20)
	ROW5F((R8)(R9*1), 36(R11), 4(R11), Z14, Z21)
	ROW5F((R8)(R9*2), 40(R11), 8(R11), Z16, Z22)
	ROW5F((R8)(R13*1), 44(R11), 12(R11), Z10, Z23)
	ROW5F((R15), 48(R11), 16(R11), Z12, Z24)
	ROW5F((R15)(R9*1), 52(R11), 20(R11), Z14, Z25)
	ROW5F((R15)(R9*2), 56(R11), 24(R11), Z16, Z26)
	ROW5F((R15)(R13*1), 60(R11), 28(R11), Z10, Z27)
	ADDQ $256, SI
	ADDQ $32, R10
	ADDQ $32, R8
	ADDQ $32, R15
	ADDQ $64, R11
	DECQ CX
	JNZ  q4x8block
	VMOVUPS Z20, (DI)
	VMOVUPS Z21, (DI)(DX*1)
	VMOVUPS Z22, (DI)(DX*2)
	LEAQ    (DI)(DX*2), CX
	VMOVUPS Z23, (CX)(DX*1)
	LEAQ    (DI)(DX*4), CX
	VMOVUPS Z24, (CX)
	VMOVUPS Z25, (CX)(DX*1)
	VMOVUPS Z26, (CX)(DX*2)
	LEAQ    (CX)(DX*2), CX
	VMOVUPS Z27, (CX)(DX*1)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     q4x8group
	VZEROUPPER
	RET
