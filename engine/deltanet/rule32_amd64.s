#include "textflag.h"
#include "kernels_amd64.h"

// Float32 AVX-512 kernels of the gated delta rule's fast path (rule32.go): the float64
// kernels of kernels_amd64.s with 16 lanes. Every output element is one chain of fused
// multiply-adds in increasing index order, so a gemm block, a gemv and every column
// block width give an element the same bits.

// func gemv32AVX512(y, a, b *float32, k, ldbBytes, n int, scale float32)
// y[j] = scale*y[j], then y[j] = fma(a[x], b[x*ldb+j], y[j]) for x = 0..k-1; n is a
// multiple of 16. Columns go in blocks of 16, 8, 4 and 1 vectors.
TEXT ·gemv32AVX512(SB), NOSPLIT, $0-52
	MOVQ y+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), BX
	MOVQ k+24(FP), CX
	MOVQ ldbBytes+32(FP), DX
	MOVQ n+40(FP), R8
	VBROADCASTSS scale+48(FP), Z17
	GEMV(VBROADCASTSS, VMULPS, VFMADD231PS, VMOVUPS, 4)

// func ger32AVX512(d, s, a, x *float32, m, ldBytes, n int, scale float32)
// d[i*ld+j] = fma(a[i], x[j], scale*s[i*ld+j]) for i < m, j < n (d may be s); n is a
// multiple of 16.
TEXT ·ger32AVX512(SB), NOSPLIT, $0-60
	MOVQ d+0(FP), DI
	MOVQ s+8(FP), R12
	MOVQ a+16(FP), SI
	MOVQ x+24(FP), BX
	MOVQ m+32(FP), CX
	MOVQ ldBytes+40(FP), DX
	MOVQ n+48(FP), R8
	VBROADCASTSS scale+56(FP), Z17
	TESTQ CX, CX
	JZ srdone
srrow:
	VBROADCASTSS (SI), Z16
	MOVQ DI, R9
	MOVQ R12, R13
	MOVQ BX, R10
	MOVQ R8, R11
srcol:
	VMULPS (R13), Z17, Z0
	VFMADD231PS (R10), Z16, Z0
	VMOVUPS Z0, (R9)
	ADDQ $64, R9
	ADDQ $64, R13
	ADDQ $64, R10
	SUBQ $16, R11
	JNZ srcol
	ADDQ $4, SI
	ADDQ DX, DI
	ADDQ DX, R12
	DECQ CX
	JNZ srrow
srdone:
	VZEROUPPER
	RET

// func gemm4x64AVX512(y, a, b *float32, k, ldyBytes, ldaBytes, ldbBytes int, scale float32)
// The 4-row, 64-column block of gemm32: each element the chain of gemv32, with every b
// vector loaded once for the four rows (k > 0).
TEXT ·gemm4x64AVX512(SB), NOSPLIT, $0-60
	MOVQ y+0(FP), DI
	MOVQ a+8(FP), R9
	MOVQ b+16(FP), R10
	MOVQ k+24(FP), CX
	MOVQ ldyBytes+32(FP), R8
	MOVQ ldaBytes+40(FP), AX
	MOVQ ldbBytes+48(FP), DX
	VBROADCASTSS scale+56(FP), Z31
	GEMM4(VBROADCASTSS, VMULPS, VFMADD231PS, VMOVUPS, 4)

// func scale32AVX512(dst, src *float32, a float32, n int): dst[i] = a*src[i], n a multiple
// of 16.
TEXT ·scale32AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	VBROADCASTSS a+16(FP), Z1
	MOVQ n+24(FP), CX
	TESTQ CX, CX
	JZ scdone
scloop:
	VMULPS (SI), Z1, Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ scloop
scdone:
	VZEROUPPER
	RET

// func mul32AVX512(dst, x, y *float32, n int): dst[i] = x[i]*y[i], n a multiple of 16.
TEXT ·mul32AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), BX
	MOVQ n+24(FP), CX
	TESTQ CX, CX
	JZ mudone
muloop:
	VMOVUPS (SI), Z0
	VMULPS (BX), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ muloop
mudone:
	VZEROUPPER
	RET
