#include "textflag.h"

// AVX-512 VNNI kernels for packed Q6_K matrices (kquant6.go).
//
// Registers:
//   SI   packed codes (all groups back to back), R10 heads (d, then scales)
//   AX   groups left, CX blocks of 32 left in the group (a multiple of 8:
//        a new super-block, whose d is loaded, starts when CX&7 == 0)
//   DI   dst of activation row 0, DX dst row stride (bytes)
//   R8   x quants of row 0, R9 row stride (bytes), R15 row 3
//   R11  x scales of row 0, R12 row stride of scales (bytes), R13 row 3
//   BX   x half-block sums −32·Σq of row 0 (row stride 2·R12), R14 row 3
//   Z0-Z7   unpacked codes: chunk j = values 4j..4j+3 of the 16 rows
//   Z8      the 16 rows' d (float32) of the current super-block
//   Z18/Z19 the half-block scales d·sc (float32) of the block
//   Z24-Z27 float sums, Z28/Z29/Z30 byte masks 0x33/0xcc/0x0f

#define MASKS \
	MOVL         $0x33333333, AX; \
	VPBROADCASTD AX, Z28;         \
	MOVL         $0xcccccccc, AX; \
	VPBROADCASTD AX, Z29;         \
	MOVL         $0x0f0f0f0f, AX; \
	VPBROADCASTD AX, Z30

// UNPACK6 makes the 6-bit codes of a block (at SI) from its four
// low-nibble chunks L_j and two high-bit chunks H_h. For chunk c of half h
// the two high bits are bits 2c..2c+1 of H_h, moved to bits 4-5 with the
// other byte bits 6-7 zero (masks 0x33 / 0xcc before the word shifts; the
// bits a shift carries into bits 0-3 are not selected); VPTERNLOGD $0xb8
// then selects bits 0-3 from L (Z30 ? L : B).
#define UNPACK6 \
	VMOVDQU32  256(SI), Z9;             \
	VPANDD     Z28, Z9, Z2;             \
	VPANDD     Z29, Z9, Z9;             \
	VPSLLW     $4, Z2, Z0;              \
	VPSLLW     $2, Z9, Z1;              \
	VPSRLW     $2, Z9, Z3;              \
	VPTERNLOGD $0xb8, (SI), Z30, Z0;    \
	VPTERNLOGD $0xb8, 64(SI), Z30, Z1;  \
	VPTERNLOGD $0xb8, 128(SI), Z30, Z2; \
	VPTERNLOGD $0xb8, 192(SI), Z30, Z3; \
	VMOVDQU32  320(SI), Z9;             \
	VPANDD     Z28, Z9, Z6;             \
	VPANDD     Z29, Z9, Z9;             \
	VPSLLW     $4, Z6, Z4;              \
	VPSLLW     $2, Z9, Z5;              \
	VPSRLW     $2, Z9, Z7;              \
	VPSRLW     $4, (SI), Z10;           \
	VPSRLW     $4, 64(SI), Z11;         \
	VPTERNLOGD $0xb8, Z10, Z30, Z4;     \
	VPTERNLOGD $0xb8, Z11, Z30, Z5;     \
	VPSRLW     $4, 128(SI), Z10;        \
	VPSRLW     $4, 192(SI), Z11;        \
	VPTERNLOGD $0xb8, Z10, Z30, Z6;     \
	VPTERNLOGD $0xb8, Z11, Z30, Z7

// SCALES6: s_h = float32(d·float32(sc_h)) for both halves of the block.
#define SCALES6 \
	VPMOVSXBD (R10), Z18;   \
	VPMOVSXBD 16(R10), Z19; \
	VCVTDQ2PS Z18, Z18;     \
	VCVTDQ2PS Z19, Z19;     \
	VMULPS    Z8, Z18, Z18; \
	VMULPS    Z8, Z19, Z19

// HEAD6 loads d at the start of each super-block.
#define HEAD6(label) \
	TESTQ     $7, CX;     \
	JNZ       label;      \
	VCVTPH2PS (R10), Z8;  \
	ADDQ      $32, R10;   \
label:

