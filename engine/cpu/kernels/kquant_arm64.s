#include "textflag.h"

// Native K-quant kernels for arm64 (NEON + SDOT), on the packed layouts of
// kquant6.go (Q6_K) and kquant5.go (Q5_K, Q4_K) that the amd64 kernels
// read. A 64-byte chunk holds 4 consecutive codes of 16 rows (byte 4r+i);
// its 16-byte quarter Q holds those of rows 4Q..4Q+3, which is exactly the
// operand of SDOT by element: lane r += Σ_i code[4r+i]·x[4j+i] with the 4
// activations x[4j..4j+3] taken from one 32-bit element of a register.
// The codes (0..63) are non-negative, so the signed product is exact.
//
// Each kernel walks a group's 4 quarters one after the other (the
// activation row, a few KiB, stays in L1 across them); per quarter and
// block it unpacks the codes once and multiplies them with 1 or 4
// activation rows. The float32 steps per row and block are those of the
// file comments of kquant6.go / kquant5.go, in the same order, with the
// same roundings (FMUL, fused FMLA), as the VNNI kernels: a row's result
// has the same bits on arm64 as on amd64 and in every batch size.

// Instructions the Go assembler does not know (Vd, Vn, Vm: register numbers).
// SDOT Vd.4S, Vn.16B, Vm.4B[i] (Vm < 16).
#define SDOTE(m, i, n, d) WORD $(0x4F80E000 | ((i)&1)<<21 | ((i)>>1)<<11 | (m)<<16 | (n)<<5 | (d))
// SCVTF / UCVTF Vd.4S, Vn.4S.
#define SCVTF4(n, d) WORD $(0x4E21D800 | (n)<<5 | (d))
#define UCVTF4(n, d) WORD $(0x6E21D800 | (n)<<5 | (d))
// FMUL Vd.4S, Vn.4S, Vm.4S.
#define FMUL4(m, n, d) WORD $(0x6E20DC00 | (m)<<16 | (n)<<5 | (d))
// FCVTL Vd.4S, Vn.4H (f16 to f32, exact).
#define FCVTL4(n, d) WORD $(0x0E217800 | (n)<<5 | (d))
// SXTL / UXTL Vd.8H, Vn.8B and Vd.4S, Vn.4H.
#define SXTLB(n, d) WORD $(0x0F08A400 | (n)<<5 | (d))
#define SXTLH(n, d) WORD $(0x0F10A400 | (n)<<5 | (d))
#define UXTLB(n, d) WORD $(0x2F08A400 | (n)<<5 | (d))
#define UXTLH(n, d) WORD $(0x2F10A400 | (n)<<5 | (d))

// Registers of every kernel:
//   R0 codes of the block (quarter offset included)  R1 head of the super-block
//   R2 blocks left in the super-block  R3 super-blocks left  R23 4·Q
//   R4/R5/R6 activation row 0: int8 codes, scales d_x, corrections
//   R12-R14, R15-R17, R19-R21: the same for rows 1-3 (4-row kernels)
//   R7 dst of the group  R9 groups left  R10 codes of the group  R11 heads of the group
//   R22 lddBytes  R24 codes bytes per group  R25 head bytes per group  R26 scratch
//   V0-V7 activations (row r: V2r = values 0-15, V2r+1 = 16-31)
//   V8-V11 chunks L_j, then the codes of half 1  V12 V13 chunks H, then sums
//   V14-V17 codes of half 0  V18 V19 the block's two scales  V20 d  V21 dmin/128
//   V22-V24 V30 accumulators of rows 0-3  V25 0x0f  V26 high-bit mask  V27 V28 scratch
//   V29 1/128

