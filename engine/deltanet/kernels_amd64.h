// The AVX-512 kernels the float64 rule (kernels_amd64.s) and the float32 rule
// (rule32_amd64.s) share, as macros over one precision's instructions: BCAST
// (VBROADCASTSD or VBROADCASTSS), MUL (VMULPD, VMULPS), FMA (VFMADD231PD, VFMADD231PS),
// MOVU (VMOVUPD, VMOVUPS) and SZ, an element's bytes (8, 4). A vector is 64 bytes, so
// a block of nv vectors holds nv*64/SZ columns. GEMV and GEMM4 define fixed labels:
// each is a whole function's body, once per TEXT.

// One vector of a gemv column block at byte offset o: y scaled by Z17 into z; z += a[x]
// (Z16) times b's row (R10); z stored back into y.
#define GEMV_SCALE(MUL, o, z) MUL (o)(DI), Z17, z
#define GEMV_FMA(FMA, o, z) FMA (o)(R10), Z16, z
#define GEMV_STORE(MOVU, o, z) MOVU z, (o)(DI)

// OP (one of the three, with its instruction INS) on the block's vectors Z0, Z1, ...
// at increasing offsets: VECS4 four from o, VECS16/8/4/1 a whole block.
#define VECS4(OP, INS, o, z0, z1, z2, z3) \
	OP(INS, o, z0); OP(INS, o+64, z1); OP(INS, o+128, z2); OP(INS, o+192, z3)
#define VECS1(OP, INS) OP(INS, 0, Z0)
#define VECS4A(OP, INS) VECS4(OP, INS, 0, Z0, Z1, Z2, Z3)
#define VECS8(OP, INS) VECS4A(OP, INS); VECS4(OP, INS, 256, Z4, Z5, Z6, Z7)
#define VECS16(OP, INS) \
	VECS8(OP, INS); VECS4(OP, INS, 512, Z8, Z9, Z10, Z11); VECS4(OP, INS, 768, Z12, Z13, Z14, Z15)

// GEMV_BLOCK runs the columns of y (DI) and b (BX) left (R8) in blocks of nv vectors
// (VECS the block's macro) while a whole block is left, then goes on to next: each
// vector scaled, then the chain over the k (CX) rows of a (SI) and b (row stride DX).
#define GEMV_BLOCK(VECS, nv, here, loop, store, next, BCAST, MUL, FMA, MOVU, SZ) \
here: \
	CMPQ R8, $(nv*64/SZ); \
	JLT next; \
	VECS(GEMV_SCALE, MUL); \
	MOVQ SI, R9; \
	MOVQ BX, R10; \
	MOVQ CX, R11; \
	TESTQ R11, R11; \
	JZ store; \
loop: \
	BCAST (R9), Z16; \
	VECS(GEMV_FMA, FMA); \
	ADDQ $SZ, R9; \
	ADDQ DX, R10; \
	DECQ R11; \
	JNZ loop; \
store: \
	VECS(GEMV_STORE, MOVU); \
	ADDQ $(nv*64), DI; \
	ADDQ $(nv*64), BX; \
	SUBQ $(nv*64/SZ), R8; \
	JMP here

// GEMV is the body of gemv64AVX512 and gemv32AVX512 after their arguments are loaded
// (y DI, a SI, b BX, k CX, ldbBytes DX, n R8, scale broadcast in Z17): y[j] = scale*y[j],
// then y[j] = fma(a[x], b[x*ldb+j], y[j]) for x = 0..k-1, n a whole number of vectors.
// Columns go in blocks of 16, 8, 4 and 1 vectors.
#define GEMV(BCAST, MUL, FMA, MOVU, SZ) \
	GEMV_BLOCK(VECS16, 16, g16, g16loop, g16st, g8, BCAST, MUL, FMA, MOVU, SZ); \
	GEMV_BLOCK(VECS8, 8, g8, g8loop, g8st, g4, BCAST, MUL, FMA, MOVU, SZ); \
	GEMV_BLOCK(VECS4A, 4, g4, g4loop, g4st, g1, BCAST, MUL, FMA, MOVU, SZ); \
	GEMV_BLOCK(VECS1, 1, g1, g1loop, g1st, gdone, BCAST, MUL, FMA, MOVU, SZ); \
gdone: \
	VZEROUPPER; \
	RET

// One row of a gemm block (y at R11, four vectors z0..z3): scaled by Z31; += the row's
// a[x] (za) times the four vectors of b's row (Z16-Z19); stored.
#define GEMM_SCALE(MUL, z0, z1, z2, z3) \
	MUL 0(R11), Z31, z0; MUL 64(R11), Z31, z1; MUL 128(R11), Z31, z2; MUL 192(R11), Z31, z3
#define GEMM_FMA(FMA, za, z0, z1, z2, z3) \
	FMA Z16, za, z0; FMA Z17, za, z1; FMA Z18, za, z2; FMA Z19, za, z3
#define GEMM_STORE(MOVU, z0, z1, z2, z3) \
	MOVU z0, 0(R11); MOVU z1, 64(R11); MOVU z2, 128(R11); MOVU z3, 192(R11)

// GEMM_ROWS runs OP (GEMM_SCALE or GEMM_STORE, with its instruction INS) on the four
// rows of y (DI, row stride R8), row r in Z4r to Z4r+3.
#define GEMM_ROWS(OP, INS) \
	MOVQ DI, R11; \
	OP(INS, Z0, Z1, Z2, Z3); \
	ADDQ R8, R11; \
	OP(INS, Z4, Z5, Z6, Z7); \
	ADDQ R8, R11; \
	OP(INS, Z8, Z9, Z10, Z11); \
	ADDQ R8, R11; \
	OP(INS, Z12, Z13, Z14, Z15)

// GEMM4 is the body of gemm4x32AVX512 and gemm4x64AVX512 after their arguments are
// loaded (y DI, a R9, b R10, k CX > 0, ldyBytes R8, ldaBytes AX, ldbBytes DX, scale
// broadcast in Z31): the 4-row, 4-vector block of y = scale*y + a·b, each element the
// chain of GEMV, with every b vector loaded once for the four rows.
#define GEMM4(BCAST, MUL, FMA, MOVU, SZ) \
	LEAQ (R9)(AX*1), R12; \
	LEAQ (R12)(AX*1), R13; \
	LEAQ (R13)(AX*1), R14; \
	GEMM_ROWS(GEMM_SCALE, MUL); \
mloop: \
	MOVU 0(R10), Z16; \
	MOVU 64(R10), Z17; \
	MOVU 128(R10), Z18; \
	MOVU 192(R10), Z19; \
	BCAST (R9), Z20; \
	BCAST (R12), Z21; \
	BCAST (R13), Z22; \
	BCAST (R14), Z23; \
	GEMM_FMA(FMA, Z20, Z0, Z1, Z2, Z3); \
	GEMM_FMA(FMA, Z21, Z4, Z5, Z6, Z7); \
	GEMM_FMA(FMA, Z22, Z8, Z9, Z10, Z11); \
	GEMM_FMA(FMA, Z23, Z12, Z13, Z14, Z15); \
	ADDQ $SZ, R9; \
	ADDQ $SZ, R12; \
	ADDQ $SZ, R13; \
	ADDQ $SZ, R14; \
	ADDQ DX, R10; \
	DECQ CX; \
	JNZ mloop; \
	GEMM_ROWS(GEMM_STORE, MOVU); \
	VZEROUPPER; \
	RET
