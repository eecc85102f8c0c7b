#include "textflag.h"

// func prefetchRowsT0(p unsafe.Pointer, rows, strideBytes, lines int)
// PREFETCHT0 of `lines` 64-byte lines from the line holding p + r·stride
// for r < rows (owner: attn). Prefetches never fault.
TEXT ·prefetchRowsT0(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ rows+8(FP), CX
	MOVQ strideBytes+16(FP), R8
	MOVQ lines+24(FP), DX
	ANDQ $-64, SI
	TESTQ CX, CX
	JLE  pfdone
	TESTQ DX, DX
	JLE  pfdone

pfrow:
	MOVQ SI, DI
	MOVQ DX, BX

pfline:
	PREFETCHT0 (DI)
	ADDQ $64, DI
	DECQ BX
	JNZ  pfline
	ADDQ R8, SI
	DECQ CX
	JNZ  pfrow

pfdone:
	RET