// Q6_K: codes of half 0 into V14-V17, of half 1 into V8-V11 (in place).
#define Q6UNPACK \
	FMOVQ 0(R0), F8 \
	FMOVQ 64(R0), F9 \
	FMOVQ 128(R0), F10 \
	FMOVQ 192(R0), F11 \
	FMOVQ 256(R0), F12 \
	FMOVQ 320(R0), F13 \
	ADD   $384, R0 \
	VAND  V25.B16, V8.B16, V14.B16 \
	VSHL  $4, V12.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V14.B16 \
	VAND  V25.B16, V9.B16, V15.B16 \
	VSHL  $2, V12.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V15.B16 \
	VAND  V25.B16, V10.B16, V16.B16 \
	VBIT  V26.B16, V12.B16, V16.B16 \
	VAND  V25.B16, V11.B16, V17.B16 \
	VUSHR $2, V12.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V17.B16 \
	VUSHR $4, V8.B16, V8.B16 \
	VSHL  $4, V13.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V8.B16 \
	VUSHR $4, V9.B16, V9.B16 \
	VSHL  $2, V13.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V9.B16 \
	VUSHR $4, V10.B16, V10.B16 \
	VBIT  V26.B16, V13.B16, V10.B16 \
	VUSHR $4, V11.B16, V11.B16 \
	VUSHR $2, V13.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V11.B16

// Q6_K: the block's scales s_h = d·float32(sc_h) of the quarter's 4 rows.
#define Q6SCALES \
	FMOVS (R26), F27 \
	FMOVS 16(R26), F28 \
	ADD   $32, R26 \
	SXTLB(27, 27) \
	SXTLH(27, 27) \
	SCVTF4(27, 27) \
	FMUL4(20, 27, 18) \
	SXTLB(28, 28) \
	SXTLH(28, 28) \
	SCVTF4(28, 28) \
	FMUL4(20, 28, 19)

// Q6_K, one activation row (codes rx, scales rd, half sums rs; registers
// va, vb numbered xa, xb; accumulator acc): i_h = S6_h + Σ code·x, f = float32(i_0)·s_0,
// f = fma(float32(i_1), s_1, f), acc = fma(f, d_x, acc).
#define Q6ROW(rx, rd, rs, va, vb, xa, xb, acc) \
	VLD1.P 32(rx), [va.B16, vb.B16] \
	VLD2R.P 8(rs), [V12.S4, V13.S4] \
	SDOTE(xa, 0, 14, 12) \
	SDOTE(xa, 1, 15, 12) \
	SDOTE(xa, 2, 16, 12) \
	SDOTE(xa, 3, 17, 12) \
	SDOTE(xb, 0, 8, 13) \
	SDOTE(xb, 1, 9, 13) \
	SDOTE(xb, 2, 10, 13) \
	SDOTE(xb, 3, 11, 13) \
	SCVTF4(12, 12) \
	SCVTF4(13, 13) \
	FMUL4(18, 12, 12) \
	VFMLA V19.S4, V13.S4, V12.S4 \
	VLD1R.P 4(rd), [V27.S4] \
	VFMLA V27.S4, V12.S4, acc.S4

// Q5_K (H chunk) or Q4_K: codes of half 0 into V14-V17, of half 1 into
// V8-V11 (in place).
#define Q4UNPACK \
	FMOVQ 0(R0), F8 \
	FMOVQ 64(R0), F9 \
	FMOVQ 128(R0), F10 \
	FMOVQ 192(R0), F11 \
	ADD   $256, R0 \
	VAND  V25.B16, V8.B16, V14.B16 \
	VAND  V25.B16, V9.B16, V15.B16 \
	VAND  V25.B16, V10.B16, V16.B16 \
	VAND  V25.B16, V11.B16, V17.B16 \
	VUSHR $4, V8.B16, V8.B16 \
	VUSHR $4, V9.B16, V9.B16 \
	VUSHR $4, V10.B16, V10.B16 \
	VUSHR $4, V11.B16, V11.B16

