#include "textflag.h"

// Eight activation rows per pass over the packed weights (AVX-512 VNNI;
// batched decode of 8 sequences): each 64-byte weight chunk is loaded once
// and used by 8 VPDPBUSD. The activations come interleaved block-major
// (pack.go input8: block b, row r quants at xq[(b*8+r)*32], scale
// xd[b*8+r], sum correction xs[b*8+r]) so one pointer per array addresses
// all 8 rows. Per row and block the int32 sum and the float steps are the
// ×1 and ×4 kernels' (exact integer sums, then the same cvt, mul, fma), so
// a row's result does not depend on the kernel that computed it.
//
// Registers: SI weights, AX groups left, CX blocks left, DI dst of row 0
// for the current group, DX dst row stride (bytes), R8 x quants, R11 x
// scales, BX x corrections, R9/R10 store addresses, R12 the software
// prefetch distance (bytes ahead of SI, > 0), R13 the rows to store (5..8).
// Z0-Z7 weight chunks, Z8 row scales (Z9 the Q4 nibble mask), Z10-Z11
// scale products, Z16-Z23 int32 block sums, Z24-Z31 float sums.

// Chunk Z (values off..off+3 of the block) × the 8 rows.
#define DOT8(off, Z) \
	VPDPBUSD.BCST (off)(R8), Z, Z16;     \
	VPDPBUSD.BCST (32+off)(R8), Z, Z17;  \
	VPDPBUSD.BCST (64+off)(R8), Z, Z18;  \
	VPDPBUSD.BCST (96+off)(R8), Z, Z19;  \
	VPDPBUSD.BCST (128+off)(R8), Z, Z20; \
	VPDPBUSD.BCST (160+off)(R8), Z, Z21; \
	VPDPBUSD.BCST (192+off)(R8), Z, Z22; \
	VPDPBUSD.BCST (224+off)(R8), Z, Z23

#define SCALE8(r, ZI, ZF, T) \
	VCVTDQ2PS   ZI, ZI;                 \
	VMULPS.BCST (4*r)(R11), Z8, T;      \
	VFMADD231PS T, ZI, ZF

// Software prefetch of line off of the block R12 bytes ahead into L1
// (PREFETCHT0) and of the block 2·R12 ahead into L2 (PREFETCHT2), one line
// per chunk so that they spread over the block's arithmetic. The 64
// VPDPBUSD of a block keep the out-of-order window from reaching far into
// the weight stream: one thread streamed 0.45 GB at 10.4-11 GB/s with the
// near prefetch alone and 13.5-13.8 with both, the rate of a loop that
// only loads (BenchmarkRowsDRAM*, 2-vCPU Xeon VM, thread CPU time).
#define PF(off) \
	PREFETCHT0 off(SI)(R12*1); \
	PREFETCHT2 off(SI)(R12*2)

#define NOPF(off)

// BLOCK8(PF4, PF8) multiplies the block's 8 chunks with the 8 rows and
// adds the scaled block sums, prefetching the lines of the block ahead:
// 0-256 always (a Q4 block is 288 bytes), 320-448 through PF4 and 512
// through PF8 (PF for Q8: 544 bytes, NOPF for Q4).
#define BLOCK8(PF4, PF8) \
	VPBROADCASTD (BX), Z16;    \
	VPBROADCASTD 4(BX), Z17;   \
	VPBROADCASTD 8(BX), Z18;   \
	VPBROADCASTD 12(BX), Z19;  \
	VPBROADCASTD 16(BX), Z20;  \
	VPBROADCASTD 20(BX), Z21;  \
	VPBROADCASTD 24(BX), Z22;  \
	VPBROADCASTD 28(BX), Z23;  \
	PF(0);                     \
	DOT8(0, Z0);               \
	PF(64);                    \
	DOT8(4, Z1);               \
	PF(128);                   \
	DOT8(8, Z2);               \
	PF(192);                   \
	DOT8(12, Z3);              \
	PF(256);                   \
	DOT8(16, Z4);              \
	PF4(320);                  \
	DOT8(20, Z5);              \
	PF4(384);                  \
	DOT8(24, Z6);              \
	PF4(448);                  \
	DOT8(28, Z7);              \
	PF8(512);                  \
	SCALE8(0, Z16, Z24, Z10);  \
	SCALE8(1, Z17, Z25, Z11);  \
	SCALE8(2, Z18, Z26, Z10);  \
	SCALE8(3, Z19, Z27, Z11);  \
	SCALE8(4, Z20, Z28, Z10);  \
	SCALE8(5, Z21, Z29, Z11);  \
	SCALE8(6, Z22, Z30, Z10);  \
	SCALE8(7, Z23, Z31, Z11);  \
	ADDQ $256, R8;             \
	ADDQ $32, R11;             \
	ADDQ $32, BX