// ROW6: one activation row (quants XQ, half sums XS, scale XD) over the
// block into ACC, with int32 sums I0 (values 0-15) and I1 (16-31).
#define ROW6(XQ, XS, XD, I0, I1, ACC) \
	VPBROADCASTD  XS, I0;           \
	VPBROADCASTD  4 XS, I1;         \
	VPDPBUSD.BCST 0 XQ, Z0, I0;     \
	VPDPBUSD.BCST 16 XQ, Z4, I1;    \
	VPDPBUSD.BCST 4 XQ, Z1, I0;     \
	VPDPBUSD.BCST 20 XQ, Z5, I1;    \
	VPDPBUSD.BCST 8 XQ, Z2, I0;     \
	VPDPBUSD.BCST 24 XQ, Z6, I1;    \
	VPDPBUSD.BCST 12 XQ, Z3, I0;    \
	VPDPBUSD.BCST 28 XQ, Z7, I1;    \
	VCVTDQ2PS     I0, I0;           \
	VCVTDQ2PS     I1, I1;           \
	VMULPS        Z18, I0, I0;      \
	VFMADD231PS   Z19, I1, I0;      \
	VFMADD231PS.BCST XD, I0, ACC

// func gemmQ6Kx1VNNI(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, pf int)
// DX = pf: the codes pf bytes ahead are prefetched to L1, 2·pf ahead to L2.
TEXT ·gemmQ6Kx1VNNI(SB), NOSPLIT, $0-72
	MASKS
	MOVQ w+0(FP), SI
	MOVQ hd+8(FP), R10
	MOVQ ngroups+24(FP), AX
	MOVQ dst+56(FP), DI
	MOVQ pf+64(FP), DX

q6x1group:
	VXORPS Z24, Z24, Z24
	MOVQ   nb+16(FP), CX
	MOVQ   xq+32(FP), R8
	MOVQ   xd+40(FP), R11
	MOVQ   xs+48(FP), BX

q6x1block:
	HEAD6(q6x1nohead)
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
	PREFETCHT0 320(SI)(DX*1)
	PREFETCHT2 320(SI)(DX*2)
	UNPACK6
	SCALES6
	ROW6((R8), (BX), (R11), Z16, Z17, Z24)
	ADDQ $384, SI
	ADDQ $32, R10
	ADDQ $32, R8
	ADDQ $4, R11
	ADDQ $8, BX
	DECQ CX
	JNZ  q6x1block
	VMOVUPS Z24, (DI)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     q6x1group
	VZEROUPPER
	RET

// func gemmQ6Kx4VNNI(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ6Kx4VNNI(SB), NOSPLIT, $0-80
	MASKS
	MOVQ w+0(FP), SI
	MOVQ hd+8(FP), R10
	MOVQ ngroups+24(FP), AX
	MOVQ dst+64(FP), DI
	MOVQ lddBytes+72(FP), DX
	MOVQ kstride+56(FP), R9
	MOVQ nb+16(FP), R12
	SHLQ $2, R12

q6x4group:
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
	LEAQ   (BX)(R12*4), R14
	LEAQ   (R14)(R12*2), R14

q6x4block:
	HEAD6(q6x4nohead)
	UNPACK6
	SCALES6
	ROW6((R8), (BX), (R11), Z16, Z17, Z24)
	ROW6((R8)(R9*1), (BX)(R12*2), (R11)(R12*1), Z20, Z21, Z25)
	ROW6((R8)(R9*2), (BX)(R12*4), (R11)(R12*2), Z12, Z13, Z26)
	ROW6((R15), (R14), (R13), Z14, Z15, Z27)
	ADDQ $384, SI
	ADDQ $32, R10
	ADDQ $32, R8
	ADDQ $32, R15
	ADDQ $4, R11
	ADDQ $4, R13
	ADDQ $8, BX
	ADDQ $8, R14
	DECQ CX
	JNZ  q6x4block
	VMOVUPS Z24, (DI)
	VMOVUPS Z25, (DI)(DX*1)
	VMOVUPS Z26, (DI)(DX*2)
	LEAQ    (DI)(DX*2), CX
	VMOVUPS Z27, (CX)(DX*1)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     q6x4group
	VZEROUPPER
	RET