// Q5_K: the fifth bit of value 4j+i is bit j of H, of 16+4j+i bit 4+j.
#define Q5UNPACK \
	FMOVQ 256(R0), F12 \
	Q4UNPACK \
	ADD   $64, R0 \
	VSHL  $4, V12.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V14.B16 \
	VSHL  $3, V12.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V15.B16 \
	VSHL  $2, V12.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V16.B16 \
	VSHL  $1, V12.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V17.B16 \
	VBIT  V26.B16, V12.B16, V8.B16 \
	VUSHR $1, V12.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V9.B16 \
	VUSHR $2, V12.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V10.B16 \
	VUSHR $3, V12.B16, V27.B16 \
	VBIT  V26.B16, V27.B16, V11.B16

// Q5_K/Q4_K: the block's a = d·float32(sc) and mb = (dmin/128)·float32(m).
#define Q5SCALES \
	FMOVS (R26), F27 \
	FMOVS 16(R26), F28 \
	ADD   $32, R26 \
	UXTLB(27, 27) \
	UXTLH(27, 27) \
	UCVTF4(27, 27) \
	FMUL4(20, 27, 18) \
	UXTLB(28, 28) \
	UXTLH(28, 28) \
	UCVTF4(28, 28) \
	FMUL4(21, 28, 19)

// Q5_K/Q4_K, one activation row: f = float32(Σ code·x)·a,
// f = fma(float32(S128), mb, f), acc = fma(f, d_x, acc).
#define Q5ROW(rx, rd, rs, va, vb, xa, xb, acc) \
	VLD1.P 32(rx), [va.B16, vb.B16] \
	VEOR   V13.B16, V13.B16, V13.B16 \
	SDOTE(xa, 0, 14, 13) \
	SDOTE(xa, 1, 15, 13) \
	SDOTE(xa, 2, 16, 13) \
	SDOTE(xa, 3, 17, 13) \
	SDOTE(xb, 0, 8, 13) \
	SDOTE(xb, 1, 9, 13) \
	SDOTE(xb, 2, 10, 13) \
	SDOTE(xb, 3, 11, 13) \
	SCVTF4(13, 13) \
	FMUL4(18, 13, 13) \
	VLD1R.P 4(rs), [V12.S4] \
	SCVTF4(12, 12) \
	VFMLA V19.S4, V12.S4, V13.S4 \
	VLD1R.P 4(rd), [V27.S4] \
	VFMLA V27.S4, V13.S4, acc.S4

// Arguments (every kernel):
//   w, hd *byte      codes and heads of the first group
//   nb, ngroups int  blocks of 32 per row, groups of 16 rows
//   xq *int8, xd *float32, xs *int32: activation row 0 (codes, scales,
//                    corrections: S6 for Q6_K, S128 for Q5_K/Q4_K)
//   kstride int      values per activation row (4-row kernels)
//   dst *float32, lddBytes int: out row 0 at dst[16g + r], row c lddBytes on
#define ARGS(cbytes, hbytes) \
	MOVD w+0(FP), R10 \
	MOVD hd+8(FP), R11 \
	MOVD nb+16(FP), R3 \
	MOVD ngroups+24(FP), R9 \
	MOVD dst+64(FP), R7 \
	MOVD lddBytes+72(FP), R22 \
	MOVD $(cbytes), R26 \
	MUL  R3, R26, R24 \
	MOVD $(hbytes), R26 \
	LSR  $3, R3, R25 \
	MUL  R26, R25, R25 \
	VMOVI $15, V25.B16

// Start of a quarter: code and head pointers, activation row 0, accumulators.
#define QUARTER0 \
	ADD   R23<<2, R10, R0 \
	MOVD  R11, R1 \
	MOVD  xq+32(FP), R4 \
	MOVD  xd+40(FP), R5 \
	MOVD  xs+48(FP), R6 \
	MOVD  nb+16(FP), R3 \
	LSR   $3, R3, R3 \
	VEOR  V22.B16, V22.B16, V22.B16

