#include "textflag.h"

// AVX2 + FMA kernels (the fallback below AVX-512 VNNI, and the float dots).

// Horizontal sum of the 8 floats of Y0 into X0 (clobbers X1).
#define HSUM_Y0 \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0; \
	VHADDPS      X0, X0, X0; \
	VHADDPS      X0, X0, X0; \
	VZEROUPPER

// func dotF32AVX2(a, b *float32, n int) float32
// n > 0, multiple of 32.
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f32loop:
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JNZ         f32loop
	VADDPS      Y1, Y0, Y0
	VADDPS      Y3, Y2, Y2
	VADDPS      Y2, Y0, Y0
	HSUM_Y0
	MOVSS X0, ret+24(FP)
	RET

// func dotBF16AVX2(x *float32, w *uint16, n int) float32
// n > 0, multiple of 32. A bfloat16 is the top half of a float32.
TEXT ·dotBF16AVX2(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), SI
	MOVQ   w+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

bf16loop:
	VPMOVZXWD   (DI), Y4
	VPMOVZXWD   16(DI), Y5
	VPMOVZXWD   32(DI), Y6
	VPMOVZXWD   48(DI), Y7
	VPSLLD      $16, Y4, Y4
	VPSLLD      $16, Y5, Y5
	VPSLLD      $16, Y6, Y6
	VPSLLD      $16, Y7, Y7
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	VFMADD231PS 64(SI), Y6, Y2
	VFMADD231PS 96(SI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $64, DI
	SUBQ        $32, CX
	JNZ         bf16loop
	VADDPS      Y1, Y0, Y0
	VADDPS      Y3, Y2, Y2
	VADDPS      Y2, Y0, Y0
	HSUM_Y0
	MOVSS X0, ret+24(FP)
	RET

// func dotQ8RowsAVX2(w *byte, q *int8, d *float32, nb int) float32
// w: nb ggml Q8_0 blocks; q: nb×32 int8; d: nb float32 activation scales.
// Per block: int8 products summed exactly in int32 lanes (|w|·(x·sign w)
// through VPMADDUBSW, pairs then quads through VPMADDWD with ones), scaled
// by d_w·d_x and accumulated in 8 float lanes. Values must be in
// [-127, 127] (a -128·-128 pair would saturate VPMADDUBSW).
TEXT ·dotQ8RowsAVX2(SB), NOSPLIT, $0-36
	MOVQ     w+0(FP), SI
	MOVQ     q+8(FP), DI
	MOVQ     d+16(FP), DX
	MOVQ     nb+24(FP), CX
	VXORPS   Y0, Y0, Y0
	VPCMPEQW Y7, Y7, Y7
	VPSRLW   $15, Y7, Y7

q8loop:
	MOVWLZX      (SI), AX
	VMOVD        AX, X1
	VCVTPH2PS    X1, X1
	VMOVSS       (DX), X2
	VMULSS       X2, X1, X1
	VBROADCASTSS X1, Y1
	VMOVDQU      2(SI), Y2
	VMOVDQU      (DI), Y3
	VPSIGNB      Y2, Y2, Y4
	VPSIGNB      Y2, Y3, Y5
	VPMADDUBSW   Y5, Y4, Y6
	VPMADDWD     Y7, Y6, Y6
	VCVTDQ2PS    Y6, Y6
	VFMADD231PS  Y6, Y1, Y0
	ADDQ         $34, SI
	ADDQ         $32, DI
	ADDQ         $4, DX
	DECQ         CX
	JNZ          q8loop
	HSUM_Y0
	MOVSS X0, ret+32(FP)
	RET

// func dotQ4RowsAVX2(w *byte, q *int8, d *float32, nb int) float32
// The 16 nibble bytes expand to 32 bytes: low nibbles (values 0-15) in the
// low lane, high nibbles (16-31) in the high lane, minus 8.
TEXT ·dotQ4RowsAVX2(SB), NOSPLIT, $0-36
	MOVQ         w+0(FP), SI
	MOVQ         q+8(FP), DI
	MOVQ         d+16(FP), DX
	MOVQ         nb+24(FP), CX
	VXORPS       Y0, Y0, Y0
	VPCMPEQW     Y7, Y7, Y7
	VPSRLW       $15, Y7, Y7
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X8
	VPBROADCASTD X8, Y8
	MOVL         $0x08080808, AX
	VMOVD        AX, X9
	VPBROADCASTD X9, Y9

q4loop:
	MOVWLZX      (SI), AX
	VMOVD        AX, X1
	VCVTPH2PS    X1, X1
	VMOVSS       (DX), X2
	VMULSS       X2, X1, X1
	VBROADCASTSS X1, Y1
	VMOVDQU      2(SI), X2
	VPSRLW       $4, X2, X3
	VINSERTI128  $1, X3, Y2, Y2
	VPAND        Y8, Y2, Y2
	VPSUBB       Y9, Y2, Y2
	VMOVDQU      (DI), Y3
	VPSIGNB      Y2, Y2, Y4
	VPSIGNB      Y2, Y3, Y5
	VPMADDUBSW   Y5, Y4, Y6
	VPMADDWD     Y7, Y6, Y6
	VCVTDQ2PS    Y6, Y6
	VFMADD231PS  Y6, Y1, Y0
	ADDQ         $18, SI
	ADDQ         $32, DI
	ADDQ         $4, DX
	DECQ         CX
	JNZ          q4loop
	HSUM_Y0
	MOVSS X0, ret+32(FP)
	RET

// func axpyAVX2(dst *float32, a float32, x *float32, n int)
// dst[i] += a·x[i] (FMA), n > 0 a multiple of 16.
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	VBROADCASTSS a+8(FP), Y0
	MOVQ         x+16(FP), SI
	MOVQ         n+24(FP), CX

axpyloop:
	VMOVUPS     (DI), Y1
	VMOVUPS     32(DI), Y2
	VFMADD231PS (SI), Y0, Y1
	VFMADD231PS 32(SI), Y0, Y2
	VMOVUPS     Y1, (DI)
	VMOVUPS     Y2, 32(DI)
	ADDQ        $64, DI
	ADDQ        $64, SI
	SUBQ        $16, CX
	JNZ         axpyloop
	VZEROUPPER
	RET