#define GROUP8 \
	VXORPS Z24, Z24, Z24;  \
	VXORPS Z25, Z25, Z25;  \
	VXORPS Z26, Z26, Z26;  \
	VXORPS Z27, Z27, Z27;  \
	VXORPS Z28, Z28, Z28;  \
	VXORPS Z29, Z29, Z29;  \
	VXORPS Z30, Z30, Z30;  \
	VXORPS Z31, Z31, Z31;  \
	MOVQ nb+8(FP), CX;     \
	MOVQ xq+24(FP), R8;    \
	MOVQ xd+32(FP), R11;   \
	MOVQ xs+40(FP), BX

// STORE8 stores the 8 rows' sums of the group; rows 6-8 only when R13
// (the rows wanted, 5..8: a partial last row group pads with zero rows
// whose sums are dropped here) says so.
#define STORE8(done) \
	LEAQ    (DI)(DX*2), R9;   \
	LEAQ    (R9)(DX*2), R10;  \
	VMOVUPS Z24, (DI);        \
	VMOVUPS Z25, (DI)(DX*1);  \
	VMOVUPS Z26, (R9);        \
	VMOVUPS Z27, (R9)(DX*1);  \
	VMOVUPS Z28, (R10);       \
	CMPQ    R13, $6;          \
	JLT     done;             \
	VMOVUPS Z29, (R10)(DX*1); \
	LEAQ    (R10)(DX*2), R9;  \
	CMPQ    R13, $7;          \
	JLT     done;             \
	VMOVUPS Z30, (R9);        \
	CMPQ    R13, $8;          \
	JLT     done;             \
	VMOVUPS Z31, (R9)(DX*1);  \
done:                         \
	ADDQ    $64, DI

// Q8 block: scales and 8 chunks of 64 bytes.
#define LOADQ8X \
	VCVTPH2PS (SI), Z8;     \
	VMOVDQU32 32(SI), Z0;   \
	VMOVDQU32 96(SI), Z1;   \
	VMOVDQU32 160(SI), Z2;  \
	VMOVDQU32 224(SI), Z3;  \
	VMOVDQU32 288(SI), Z4;  \
	VMOVDQU32 352(SI), Z5;  \
	VMOVDQU32 416(SI), Z6;  \
	VMOVDQU32 480(SI), Z7

// Q4 block: scales and 4 chunks of 64 bytes (low nibbles: chunks 0-3, high
// nibbles: chunks 4-7).
#define LOADQ4X \
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

// func gemmQ8x8VNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, lddBytes, pf, rows int)
TEXT ·gemmQ8x8VNNI(SB), NOSPLIT, $0-80
	MOVQ w+0(FP), SI
	MOVQ ngroups+16(FP), AX
	MOVQ dst+48(FP), DI
	MOVQ lddBytes+56(FP), DX
	MOVQ pf+64(FP), R12
	MOVQ rows+72(FP), R13

q8x8group:
	GROUP8

q8x8block:
	LOADQ8X
	BLOCK8(PF, PF)
	ADDQ $544, SI
	DECQ CX
	JNZ  q8x8block
	STORE8(q8x8stored)
	DECQ AX
	JNZ  q8x8group
	VZEROUPPER
	RET

// Q4X8LOOP(group, block, stored, NEXT) is the 4-bit 8-row kernel's loop
// over the groups and their blocks, NEXT (NOPFNEXT or PFNEXT) after each
// block; the labels are the caller's.
#define Q4X8LOOP(group, block, stored, NEXT) \
group:                          \
	GROUP8;                     \
block:                          \
	LOADQ4X;                    \
	BLOCK8(NOPF, NOPF);         \
	NEXT;                       \
	ADDQ $288, SI;              \
	DECQ CX;                    \
	JNZ  block;                 \
	STORE8(stored);             \
	DECQ AX;                    \
	JNZ  group;                 \
	VZEROUPPER;                 \
	RET

#define NOPFNEXT

// PFNEXT prefetches (to L2) two lines at R14 and moves R14 on by R15.
#define PFNEXT \
	PREFETCHT2 (R14);   \
	PREFETCHT2 64(R14); \
	ADDQ R15, R14

// func gemmQ4x8VNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, lddBytes, pf, rows int)
TEXT ·gemmQ4x8VNNI(SB), NOSPLIT, $0-80
	MOVQ         w+0(FP), SI
	MOVQ         ngroups+16(FP), AX
	MOVQ         dst+48(FP), DI
	MOVQ         lddBytes+56(FP), DX
	MOVQ         pf+64(FP), R12
	MOVQ         rows+72(FP), R13
	MOVL         $0x0f0f0f0f, CX
	VPBROADCASTD CX, Z9

	Q4X8LOOP(q4x8group, q4x8block, q4x8stored, NOPFNEXT)

// func gemmQ4x8VNNIpf(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, lddBytes, pf, rows int, next *byte, step int)
// gemmQ4x8VNNI that also prefetches (to L2) two lines at next per block,
// next advancing by step (≤ 128) bytes a block: other weights that a
// later call reads (the MoE's next sub-block of expert rows,
// Input.Prefetch), fetched while this call's weights are in L2 and its
// arithmetic leaves the memory bus idle.
TEXT ·gemmQ4x8VNNIpf(SB), NOSPLIT, $0-96
	MOVQ         w+0(FP), SI
	MOVQ         ngroups+16(FP), AX
	MOVQ         dst+48(FP), DI
	MOVQ         lddBytes+56(FP), DX
	MOVQ         pf+64(FP), R12
	MOVQ         rows+72(FP), R13
	MOVQ         next+80(FP), R14
	MOVQ         step+88(FP), R15
	MOVL         $0x0f0f0f0f, CX
	VPBROADCASTD CX, Z9

	Q4X8LOOP(q4x8pgroup, q4x8pblock, q4x8pstored, PFNEXT)