// func halfSumsAVX512(q *int8, n int, s6 *int32)
// s6[j] = −32·Σ q[16j..16j+15] for 4n values j: per 64 bytes, VPSADBW of
// q+128 sums each 8 bytes, pairs of them make the 16-value sums
// Σ(q+128) = Σq + 2048, so −32·Σq = 65536 − 32·Σ(q+128).
TEXT ·halfSumsAVX512(SB), NOSPLIT, $0-24
	MOVQ         q+0(FP), SI
	MOVQ         n+8(FP), CX
	MOVQ         s6+16(FP), DI
	MOVL         $0x80808080, AX
	VPBROADCASTD AX, Z31
	VPXORD       Z30, Z30, Z30
	MOVL         $65536, AX
	VPBROADCASTD AX, X29

hsloop:
	VPXORD  (SI), Z31, Z0
	VPSADBW Z30, Z0, Z0
	VPSHUFD $0x4e, Z0, Z1
	VPADDQ  Z1, Z0, Z0
	VPMOVQD Z0, Y0
	VPMOVQD Y0, X0
	VPSLLD  $5, X0, X0
	VPSUBD  X0, X29, X0
	VMOVDQU X0, (DI)
	ADDQ    $64, SI
	ADDQ    $16, DI
	DECQ    CX
	JNZ     hsloop
	VZEROUPPER
	RET

// ROW8: ROW6 for the 8-row kernel, whose per-block scales and half sums
// are interleaved at R11 (q6x8 in kquant6.go): S0/S1 the offsets of the
// row's two half sums, D that of its scale.
#define ROW8(XQ, S0, S1, D, I0, I1, ACC) \
	VPBROADCASTD  S0(R11), I0;      \
	VPBROADCASTD  S1(R11), I1;      \
	VPDPBUSD.BCST 0 XQ, Z0, I0;     \
	VPDPBUSD.BCST 16 XQ, Z4, I1;    \
	VPDPBUSD.BCST 4 XQ, Z1, I0;     \
	VPDPBUSD.BCST 20 XQ, Z5, I1;    \
	VPDPBUSD.BCST 8 XQ, Z2, I0;     \
	VPDPBUSD.BCST 24 XQ, Z6, I1;    \
	VPDPBUSD.BCST 12 XQ, Z3, I0;    \
	VPDPBUSD.BCST 28 XQ, Z7, I1;    \
	VCVTDQ2PS     I0, I0;           \
	VCVTDQ2PS     I1, I1;           \
	VMULPS        Z18, I0, I0;      \
	VFMADD231PS   Z19, I1, I0;      \
	VFMADD231PS.BCST D(R11), I0, ACC

// func gemmQ6Kx8VNNI(w, hd *byte, nb, ngroups int, xq *int8, kstride int, xds *uint32, dst *float32, lddBytes int)
// Eight activation rows: quants at xq + r·kstride (R8 rows 0-3, R15 rows
// 4-7, R13 = 3·kstride), per block 8 scales then 16 half sums at R11.
TEXT ·gemmQ6Kx8VNNI(SB), NOSPLIT, $0-72
	MASKS
	MOVQ w+0(FP), SI
	MOVQ hd+8(FP), R10
	MOVQ ngroups+24(FP), AX
	MOVQ dst+56(FP), DI
	MOVQ lddBytes+64(FP), DX
	MOVQ kstride+40(FP), R9
	LEAQ (R9)(R9*2), R13

q6x8group:
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

q6x8block:
	HEAD6(q6x8nohead)
	UNPACK6
	SCALES6
	ROW8((R8), 32, 36, 0, Z12, Z13, Z20)
	ROW8((R8)(R9*1), 40, 44, 4, Z14, Z15, Z21)
	ROW8((R8)(R9*2), 48, 52, 8, Z16, Z17, Z22)
	ROW8((R8)(R13*1), 56, 60, 12, Z9, Z10, Z23)
	ROW8((R15), 64, 68, 16, Z12, Z13, Z24)
	ROW8((R15)(R9*1), 72, 76, 20, Z14, Z15, Z25)
	ROW8((R15)(R9*2), 80, 84, 24, Z16, Z17, Z26)
	ROW8((R15)(R13*1), 88, 92, 28, Z9, Z10, Z27)
	ADDQ $384, SI
	ADDQ $32, R10
	ADDQ $32, R8
	ADDQ $32, R15
	ADDQ $96, R11
	DECQ CX
	JNZ  q6x8block
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
	JNZ     q6x8group
	VZEROUPPER
	RET

