#include "textflag.h"

// Native K-quant kernels for arm64 (NEON + SDOT), on the packed layouts of
// kquant6.go (Q6_K) and kquant5.go (Q5_K, Q4_K) that the amd64 kernels
// read. A 64-byte chunk holds 4 consecutive codes of 16 rows (byte 4r+i);
// its 16-byte quarter Q holds those of rows 4Q..4Q+3, which is exactly the
// operand of SDOT by element: lane r += Σ_i code[4r+i]·x[4j+i] with the 4
// activations x[4j..4j+3] taken from one 32-bit element of a register.
// The codes (0..63) are non-negative, so the signed product is exact.
//
// The 1-row kernels (decode) walk a group's blocks in memory order and per
// block its 4 quarters (16 rows, 4 accumulators), reading every code byte
// once, in sequence. The 4-row kernels (prefill) walk the quarters one
// after the other (4 rows × 4 accumulators would not fit the 32 registers
// with the codes) and per quarter and block unpack the codes once for the 4
// activation rows; the group's other quarters share its cache lines, so
// they are read from cache. The float32 steps per row and block are those of the
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

// FCVTL2 Vd.4S, Vn.8H (the upper 4 halves).
#define FCVTL24(n, d) WORD $(0x4E217800 | (n)<<5 | (d))

// Registers of every kernel:
//   R0 codes of the block (4-row kernels: + the quarter's 16 bytes)
//   R1 head of the super-block  R2 blocks left in it  R3 super-blocks left
//   R4/R5/R6 activation row 0: int8 codes, scales d_x, corrections
//   R7 dst of the group  R9 groups left  R10 codes of the group  R11 heads of the group
//   R22 lddBytes  R24 code bytes per group  R25 head bytes per group  R26 scale pointer
//   V0 V1 activation row 0 (values 0-15, 16-31)
//   V8-V11 chunks L_j, then the codes of half 1  V12 V13 chunks H, then sums
//   V14-V17 codes of half 0  V18 V19 the block's two scales
//   V25 0x0f  V26 high-bit mask  V27 V28 scratch
// 4-row kernels: R23 4·Q; R12-R14, R15-R17, R19-R21 rows 1-3 as R4-R6;
//   V2-V7 their activations; V20 d, V21 dmin/128 of the quarter's rows;
//   V22-V24 V30 accumulators of rows 0-3; V29 1/128.
// 1-row kernels: V20-V23 d of quarters 0-3; V2 V3 V30 V31 their dmin/128
//   (Q5_K/Q4_K), or V2 V3 the half sums S6 (Q6_K); V24 d_x; V29 S128
//   (Q5_K/Q4_K); V4-V7 accumulators of quarters 0-3.

// Q6_K: codes of half 0 into V14-V17, of half 1 into V8-V11 (in place).
#define Q6UNPACK \
	FMOVQ 0(R0), F8 \
	FMOVQ 64(R0), F9 \
	FMOVQ 128(R0), F10 \
	FMOVQ 192(R0), F11 \
	FMOVQ 256(R0), F12 \
	FMOVQ 320(R0), F13 \
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

// Q6_K: the block's scales s_h = d·float32(sc_h) of 4 rows (d in Vdn).
#define Q6SCALES(dn) \
	FMOVS (R26), F27 \
	FMOVS 16(R26), F28 \
	SXTLB(27, 27) \
	SXTLH(27, 27) \
	SCVTF4(27, 27) \
	FMUL4(dn, 27, 18) \
	SXTLB(28, 28) \
	SXTLH(28, 28) \
	SCVTF4(28, 28) \
	FMUL4(dn, 28, 19)

// Q6_K: with V12/V13 = S6 of the halves, i_h = S6_h + Σ code·x (x in
// Vxa, Vxb), then V12 = f = fma(float32(i_1), s_1, float32(i_0)·s_0).
#define Q6SUMS(xa, xb) \
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
	VFMLA V19.S4, V13.S4, V12.S4

// Q6_K, one activation row of a 4-row kernel (codes rx, scales rd, half
// sums rs; registers va, vb numbered xa, xb): acc = fma(f, d_x, acc).
#define Q6ROW(rx, rd, rs, va, vb, xa, xb, acc) \
	VLD1.P  32(rx), [va.B16, vb.B16] \
	VLD2R.P 8(rs), [V12.S4, V13.S4] \
	Q6SUMS(xa, xb) \
	VLD1R.P 4(rd), [V27.S4] \
	VFMLA   V27.S4, V12.S4, acc.S4

// Q6_K, quarter of a 1-row kernel (d in Vdn): acc = fma(f, d_x, acc).
#define Q6QUARTER(dn, acc) \
	Q6UNPACK \
	Q6SCALES(dn) \
	VORR  V2.B16, V2.B16, V12.B16 \
	VORR  V3.B16, V3.B16, V13.B16 \
	Q6SUMS(0, 1) \
	VFMLA V24.S4, V12.S4, acc.S4 \
	ADD   $16, R0 \
	ADD   $4, R26