// The ×4 kernels on the same interleaved rows (a last row group of 2-4
// rows, padded in input8 like a group of 8: block stride 256 bytes of
// quants, 32 of scales and corrections): one pass over the weights where
// two or three passes of the 1-row kernel read them again from L2 (M = 2,
// 3 of batched decode). Same per-row steps as every other kernel.
#define DOT4I(off, Z) \
	VPDPBUSD.BCST (off)(R8), Z, Z16;    \
	VPDPBUSD.BCST (32+off)(R8), Z, Z17; \
	VPDPBUSD.BCST (64+off)(R8), Z, Z18; \
	VPDPBUSD.BCST (96+off)(R8), Z, Z19

#define BLOCK4I(PF4, PF8) \
	VPBROADCASTD (BX), Z16;    \
	VPBROADCASTD 4(BX), Z17;   \
	VPBROADCASTD 8(BX), Z18;   \
	VPBROADCASTD 12(BX), Z19;  \
	PF(0);                     \
	DOT4I(0, Z0);              \
	PF(64);                    \
	DOT4I(4, Z1);              \
	PF(128);                   \
	DOT4I(8, Z2);              \
	PF(192);                   \
	DOT4I(12, Z3);             \
	PF(256);                   \
	DOT4I(16, Z4);             \
	PF4(320);                  \
	DOT4I(20, Z5);             \
	PF4(384);                  \
	DOT4I(24, Z6);             \
	PF4(448);                  \
	DOT4I(28, Z7);             \
	PF8(512);                  \
	SCALE8(0, Z16, Z24, Z10);  \
	SCALE8(1, Z17, Z25, Z11);  \
	SCALE8(2, Z18, Z26, Z10);  \
	SCALE8(3, Z19, Z27, Z11);  \
	ADDQ $256, R8;             \
	ADDQ $32, R11;             \
	ADDQ $32, BX

#define GROUP4I \
	VXORPS Z24, Z24, Z24;  \
	VXORPS Z25, Z25, Z25;  \
	VXORPS Z26, Z26, Z26;  \
	VXORPS Z27, Z27, Z27;  \
	MOVQ nb+8(FP), CX;     \
	MOVQ xq+24(FP), R8;    \
	MOVQ xd+32(FP), R11;   \
	MOVQ xs+40(FP), BX

// STORE4I stores rows 0-1 of the group, row 2 when R13 ≥ 3, row 3 when
// R13 = 4.
#define STORE4I(done) \
	LEAQ    (DI)(DX*2), R9;   \
	VMOVUPS Z24, (DI);        \
	VMOVUPS Z25, (DI)(DX*1);  \
	CMPQ    R13, $3;          \
	JLT     done;             \
	VMOVUPS Z26, (R9);        \
	CMPQ    R13, $4;          \
	JLT     done;             \
	VMOVUPS Z27, (R9)(DX*1);  \
done:                         \
	ADDQ    $64, DI

// func gemmQ8x4iVNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, lddBytes, pf, rows int)
TEXT ·gemmQ8x4iVNNI(SB), NOSPLIT, $0-80
	MOVQ w+0(FP), SI
	MOVQ ngroups+16(FP), AX
	MOVQ dst+48(FP), DI
	MOVQ lddBytes+56(FP), DX
	MOVQ pf+64(FP), R12
	MOVQ rows+72(FP), R13

q8x4igroup:
	GROUP4I

q8x4iblock:
	LOADQ8X
	BLOCK4I(PF, PF)
	ADDQ $544, SI
	DECQ CX
	JNZ  q8x4iblock
	STORE4I(q8x4istored)
	DECQ AX
	JNZ  q8x4igroup
	VZEROUPPER
	RET

// func gemmQ4x4iVNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, lddBytes, pf, rows int)
TEXT ·gemmQ4x4iVNNI(SB), NOSPLIT, $0-80
	MOVQ         w+0(FP), SI
	MOVQ         ngroups+16(FP), AX
	MOVQ         dst+48(FP), DI
	MOVQ         lddBytes+56(FP), DX
	MOVQ         pf+64(FP), R12
	MOVQ         rows+72(FP), R13
	MOVL         $0x0f0f0f0f, CX
	VPBROADCASTD CX, Z9

q4x4igroup:
	GROUP4I

q4x4iblock:
	LOADQ4X
	BLOCK4I(NOPF, NOPF)
	ADDQ $288, SI
	DECQ CX
	JNZ  q4x4iblock
	STORE4I(q4x4istored)
	DECQ AX
	JNZ  q4x4igroup
	VZEROUPPER
	RET