// UNPACK6N is UNPACK6 without the 0xcc mask register (Z29): 0xcc is
// NOT 0x33, so VPANDND with Z28 selects the same bits, and the 16-row
// kernel has Z29 for an accumulator.
#define UNPACK6N \
	VMOVDQU32  256(SI), Z9;             \
	VPANDD     Z28, Z9, Z2;             \
	VPANDND    Z9, Z28, Z9;             \
	VPSLLW     $4, Z2, Z0;              \
	VPSLLW     $2, Z9, Z1;              \
	VPSRLW     $2, Z9, Z3;              \
	VPTERNLOGD $0xb8, (SI), Z30, Z0;    \
	VPTERNLOGD $0xb8, 64(SI), Z30, Z1;  \
	VPTERNLOGD $0xb8, 128(SI), Z30, Z2; \
	VPTERNLOGD $0xb8, 192(SI), Z30, Z3; \
	VMOVDQU32  320(SI), Z9;             \
	VPANDD     Z28, Z9, Z6;             \
	VPANDND    Z9, Z28, Z9;             \
	VPSLLW     $4, Z6, Z4;              \
	VPSLLW     $2, Z9, Z5;              \
	VPSRLW     $2, Z9, Z7;              \
	VPSRLW     $4, (SI), Z10;           \
	VPSRLW     $4, 64(SI), Z11;         \
	VPTERNLOGD $0xb8, Z10, Z30, Z4;     \
	VPTERNLOGD $0xb8, Z11, Z30, Z5;     \
	VPSRLW     $4, 128(SI), Z10;        \
	VPSRLW     $4, 192(SI), Z11;        \
	VPTERNLOGD $0xb8, Z10, Z30, Z6;     \
	VPTERNLOGD $0xb8, Z11, Z30, Z7

// ROW8B is ROW8 for the second 8-row group of the 16-row kernel, whose
// interleaved scales and half sums are at R12.
#define ROW8B(XQ, S0, S1, D, I0, I1, ACC) \
	VPBROADCASTD  S0(R12), I0;      \
	VPBROADCASTD  S1(R12), I1;      \
	VPDPBUSD.BCST 0 XQ, Z0, I0;     \
	VPDPBUSD.BCST 16 XQ, Z4, I1;    \
	VPDPBUSD.BCST 4 XQ, Z1, I0;     \
	VPDPBUSD.BCST 20 XQ, Z5, I1;    \
	VPDPBUSD.BCST 8 XQ, Z2, I0;     \
	VPDPBUSD.BCST 24 XQ, Z6, I1;    \
	VPDPBUSD.BCST 12 XQ, Z3, I0;    \
	VPDPBUSD.BCST 28 XQ, Z7, I1;    \
	VCVTDQ2PS     I0, I0;           \
	VCVTDQ2PS     I1, I1;           \
	VMULPS        Z18, I0, I0;      \
	VFMADD231PS   Z19, I1, I0;      \
	VFMADD231PS.BCST D(R12), I0, ACC

// func gemmQ6Kx16VNNI(w, hd *byte, nb, ngroups int, xq *int8, kstride int, xds, xds2 *uint32, dst *float32, lddBytes int)
// Sixteen activation rows: gemmQ6Kx8VNNI for two 8-row groups per pass, so
// each block's codes are unpacked (and its scales made) once for 16 rows
// instead of 8 (~11% fewer instructions per row). Quants of rows 0-3 at
// R8, 4-7 at R15, 8-11 at R14, 12-15 at BX (stride R9); the groups'
// interleaved scales and half sums at R11 and R12 (q6x8). Accumulators:
// rows 0-7 Z20-Z27, rows 8-15 Z12-Z17, Z29, Z31; Z9/Z10 the int32 sums.
// Every row gets the float steps of the other kernels: the same bits.
TEXT ·gemmQ6Kx16VNNI(SB), NOSPLIT, $0-80
	MASKS
	MOVQ w+0(FP), SI
	MOVQ hd+8(FP), R10
	MOVQ ngroups+24(FP), AX
	MOVQ dst+64(FP), DI
	MOVQ lddBytes+72(FP), DX
	MOVQ kstride+40(FP), R9
	LEAQ (R9)(R9*2), R13