// Q4_K (Q5_K without the H chunk): codes of half 0 into V14-V17, of half
// 1 into V8-V11 (in place).
#define Q4UNPACK \
	FMOVQ 0(R0), F8 \
	FMOVQ 64(R0), F9 \
	FMOVQ 128(R0), F10 \
	FMOVQ 192(R0), F11 \
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

// Q5_K/Q4_K: the block's a = d·float32(sc) into V18 and
// mb = (dmin/128)·float32(m) into V19 of 4 rows (d in Vdn, dmin/128 in Vmn).
#define Q5SCALES(dn, mn) \
	FMOVS (R26), F27 \
	FMOVS 16(R26), F28 \
	UXTLB(27, 27) \
	UXTLH(27, 27) \
	UCVTF4(27, 27) \
	FMUL4(dn, 27, 18) \
	UXTLB(28, 28) \
	UXTLH(28, 28) \
	UCVTF4(28, 28) \
	FMUL4(mn, 28, 19)

// Q5_K/Q4_K: V13 = float32(Σ code·x)·a (x in Vxa, Vxb).
#define Q5SUMS(xa, xb) \
	VEOR V13.B16, V13.B16, V13.B16 \
	SDOTE(xa, 0, 14, 13) \
	SDOTE(xa, 1, 15, 13) \
	SDOTE(xa, 2, 16, 13) \
	SDOTE(xa, 3, 17, 13) \
	SDOTE(xb, 0, 8, 13) \
	SDOTE(xb, 1, 9, 13) \
	SDOTE(xb, 2, 10, 13) \
	SDOTE(xb, 3, 11, 13) \
	SCVTF4(13, 13) \
	FMUL4(18, 13, 13)

// Q5_K/Q4_K, one activation row of a 4-row kernel:
// f = fma(float32(S128), mb, f), acc = fma(f, d_x, acc).
#define Q5ROW(rx, rd, rs, va, vb, xa, xb, acc) \
	VLD1.P  32(rx), [va.B16, vb.B16] \
	Q5SUMS(xa, xb) \
	VLD1R.P 4(rs), [V12.S4] \
	SCVTF4(12, 12) \
	VFMLA   V19.S4, V12.S4, V13.S4 \
	VLD1R.P 4(rd), [V27.S4] \
	VFMLA   V27.S4, V13.S4, acc.S4

// Q5_K/Q4_K, quarter of a 1-row kernel (unpack: Q5UNPACK or Q4UNPACK).
#define Q5QUARTER(unpack, dn, mn, acc) \
	unpack \
	Q5SCALES(dn, mn) \
	Q5SUMS(0, 1) \
	VFMLA V19.S4, V29.S4, V13.S4 \
	VFMLA V24.S4, V13.S4, acc.S4 \
	ADD   $16, R0 \
	ADD   $4, R26

// Arguments (every kernel):
//   w, hd *byte      codes and heads of the first group
//   nb, ngroups int  blocks of 32 per row, groups of 16 rows
//   xq *int8, xd *float32, xs *int32: activation row 0 (codes, scales,
//                    corrections: S6 for Q6_K, S128 for Q5_K/Q4_K)
//   kstride int      values per activation row (4-row kernels)
//   dst *float32, lddBytes int: out row 0 at dst[16g + r], row c lddBytes on
#define ARGS(cbytes, hbytes) \
	MOVD  w+0(FP), R10 \
	MOVD  hd+8(FP), R11 \
	MOVD  nb+16(FP), R3 \
	MOVD  ngroups+24(FP), R9 \
	MOVD  dst+64(FP), R7 \
	MOVD  lddBytes+72(FP), R22 \
	MOVD  $(cbytes), R26 \
	MUL   R3, R26, R24 \
	MOVD  $(hbytes), R26 \
	LSR   $3, R3, R25 \
	MUL   R26, R25, R25 \
	VMOVI $15, V25.B16

// Start of a group in a 1-row kernel.
#define GROUP1 \
	MOVD R10, R0 \
	MOVD R11, R1 \
	MOVD xq+32(FP), R4 \
	MOVD xd+40(FP), R5 \
	MOVD xs+48(FP), R6 \
	MOVD nb+16(FP), R3 \
	LSR  $3, R3, R3 \
	VEOR V4.B16, V4.B16, V4.B16 \
	VEOR V5.B16, V5.B16, V5.B16 \
	VEOR V6.B16, V6.B16, V6.B16 \
	VEOR V7.B16, V7.B16, V7.B16

