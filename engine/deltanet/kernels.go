package deltanet

import "math"

// The float64 vector kernels the delta rule is built from. Each output element is one
// chain of fused multiply-adds in increasing index order (math.FMA here, VFMADD231PD in
// the AVX-512 versions of kernels_amd64.s), so every platform and every path of a kernel
// computes the same bits, whatever the vector width (the rule's exps come from math.Exp,
// which does not promise its last bit across architectures).

// gemv64 sets y[j] = scale*y[j] + Σ_{x<k} a[x]·b[x*ldb+j] for j < n, accumulating in
// increasing x with one rounding per step (FMA).
func gemv64(y, a, b []float64, k, ldb, n int, scale float64) {
	if k > 0 {
		_ = b[(k-1)*ldb+n-1]
	}
	y, a = y[:n], a[:k]
	c := gemv64Fast(y, a, b, k, ldb, n, scale)
	for j := c; j < n; j++ {
		s := scale * y[j]
		for x, ax := range a {
			s = math.FMA(ax, b[x*ldb+j], s)
		}
		y[j] = s
	}
}

// ger64 sets s[i*lds+j] = scale*s[i*lds+j] + a[i]·x[j] (one FMA) for i < m, j < n.
func ger64(s, a, x []float64, m, lds, n int, scale float64) {
	if m > 0 {
		_ = s[(m-1)*lds+n-1]
	}
	a, x = a[:m], x[:n]
	c := ger64Fast(s, a, x, m, lds, n, scale)
	if c == n {
		return
	}
	for i, ai := range a {
		row := s[i*lds+c : i*lds+n]
		for j, xj := range x[c:] {
			row[j] = math.FMA(ai, xj, scale*row[j])
		}
	}
}

// widen64 sets dst[i] = float64(src[i]).
func widen64(dst []float64, src []float32) {
	dst = dst[:len(src)]
	for i := widen64Fast(dst, src); i < len(src); i++ {
		dst[i] = float64(src[i])
	}
}

// narrow32 sets dst[i] = float32(src[i]).
func narrow32(dst []float32, src []float64) {
	dst = dst[:len(src)]
	for i := narrow32Fast(dst, src); i < len(src); i++ {
		dst[i] = float32(src[i])
	}
}

// gemm64 sets Y = scale*Y + A·B for Y [m, n] (row stride ldy), A [m, k] (lda), B [k, n]
// (ldb): every element the chain of gemv64, so the same bits as m gemv64 calls; blocks
// of 4 rows and 32 columns share their loads.
func gemm64(y []float64, ldy int, a []float64, lda int, b []float64, ldb int, m, k, n int, scale float64) {
	ops64.gemm(y, ldy, a, lda, b, ldb, m, k, n, scale)
}

// vecOps are one precision's kernels, for the code the float64 rule and the float32 rule
// (rule32.go) share: ops64 and ops32.
type vecOps[F float32 | float64] struct {
	// width is the elements of a vector of the AVX-512 kernels, and of a 64-byte line.
	width int
	gemv  func(y, a, b []F, k, ldb, n int, scale F)
	// gemmFast does rows [0, r) and columns [0, c) of gemm in blocks (k > 0).
	gemmFast func(y []F, ldy int, a []F, lda int, b []F, ldb int, m, k, n int, scale F) (r, c int)
}

var (
	ops64 = vecOps[float64]{width: 8, gemv: gemv64, gemmFast: gemm64Fast}
	ops32 = vecOps[float32]{width: 16, gemv: gemv32, gemmFast: gemm32Fast}
)

// gemm is gemm64 or gemm32: the blocks of gemmFast, then the rows and columns left
// over with gemv (the same chains).
func (o *vecOps[F]) gemm(y []F, ldy int, a []F, lda int, b []F, ldb int, m, k, n int, scale F) {
	if m == 0 || n == 0 {
		return
	}
	_ = y[(m-1)*ldy+n-1]
	r, c := 0, 0
	if k > 0 {
		_ = a[(m-1)*lda+k-1]
		r, c = o.gemmFast(y, ldy, a, lda, b, ldb, m, k, n, scale)
	}
	for i := 0; i < m; i++ {
		if i < r {
			if c < n {
				o.gemv(y[i*ldy+c:], a[i*lda:], b[c:], k, ldb, n-c, scale)
			}
			continue
		}
		o.gemv(y[i*ldy:], a[i*lda:], b, k, ldb, n, scale)
	}
}

// keyChunk fills a chunk's Kᵀ (KT[x*C+j] = k_j[x]), K Kᵀ and Q Kᵀ (row stride
// ChunkSize) from its L rows of normalised k and q.
func (o *vecOps[F]) keyChunk(d Dims, k, q []F, L int, KT, KK, QK []F) {
	w := o.width
	dk, C, Lp := d.KeyDim, ChunkSize, (L+w-1)&^(w-1) // L up to a vector (ChunkSize is one)
	// Transposed in blocks of a line's rows: each written line of KT is whole.
	for i0 := 0; i0 < L; i0 += w {
		i1 := min(L, i0+w)
		for x := 0; x < dk; x++ {
			kt := KT[x*C+i0 : x*C+i1]
			for i := range kt {
				kt[i] = k[(i0+i)*dk+x]
			}
		}
	}
	// Columns up to Lp read KT's padding, never used.
	clear(KK[:L*C])
	clear(QK[:L*C])
	o.gemm(KK, C, k, dk, KT, C, L, dk, Lp, 1)
	o.gemm(QK, C, q, dk, KT, C, L, dk, Lp, 1)
}

// convAcc64 sets acc[c] += w[c]·float64(x[c]): the product of two float32 values is exact
// in float64, so FMA and a multiply then add give the same bits.
func convAcc64(acc, w []float64, x []float32) {
	acc, w = acc[:len(x)], w[:len(x)]
	for c := convAcc64Fast(acc, w, x); c < len(x); c++ {
		acc[c] += w[c] * float64(x[c])
	}
}

// narrow32Stream is narrow32 for a state that is not read again soon: where it can, with
// stores that bypass the cache (same values).
func narrow32Stream(dst []float32, src []float64) {
	dst = dst[:len(src)]
	for i := narrow32StreamFast(dst, src); i < len(src); i++ {
		dst[i] = float32(src[i])
	}
}

// round32 sets s[i] = float64(float32(s[i])).
func round32(s []float64) {
	for i := round32Fast(s); i < len(s); i++ {
		s[i] = float64(float32(s[i]))
	}
}
