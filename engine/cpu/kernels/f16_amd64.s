#include "textflag.h"

// Half-precision (IEEE f16) KV-cache kernels, AVX-512 (F16C conversions on
// 512-bit registers): VCVTPH2PS widens 16 halves exactly; VCVTPS2PH $0
// rounds to nearest even, as tensor.F32ToF16.

// func f16ToF32AVX512(dst *float32, src *uint16, n int)
// n > 0, a multiple of 16.
TEXT ·f16ToF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX

f16tof32loop:
	VCVTPH2PS (SI), Z0
	VMOVUPS   Z0, (DX)
	ADDQ      $32, SI
	ADDQ      $64, DX
	DECQ      CX
	JNZ       f16tof32loop
	VZEROUPPER
	RET

// func f32ToF16AVX512(dst *uint16, src *float32, n int)
// n > 0, a multiple of 16.
TEXT ·f32ToF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX

f32tof16loop:
	VMOVUPS   (SI), Z0
	VCVTPS2PH $0, Z0, (DX)
	ADDQ      $64, SI
	ADDQ      $32, DX
	DECQ      CX
	JNZ       f32tof16loop
	VZEROUPPER
	RET

// func axpys128F16AVX512(acc, p *float32, v *uint16, strideBytes, n int)
// acc[0:128] += Σ_j p[j]·v[j·stride : j·stride+128] (n > 0), v in f16,
// acc in registers for the whole sum.
TEXT ·axpys128F16AVX512(SB), NOSPLIT, $0-40
	MOVQ    acc+0(FP), DX
	MOVQ    p+8(FP), SI
	MOVQ    v+16(FP), DI
	MOVQ    strideBytes+24(FP), R8
	MOVQ    n+32(FP), CX
	VMOVUPS (DX), Z0
	VMOVUPS 64(DX), Z1
	VMOVUPS 128(DX), Z2
	VMOVUPS 192(DX), Z3
	VMOVUPS 256(DX), Z4
	VMOVUPS 320(DX), Z5
	VMOVUPS 384(DX), Z6
	VMOVUPS 448(DX), Z7

axpys128f16loop:
	VBROADCASTSS (SI), Z8
	VCVTPH2PS    (DI), Z9
	VCVTPH2PS    32(DI), Z10
	VCVTPH2PS    64(DI), Z11
	VCVTPH2PS    96(DI), Z12
	VFMADD231PS  Z9, Z8, Z0
	VFMADD231PS  Z10, Z8, Z1
	VFMADD231PS  Z11, Z8, Z2
	VFMADD231PS  Z12, Z8, Z3
	VCVTPH2PS    128(DI), Z9
	VCVTPH2PS    160(DI), Z10
	VCVTPH2PS    192(DI), Z11
	VCVTPH2PS    224(DI), Z12
	VFMADD231PS  Z9, Z8, Z4
	VFMADD231PS  Z10, Z8, Z5
	VFMADD231PS  Z11, Z8, Z6
	VFMADD231PS  Z12, Z8, Z7
	ADDQ         $4, SI
	ADDQ         R8, DI
	DECQ         CX
	JNZ          axpys128f16loop
	VMOVUPS      Z0, (DX)
	VMOVUPS      Z1, 64(DX)
	VMOVUPS      Z2, 128(DX)
	VMOVUPS      Z3, 192(DX)
	VMOVUPS      Z4, 256(DX)
	VMOVUPS      Z5, 320(DX)
	VMOVUPS      Z6, 384(DX)
	VMOVUPS      Z7, 448(DX)
	VZEROUPPER
	RET

// func axpys16F16AVX512(acc, p *float32, v *uint16, strideBytes, n int)
// The same for 16 columns, with four accumulators (one FMA chain of n
// steps would wait on the FMA latency: the scores of one 16-position block
// are a 128-step sum).
TEXT ·axpys16F16AVX512(SB), NOSPLIT, $0-40
	MOVQ    acc+0(FP), DX
	MOVQ    p+8(FP), SI
	MOVQ    v+16(FP), DI
	MOVQ    strideBytes+24(FP), R8
	MOVQ    n+32(FP), CX
	VMOVUPS (DX), Z0
	VXORPS  Z1, Z1, Z1
	VXORPS  Z2, Z2, Z2
	VXORPS  Z3, Z3, Z3
	MOVQ    CX, BX
	SHRQ    $2, BX
	JZ      axpys16f16tail

axpys16f16loop4:
	VBROADCASTSS 0(SI), Z8
	VCVTPH2PS    (DI), Z12
	VFMADD231PS  Z12, Z8, Z0
	ADDQ         R8, DI
	VBROADCASTSS 4(SI), Z9
	VCVTPH2PS    (DI), Z13
	VFMADD231PS  Z13, Z9, Z1
	ADDQ         R8, DI
	VBROADCASTSS 8(SI), Z10
	VCVTPH2PS    (DI), Z14
	VFMADD231PS  Z14, Z10, Z2
	ADDQ         R8, DI
	VBROADCASTSS 12(SI), Z11
	VCVTPH2PS    (DI), Z15
	VFMADD231PS  Z15, Z11, Z3
	ADDQ         R8, DI
	ADDQ         $16, SI
	DECQ         BX
	JNZ          axpys16f16loop4
	VADDPS       Z1, Z0, Z0
	VADDPS       Z3, Z2, Z2
	VADDPS       Z2, Z0, Z0

axpys16f16tail:
	ANDQ $3, CX
	JZ   axpys16f16done

axpys16f16loop:
	VBROADCASTSS (SI), Z8
	VCVTPH2PS    (DI), Z9
	VFMADD231PS  Z9, Z8, Z0
	ADDQ         $4, SI
	ADDQ         R8, DI
	DECQ         CX
	JNZ          axpys16f16loop

axpys16f16done:
	VMOVUPS      Z0, (DX)
	VZEROUPPER
	RET