// d of the 16 rows of a super-block into V20-V23 (1-row kernels).
#define D16 \
	FMOVQ (R1), F21 \
	FMOVQ 16(R1), F23 \
	FCVTL4(21, 20) \
	FCVTL24(21, 21) \
	FCVTL4(23, 22) \
	FCVTL24(23, 23)

// dmin/128 of the 16 rows into V2 V3 V30 V31 (1-row kernels).
#define DMIN16 \
	FMOVQ 32(R1), F3 \
	FMOVQ 48(R1), F31 \
	FCVTL4(3, 2) \
	FCVTL24(3, 3) \
	FCVTL4(31, 30) \
	FCVTL24(31, 31) \
	MOVW  $0x3c000000, R26 \
	VDUP  R26, V27.S4 \
	FMUL4(27, 2, 2) \
	FMUL4(27, 3, 3) \
	FMUL4(27, 30, 30) \
	FMUL4(27, 31, 31)

// End of a group: the 16 sums of a 1-row kernel, then the next group.
#define STORE16 \
	VST1 [V4.S4, V5.S4, V6.S4, V7.S4], (R7)

#define GROUPEND(label) \
	ADD  R24, R10 \
	ADD  R25, R11 \
	ADD  $64, R7 \
	SUBS $1, R9, R9 \
	BNE  label \
	RET

// func gemmQ6Kx1NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ6Kx1NEON(SB), NOSPLIT, $0-80
	ARGS(384, 288)
	VMOVI $0x30, V26.B16

q6x1group:
	GROUP1

q6x1sb:
	D16
	ADD  $32, R1, R26
	MOVD $8, R2

q6x1block:
	VLD1.P  32(R4), [V0.B16, V1.B16]
	VLD2R.P 8(R6), [V2.S4, V3.S4]
	VLD1R.P 4(R5), [V24.S4]
	Q6QUARTER(20, V4)
	Q6QUARTER(21, V5)
	Q6QUARTER(22, V6)
	Q6QUARTER(23, V7)
	ADD     $(384-64), R0
	ADD     $(32-16), R26
	SUBS    $1, R2, R2
	BNE     q6x1block
	ADD     $288, R1
	SUBS    $1, R3, R3
	BNE     q6x1sb
	STORE16
	GROUPEND(q6x1group)

// func gemmQ5Kx1NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ5Kx1NEON(SB), NOSPLIT, $0-80
	ARGS(320, 320)
	VMOVI $0x10, V26.B16

q5x1group:
	GROUP1

q5x1sb:
	D16
	DMIN16
	ADD  $64, R1, R26
	MOVD $8, R2

q5x1block:
	VLD1.P  32(R4), [V0.B16, V1.B16]
	VLD1R.P 4(R6), [V29.S4]
	SCVTF4(29, 29)
	VLD1R.P 4(R5), [V24.S4]
	Q5QUARTER(Q5UNPACK, 20, 2, V4)
	Q5QUARTER(Q5UNPACK, 21, 3, V5)
	Q5QUARTER(Q5UNPACK, 22, 30, V6)
	Q5QUARTER(Q5UNPACK, 23, 31, V7)
	ADD     $(320-64), R0
	ADD     $(32-16), R26
	SUBS    $1, R2, R2
	BNE     q5x1block
	ADD     $320, R1
	SUBS    $1, R3, R3
	BNE     q5x1sb
	STORE16
	GROUPEND(q5x1group)

// func gemmQ4Kx1NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ4Kx1NEON(SB), NOSPLIT, $0-80
	ARGS(256, 320)

q4x1group:
	GROUP1

q4x1sb:
	D16
	DMIN16
	ADD  $64, R1, R26
	MOVD $8, R2

q4x1block:
	VLD1.P  32(R4), [V0.B16, V1.B16]
	VLD1R.P 4(R6), [V29.S4]
	SCVTF4(29, 29)
	VLD1R.P 4(R5), [V24.S4]
	Q5QUARTER(Q4UNPACK, 20, 2, V4)
	Q5QUARTER(Q4UNPACK, 21, 3, V5)
	Q5QUARTER(Q4UNPACK, 22, 30, V6)
	Q5QUARTER(Q4UNPACK, 23, 31, V7)
	ADD     $(256-64), R0
	ADD     $(32-16), R26
	SUBS    $1, R2, R2
	BNE     q4x1block
	ADD     $320, R1
	SUBS    $1, R3, R3
	BNE     q4x1sb
	STORE16
	GROUPEND(q4x1group)

// 4-row kernels.

// Start of a quarter: code and head pointers, activation rows 0-3
// (xsShift: log2 of the correction bytes per block), accumulators.
#define QUARTER4(xsShift) \
	ADD   R23<<2, R10, R0 \
	MOVD  R11, R1 \
	MOVD  xq+32(FP), R4 \
	MOVD  xd+40(FP), R5 \
	MOVD  xs+48(FP), R6 \
	MOVD  nb+16(FP), R3 \
	LSR   $3, R3, R3 \
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
	VEOR  V22.B16, V22.B16, V22.B16 \
	VEOR  V23.B16, V23.B16, V23.B16 \
	VEOR  V24.B16, V24.B16, V24.B16 \
	VEOR  V30.B16, V30.B16, V30.B16