// Rows 1-3 of the 4-row kernels; xsShift: log2 of the correction bytes per block.
#define QUARTER3(xsShift) \
	MOVD  kstride+56(FP), R26 \
	ADD   R26, R4, R12 \
	ADD   R26, R12, R13 \
	ADD   R26, R13, R14 \
	MOVD  nb+16(FP), R26 \
	ADD   R26<<2, R5, R15 \
	ADD   R26<<2, R15, R16 \
	ADD   R26<<2, R16, R17 \
	ADD   R26<<xsShift, R6, R19 \
	ADD   R26<<xsShift, R19, R20 \
	ADD   R26<<xsShift, R20, R21 \
	VEOR  V23.B16, V23.B16, V23.B16 \
	VEOR  V24.B16, V24.B16, V24.B16 \
	VEOR  V30.B16, V30.B16, V30.B16

// Start of a Q6_K super-block: d of the quarter's rows, scale pointer.
#define Q6SB \
	ADD   R23<<1, R1, R26 \
	FMOVD (R26), F20 \
	FCVTL4(20, 20) \
	ADD   $32, R1, R26 \
	ADD   R23, R26, R26 \
	MOVD  $8, R2

// Start of a Q5_K/Q4_K super-block: d, dmin/128, scale pointer.
#define Q5SB \
	ADD   R23<<1, R1, R26 \
	FMOVD (R26), F20 \
	FCVTL4(20, 20) \
	FMOVD 32(R26), F21 \
	FCVTL4(21, 21) \
	FMUL4(29, 21, 21) \
	ADD   $64, R1, R26 \
	ADD   R23, R26, R26 \
	MOVD  $8, R2

// End of a super-block (head bytes hb) and of the group's quarter loop.
#define SBEND(label, hb) \
	ADD   $(hb), R1 \
	SUBS  $1, R3, R3 \
	BNE   label

#define GROUPEND(label) \
	ADD   R24, R10 \
	ADD   R25, R11 \
	ADD   $64, R7 \
	SUBS  $1, R9, R9 \
	BNE   label \
	RET

// func gemmQ6Kx1NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ6Kx1NEON(SB), NOSPLIT, $0-80
	ARGS(384, 288)
	VMOVI $0x30, V26.B16

q6x1group:
	MOVD $0, R23

q6x1quarter:
	QUARTER0

q6x1sb:
	Q6SB

q6x1block:
	Q6UNPACK
	Q6SCALES
	Q6ROW(R4, R5, R6, V0, V1, 0, 1, V22)
	SUBS $1, R2, R2
	BNE  q6x1block
	SBEND(q6x1sb, 288)
	ADD  R23<<2, R7, R26
	VST1 [V22.S4], (R26)
	ADD  $4, R23
	CMP  $16, R23
	BNE  q6x1quarter
	GROUPEND(q6x1group)

// func gemmQ6Kx4NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ6Kx4NEON(SB), NOSPLIT, $0-80
	ARGS(384, 288)
	VMOVI $0x30, V26.B16

q6x4group:
	MOVD $0, R23

q6x4quarter:
	QUARTER0
	QUARTER3(3)

q6x4sb:
	Q6SB

q6x4block:
	Q6UNPACK
	Q6SCALES
	Q6ROW(R4, R5, R6, V0, V1, 0, 1, V22)
	Q6ROW(R12, R15, R19, V2, V3, 2, 3, V23)
	Q6ROW(R13, R16, R20, V4, V5, 4, 5, V24)
	Q6ROW(R14, R17, R21, V6, V7, 6, 7, V30)
	SUBS $1, R2, R2
	BNE  q6x4block
	SBEND(q6x4sb, 288)
	ADD  R23<<2, R7, R26
	VST1 [V22.S4], (R26)
	ADD  R22, R26
	VST1 [V23.S4], (R26)
	ADD  R22, R26
	VST1 [V24.S4], (R26)
	ADD  R22, R26
	VST1 [V30.S4], (R26)
	ADD  $4, R23
	CMP  $16, R23
	BNE  q6x4quarter
	GROUPEND(q6x4group)

// 1/128 in every lane of V29.
#define INV128 \
	MOVW  $0x3c000000, R26 \
	VDUP  R26, V29.S4

