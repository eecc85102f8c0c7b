#include "textflag.h"
#include "kernels_amd64.h"

// Float64 AVX-512 kernels of the gated delta rule. Every output element is one chain of
// fused multiply-adds in increasing index order, so the results are bit-identical to the
// portable versions in kernels.go, which use math.FMA in the same order.

// func gemv64AVX512(y, a, b *float64, k, ldbBytes, n int, scale float64)
// y[j] = scale*y[j], then y[j] = fma(a[x], b[x*ldb+j], y[j]) for x = 0..k-1; n is a
// multiple of 8. Columns go in blocks of 16, 8, 4 and 1 vectors.
TEXT ·gemv64AVX512(SB), NOSPLIT, $0-56
	MOVQ y+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), BX
	MOVQ k+24(FP), CX
	MOVQ ldbBytes+32(FP), DX
	MOVQ n+40(FP), R8
	VBROADCASTSD scale+48(FP), Z17
	GEMV(VBROADCASTSD, VMULPD, VFMADD231PD, VMOVUPD, 8)

// func ger64AVX512(s, a, x *float64, m, ldsBytes, n int, scale float64)
// s[i*lds+j] = fma(a[i], x[j], scale*s[i*lds+j]) for i < m, j < n; n is a multiple of 8.
TEXT ·ger64AVX512(SB), NOSPLIT, $0-56
	MOVQ s+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ x+16(FP), BX
	MOVQ m+24(FP), CX
	MOVQ ldsBytes+32(FP), DX
	MOVQ n+40(FP), R8
	VBROADCASTSD scale+48(FP), Z17
	TESTQ CX, CX
	JZ rdone
rrow:
	VBROADCASTSD (SI), Z16
	MOVQ DI, R9
	MOVQ BX, R10
	MOVQ R8, R11
rcol:
	VMULPD (R9), Z17, Z0
	VFMADD231PD (R10), Z16, Z0
	VMOVUPD Z0, (R9)
	ADDQ $64, R9
	ADDQ $64, R10
	SUBQ $8, R11
	JNZ rcol
	ADDQ $8, SI
	ADDQ DX, DI
	DECQ CX
	JNZ rrow
rdone:
	VZEROUPPER
	RET

// func widen64AVX512(dst *float64, src *float32, n int): dst[i] = float64(src[i]), n a multiple of 8.
TEXT ·widen64AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JZ wdone
wloop:
	VCVTPS2PD (SI), Z0
	VMOVUPD Z0, (DI)
	ADDQ $32, SI
	ADDQ $64, DI
	SUBQ $8, CX
	JNZ wloop
wdone:
	VZEROUPPER
	RET

// func narrow32AVX512(dst *float32, src *float64, n int): dst[i] = float32(src[i]) (round to
// nearest even, as Go's conversion), n a multiple of 8.
TEXT ·narrow32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JZ ndone
nloop:
	VCVTPD2PS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ nloop
ndone:
	VZEROUPPER
	RET

// func gemm4x32AVX512(y, a, b *float64, k, ldyBytes, ldaBytes, ldbBytes int, scale float64)
// The 4-row, 32-column block of gemm64: y[r*ldy+j] = scale*y[r*ldy+j], then
// fma(a[r*lda+x], b[x*ldb+j], .) for x = 0..k-1 (k > 0): each element the chain of
// gemv64, with every b vector loaded once for the four rows.
TEXT ·gemm4x32AVX512(SB), NOSPLIT, $0-64
	MOVQ y+0(FP), DI
	MOVQ a+8(FP), R9
	MOVQ b+16(FP), R10
	MOVQ k+24(FP), CX
	MOVQ ldyBytes+32(FP), R8
	MOVQ ldaBytes+40(FP), AX
	MOVQ ldbBytes+48(FP), DX
	VBROADCASTSD scale+56(FP), Z31
	GEMM4(VBROADCASTSD, VMULPD, VFMADD231PD, VMOVUPD, 8)

// func convAcc64AVX512(acc, w *float64, x *float32, n int)
// acc[c] = fma(w[c], float64(x[c]), acc[c]), n a multiple of 8.
TEXT ·convAcc64AVX512(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), BX
	MOVQ n+24(FP), CX
	TESTQ CX, CX
	JZ cdone
cloop:
	VCVTPS2PD (BX), Z0
	VMOVUPD (DI), Z1
	VFMADD231PD (SI), Z0, Z1
	VMOVUPD Z1, (DI)
	ADDQ $64, DI
	ADDQ $64, SI
	ADDQ $32, BX
	SUBQ $8, CX
	JNZ cloop
cdone:
	VZEROUPPER
	RET

// func narrow32NTAVX512(dst *float32, src *float64, n int): narrow32 with non-temporal stores
// (dst 32-byte aligned, n a multiple of 8): a state written for the next decode step need
// not be read into the cache first; SFENCE orders the stores before the caller's.
TEXT ·narrow32NTAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JZ ntdone
ntloop:
	VCVTPD2PS (SI), Y0
	VMOVNTPS Y0, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ ntloop
ntdone:
	SFENCE
	VZEROUPPER
	RET


// func round32AVX512(s *float64, n int): s[i] = float64(float32(s[i])), n a multiple of 8.
TEXT ·round32AVX512(SB), NOSPLIT, $0-16
	MOVQ s+0(FP), DI
	MOVQ n+8(FP), CX
	TESTQ CX, CX
	JZ rndone
rnloop:
	VCVTPD2PS (DI), Y0
	VCVTPS2PD Y0, Z0
	VMOVUPD Z0, (DI)
	ADDQ $64, DI
	SUBQ $8, CX
	JNZ rnloop
rndone:
	VZEROUPPER
	RET