// Start of a Q6_K super-block: d of the quarter's rows, scale pointer.
#define Q6SB4 \
	ADD   R23<<1, R1, R26 \
	FMOVD (R26), F20 \
	FCVTL4(20, 20) \
	ADD   $32, R1, R26 \
	ADD   R23, R26, R26 \
	MOVD  $8, R2

// Start of a Q5_K/Q4_K super-block: d, dmin/128, scale pointer.
#define Q5SB4 \
	ADD   R23<<1, R1, R26 \
	FMOVD (R26), F20 \
	FCVTL4(20, 20) \
	FMOVD 32(R26), F21 \
	FCVTL4(21, 21) \
	FMUL4(29, 21, 21) \
	ADD   $64, R1, R26 \
	ADD   R23, R26, R26 \
	MOVD  $8, R2

// End of a super-block (head bytes hb).
#define SBEND(label, hb) \
	ADD  $(hb), R1 \
	SUBS $1, R3, R3 \
	BNE  label

// End of a quarter: the 4 sums of each row, then the next quarter.
#define STORE4(label) \
	ADD  R23<<2, R7, R26 \
	VST1 [V22.S4], (R26) \
	ADD  R22, R26 \
	VST1 [V23.S4], (R26) \
	ADD  R22, R26 \
	VST1 [V24.S4], (R26) \
	ADD  R22, R26 \
	VST1 [V30.S4], (R26) \
	ADD  $4, R23 \
	CMP  $16, R23 \
	BNE  label

// 1/128 in every lane of V29.
#define INV128 \
	MOVW $0x3c000000, R26 \
	VDUP R26, V29.S4

// func gemmQ6Kx4NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ6Kx4NEON(SB), NOSPLIT, $0-80
	ARGS(384, 288)
	VMOVI $0x30, V26.B16

q6x4group:
	MOVD $0, R23

q6x4quarter:
	QUARTER4(3)

q6x4sb:
	Q6SB4

q6x4block:
	Q6UNPACK
	ADD  $384, R0
	Q6SCALES(20)
	ADD  $32, R26
	Q6ROW(R4, R5, R6, V0, V1, 0, 1, V22)
	Q6ROW(R12, R15, R19, V2, V3, 2, 3, V23)
	Q6ROW(R13, R16, R20, V4, V5, 4, 5, V24)
	Q6ROW(R14, R17, R21, V6, V7, 6, 7, V30)
	SUBS $1, R2, R2
	BNE  q6x4block
	SBEND(q6x4sb, 288)
	STORE4(q6x4quarter)
	GROUPEND(q6x4group)

// func gemmQ5Kx4NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ5Kx4NEON(SB), NOSPLIT, $0-80
	ARGS(320, 320)
	VMOVI $0x10, V26.B16
	INV128

q5x4group:
	MOVD $0, R23

q5x4quarter:
	QUARTER4(2)

q5x4sb:
	Q5SB4

q5x4block:
	Q5UNPACK
	ADD  $320, R0
	Q5SCALES(20, 21)
	ADD  $32, R26
	Q5ROW(R4, R5, R6, V0, V1, 0, 1, V22)
	Q5ROW(R12, R15, R19, V2, V3, 2, 3, V23)
	Q5ROW(R13, R16, R20, V4, V5, 4, 5, V24)
	Q5ROW(R14, R17, R21, V6, V7, 6, 7, V30)
	SUBS $1, R2, R2
	BNE  q5x4block
	SBEND(q5x4sb, 320)
	STORE4(q5x4quarter)
	GROUPEND(q5x4group)

// func gemmQ4Kx4NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
TEXT ·gemmQ4Kx4NEON(SB), NOSPLIT, $0-80
	ARGS(256, 320)
	INV128

q4x4group:
	MOVD $0, R23

q4x4quarter:
	QUARTER4(2)

q4x4sb:
	Q5SB4

q4x4block:
	Q4UNPACK
	ADD  $256, R0
	Q5SCALES(20, 21)
	ADD  $32, R26
	Q5ROW(R4, R5, R6, V0, V1, 0, 1, V22)
	Q5ROW(R12, R15, R19, V2, V3, 2, 3, V23)
	Q5ROW(R13, R16, R20, V4, V5, 4, 5, V24)
	Q5ROW(R14, R17, R21, V6, V7, 6, 7, V30)
	SUBS $1, R2, R2
	BNE  q4x4block
	SBEND(q4x4sb, 320)
	STORE4(q4x4quarter)
	GROUPEND(q4x4group)
