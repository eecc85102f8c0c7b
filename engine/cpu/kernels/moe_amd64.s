#include "textflag.h"

// func weightedRowsAVX512(dst *float32, n, strideBytes int, y *float32, rows *int, w *float32, k int)
// dst[i] = Σ_j w[j]·y[rows[j]·stride + i] for i < n (n > 0, a multiple of
// 64; k > 0), 64 values at a time in Z0-Z3: from zero, per row j a
// VMULPS then a VADDPS, the Go loop's two roundings.
//
// Registers: DI dst, CX chunks left, DX the row stride (bytes), SI y at
// the current chunk, R8 rows, R9 w, R10 rows left, R11 row offset, R12
// the row pointer.
TEXT ·weightedRowsAVX512(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), CX
	SHRQ $6, CX
	MOVQ strideBytes+16(FP), DX
	MOVQ y+24(FP), SI

wrchunk:
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	MOVQ   rows+32(FP), R8
	MOVQ   w+40(FP), R9
	MOVQ   k+48(FP), R10

wrrow:
	MOVQ         (R8), R11
	IMULQ        DX, R11
	LEAQ         (SI)(R11*1), R12
	VBROADCASTSS (R9), Z8
	VMULPS       (R12), Z8, Z4
	VMULPS       64(R12), Z8, Z5
	VMULPS       128(R12), Z8, Z6
	VMULPS       192(R12), Z8, Z7
	VADDPS       Z4, Z0, Z0
	VADDPS       Z5, Z1, Z1
	VADDPS       Z6, Z2, Z2
	VADDPS       Z7, Z3, Z3
	ADDQ         $8, R8
	ADDQ         $4, R9
	DECQ         R10
	JNZ          wrrow

	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ    $256, DI
	ADDQ    $256, SI
	DECQ    CX
	JNZ     wrchunk
	VZEROUPPER
	RET