// func gemmQ5Kx1NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ5Kx1NEON(SB), NOSPLIT, $0-80
	ARGS(320, 320)
	VMOVI $0x10, V26.B16
	INV128

q5x1group:
	MOVD $0, R23

q5x1quarter:
	QUARTER0

q5x1sb:
	Q5SB

q5x1block:
	Q5UNPACK
	Q5SCALES
	Q5ROW(R4, R5, R6, V0, V1, 0, 1, V22)
	SUBS $1, R2, R2
	BNE  q5x1block
	SBEND(q5x1sb, 320)
	ADD  R23<<2, R7, R26
	VST1 [V22.S4], (R26)
	ADD  $4, R23
	CMP  $16, R23
	BNE  q5x1quarter
	GROUPEND(q5x1group)

// func gemmQ5Kx4NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ5Kx4NEON(SB), NOSPLIT, $0-80
	ARGS(320, 320)
	VMOVI $0x10, V26.B16
	INV128

q5x4group:
	MOVD $0, R23

q5x4quarter:
	QUARTER0
	QUARTER3(2)

q5x4sb:
	Q5SB

q5x4block:
	Q5UNPACK
	Q5SCALES
	Q5ROW(R4, R5, R6, V0, V1, 0, 1, V22)
	Q5ROW(R12, R15, R19, V2, V3, 2, 3, V23)
	Q5ROW(R13, R16, R20, V4, V5, 4, 5, V24)
	Q5ROW(R14, R17, R21, V6, V7, 6, 7, V30)
	SUBS $1, R2, R2
	BNE  q5x4block
	SBEND(q5x4sb, 320)
	ADD  R23<<2, R7, R26
	VST1 [V22.S4], (R26)
	ADD  R22, R26
	VST1 [V23.S4], (R26)
	ADD  R22, R26
	VST1 [V24.S4], (R26)
	ADD  R22, R26
	VST1 [V30.S4], (R26)
	ADD  $4, R23
	CMP  $16, R23
	BNE  q5x4quarter
	GROUPEND(q5x4group)

// func gemmQ4Kx1NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ4Kx1NEON(SB), NOSPLIT, $0-80
	ARGS(256, 320)
	INV128

q4x1group:
	MOVD $0, R23

q4x1quarter:
	QUARTER0

q4x1sb:
	Q5SB

q4x1block:
	Q4UNPACK
	Q5SCALES
	Q5ROW(R4, R5, R6, V0, V1, 0, 1, V22)
	SUBS $1, R2, R2
	BNE  q4x1block
	SBEND(q4x1sb, 320)
	ADD  R23<<2, R7, R26
	VST1 [V22.S4], (R26)
	ADD  $4, R23
	CMP  $16, R23
	BNE  q4x1quarter
	GROUPEND(q4x1group)

// func gemmQ4Kx4NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ4Kx4NEON(SB), NOSPLIT, $0-80
	ARGS(256, 320)
	INV128

q4x4group:
	MOVD $0, R23

q4x4quarter:
	QUARTER0
	QUARTER3(2)

q4x4sb:
	Q5SB

q4x4block:
	Q4UNPACK
	Q5SCALES
	Q5ROW(R4, R5, R6, V0, V1, 0, 1, V22)
	Q5ROW(R12, R15, R19, V2, V3, 2, 3, V23)
	Q5ROW(R13, R16, R20, V4, V5, 4, 5, V24)
	Q5ROW(R14, R17, R21, V6, V7, 6, 7, V30)
	SUBS $1, R2, R2
	BNE  q4x4block
	SBEND(q4x4sb, 320)
	ADD  R23<<2, R7, R26
	VST1 [V22.S4], (R26)
	ADD  R22, R26
	VST1 [V23.S4], (R26)
	ADD  R22, R26
	VST1 [V24.S4], (R26)
	ADD  R22, R26
	VST1 [V30.S4], (R26)
	ADD  $4, R23
	CMP  $16, R23
	BNE  q4x4quarter
	GROUPEND(q4x4group)