q6x16group:
	VXORPS Z20, Z20, Z20
	VXORPS Z21, Z21, Z21
	VXORPS Z22, Z22, Z22
	VXORPS Z23, Z23, Z23
	VXORPS Z24, Z24, Z24
	VXORPS Z25, Z25, Z25
	VXORPS Z26, Z26, Z26
	VXORPS Z27, Z27, Z27
	VXORPS Z12, Z12, Z12
	VXORPS Z13, Z13, Z13
	VXORPS Z14, Z14, Z14
	VXORPS Z15, Z15, Z15
	VXORPS Z16, Z16, Z16
	VXORPS Z17, Z17, Z17
	VXORPS Z29, Z29, Z29
	VXORPS Z31, Z31, Z31
	MOVQ   nb+16(FP), CX
	MOVQ   xq+32(FP), R8
	LEAQ   (R8)(R9*4), R15
	LEAQ   (R8)(R9*8), R14
	LEAQ   (R14)(R9*4), BX
	MOVQ   xds+48(FP), R11
	MOVQ   xds2+56(FP), R12

q6x16block:
	HEAD6(q6x16nohead)
	UNPACK6N
	SCALES6
	ROW8((R8), 32, 36, 0, Z9, Z10, Z20)
	ROW8((R8)(R9*1), 40, 44, 4, Z9, Z10, Z21)
	ROW8((R8)(R9*2), 48, 52, 8, Z9, Z10, Z22)
	ROW8((R8)(R13*1), 56, 60, 12, Z9, Z10, Z23)
	ROW8((R15), 64, 68, 16, Z9, Z10, Z24)
	ROW8((R15)(R9*1), 72, 76, 20, Z9, Z10, Z25)
	ROW8((R15)(R9*2), 80, 84, 24, Z9, Z10, Z26)
	ROW8((R15)(R13*1), 88, 92, 28, Z9, Z10, Z27)
	ROW8B((R14), 32, 36, 0, Z9, Z10, Z12)
	ROW8B((R14)(R9*1), 40, 44, 4, Z9, Z10, Z13)
	ROW8B((R14)(R9*2), 48, 52, 8, Z9, Z10, Z14)
	ROW8B((R14)(R13*1), 56, 60, 12, Z9, Z10, Z15)
	ROW8B((BX), 64, 68, 16, Z9, Z10, Z16)
	ROW8B((BX)(R9*1), 72, 76, 20, Z9, Z10, Z17)
	ROW8B((BX)(R9*2), 80, 84, 24, Z9, Z10, Z29)
	ROW8B((BX)(R13*1), 88, 92, 28, Z9, Z10, Z31)
	ADDQ $384, SI
	ADDQ $32, R10
	ADDQ $32, R8
	ADDQ $32, R15
	ADDQ $32, R14
	ADDQ $32, BX
	ADDQ $96, R11
	ADDQ $96, R12
	DECQ CX
	JNZ  q6x16block
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
	LEAQ    (DI)(DX*8), CX
	VMOVUPS Z12, (CX)
	VMOVUPS Z13, (CX)(DX*1)
	VMOVUPS Z14, (CX)(DX*2)
	LEAQ    (CX)(DX*2), R8
	VMOVUPS Z15, (R8)(DX*1)
	LEAQ    (CX)(DX*4), CX
	VMOVUPS Z16, (CX)
	VMOVUPS Z17, (CX)(DX*1)
	VMOVUPS Z29, (CX)(DX*2)
	LEAQ    (CX)(DX*2), CX
	VMOVUPS Z31, (CX)(DX*1)
	ADDQ    $64, DI
	DECQ    AX
	JNZ     q6x16group
	VZEROUPPER
	RET
