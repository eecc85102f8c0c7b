package deltanet

import "math"

// The gated delta rule in float32 (Inputs.F32), as llama.cpp computes it: the chunked
// form of chunkedHead with the same decays (every exp of a non-positive log decay, so
// nothing grows: exp(G_i-G_j) as products of per-token decays, exp(G) Q and
// exp(G_last-G_i) K), the same forward substitution and key products shared by the
// value heads of a key head, on float32 matrices with 16-lane kernels. The state is
// updated in place in the caller's float32 buffer (no widened copy), so it is rounded
// to float32 after every chunk and token whatever the call boundaries: CanonicalInto's
// rule holds by construction. The decays and q/k norms are still computed in float64
// (a handful of values per token).

// headData32 is one worker's float32 scratch: key head's normalised q (scaled) and k,
// the chunk matrices (named as in chunkedHead) and the key products.
type headData32 struct {
	keyData[float32]
	eG, A, P, E, KTe, U, W, tq []float32
	delta                      []float32
}

// rule32 runs the float32 rule for every value head: rows [0, prompt) chunked, the
// first chunk of at most first rows, the rest token by token.
func rule32(r Runner, d Dims, in Inputs, prompt, first int, from, to, out []float32) {
	n := d.KeyDim * d.ValueDim
	forHeads(r, d, in, func(h int, hd *headData) {
		src, S := from[h*n:(h+1)*n], to[h*n:(h+1)*n]
		if prompt > 0 || in.T == 0 {
			if &src[0] != &S[0] {
				copy(S, src)
			}
			src = S
			chunkedHead32(d, in, h, &hd.f32, prompt, first, S, out)
		}
		recurrentHead32(d, in, h, &hd.f32, prompt, in.T, src, S, out)
	})
}

// recurrentHead32 runs rows [t0, t1) token by token, as recurrentHead: the first token
// reads the state from src and writes it to S, the others update S in place.
func recurrentHead32(d Dims, in Inputs, h int, hd *headData32, t0, t1 int, src, S, out []float32) {
	dk, dv, nv := d.KeyDim, d.ValueDim, d.NumValueHeads
	_, vs := in.strides(d)
	hd.delta = grow(hd.delta, dv)
	delta := hd.delta
	for t := t0; t < t1; t++ {
		q, k := hd.q[t*dk:(t+1)*dk], hd.k[t*dk:(t+1)*dk]
		v := in.V[t*vs+h*dv : t*vs+(h+1)*dv]
		decay := float32(math.Exp(float64(in.G[t*nv+h])))
		beta := in.Beta[t*nv+h]
		clear(delta)
		gemv32(delta, k, src, dk, dv, dv, 1)
		for j := range delta {
			delta[j] = (v[j] - decay*delta[j]) * beta
		}
		ger32(S, src, k, delta, dk, dv, dv, decay)
		src = S
		o := out[t*nv*dv+h*dv : t*nv*dv+(h+1)*dv]
		clear(o)
		gemv32(o, q, S, dk, dv, dv, 1)
	}
}

// chunkedHead32 is chunkedHead in float32 on the state S in place, reading v, g and beta
// from the inputs and writing the outputs straight into out.
func chunkedHead32(d Dims, in Inputs, h int, hd *headData32, t1, first int, S, out []float32) {
	dk, dv, nv := d.KeyDim, d.ValueDim, d.NumValueHeads
	vd := nv * dv
	_, vs := in.strides(d)
	C := ChunkSize
	hd.eG = grow(hd.eG, C)
	hd.A = grow(hd.A, C*C)
	hd.P = grow(hd.P, C*C)
	hd.E = grow(hd.E, C*C)
	hd.KTe = grow(hd.KTe, dk*C)
	hd.U = grow(hd.U, C*dv)
	hd.W = grow(hd.W, C*dk)
	hd.tq = grow(hd.tq, C*dk)
	eG, A, P, E, KTe, U, W, tq := hd.eG, hd.A, hd.P, hd.E, hd.KTe, hd.U, hd.W, hd.tq
	kp := &hd.keys
	made := kp.ready(d, 0, t1, first)
	for ci, c0, L := 0, 0, min(first, C); c0 < t1; ci, c0, L = ci+1, c0+L, C {
		L = min(L, t1-c0)
		KT := kp.KT[ci*dk*C : (ci+1)*dk*C]
		KK, QK := kp.KK[ci*C*C:(ci+1)*C*C], kp.QK[ci*C*C:(ci+1)*C*C]
		if !made {
			ops32.keyChunk(d, hd.k[c0*dk:(c0+L)*dk], hd.q[c0*dk:(c0+L)*dk], L, KT, KK, QK)
		}
		q, k := hd.q[c0*dk:(c0+L)*dk], hd.k[c0*dk:(c0+L)*dk]
		// The cumulative log decay in float64, its exp and E[i][j] = exp(G_i-G_j) as
		// products of the per-token decays (all ≤ 1).
		var acc float64
		nz := 0 // rows [nz, L) have exp(G) flushed to 0
		for i := 0; i < L; i++ {
			g := float64(in.G[(c0+i)*nv+h])
			acc += g
			if eG[i] = flush(float32(math.Exp(acc))); eG[i] != 0 {
				nz = i + 1
			}
			eg := float32(math.Exp(g))
			E[i*C+i] = 1
			for j := i - 1; j >= 0; j-- {
				E[i*C+j] = flush(E[(i-1)*C+j] * eg)
			}
		}
		for i := 0; i < L; i++ {
			bi := in.Beta[(c0+i)*nv+h]
			for j := 0; j < i; j++ {
				A[i*C+j] = -(bi * KK[i*C+j] * E[i*C+j])
			}
			for j := 0; j <= i; j++ {
				P[i*C+j] = QK[i*C+j] * E[i*C+j]
			}
			clear(P[i*C+i+1 : i*C+L])
			scale32(U[i*dv:(i+1)*dv], in.V[(c0+i)*vs+h*dv:(c0+i)*vs+(h+1)*dv], bi)
			scale32(W[i*dk:(i+1)*dk], k[i*dk:(i+1)*dk], -(bi * eG[i]))
			scale32(tq[i*dk:(i+1)*dk], q[i*dk:(i+1)*dk], eG[i])
		}
		// Forward substitution: (I + A) U = beta V, (I + A) W = -beta exp(G) K. A row
		// of W is of the size of its exp(G): below the flush it is 0 (left out, with
		// its exp(G) Q row), where solving for it would only make subnormals (the
		// products of A with the rows above carry the decay the flush dropped).
		for i := 1; i < L; i++ {
			gemv32(U[i*dv:(i+1)*dv], A[i*C:i*C+i], U, i, dv, dv, 1)
			if i < nz {
				gemv32(W[i*dk:(i+1)*dk], A[i*C:i*C+i], W, i, dk, dk, 1)
			}
		}
		// Vn = U - W S (in place in U); O = (exp(G) Q) S + P Vn, into out.
		gemm32(U, dv, W, dk, S, dv, nz, dk, dv, 1)
		o := out[c0*vd+h*dv:]
		for i := 0; i < L; i++ {
			clear(o[i*vd : i*vd+dv])
		}
		gemm32(o, vd, tq, dk, S, dv, nz, dk, dv, 1)
		gemm32(o, vd, P, C, U, dv, L, L, dv, 1)
		// S' = exp(G_last) S + sum_i exp(G_last - G_i) k_i Vn_iᵀ (row L-1 of E).
		el := E[(L-1)*C : (L-1)*C+L]
		for x := 0; x < dk; x++ {
			mul32(KTe[x*C:x*C+L], KT[x*C:x*C+L], el)
		}
		gemm32(S, dv, KTe, C, U, dv, dk, L, dv, eG[L-1])
	}
}

// flushBelow is where the float32 rule's decays become 0: products of the per-token
// decays of a chunk reach float32's subnormals (below 1.2e-38) when the log decay sums
// past -87, and multiply-adds on subnormals take microcode assists (the chunked rule ran
// 2-4× slower on random gates); a decay below 1e-30 weighs nothing next to the 1 of
// the diagonal.
const flushBelow = 1e-30

func flush(x float32) float32 {
	if x < flushBelow {
		return 0
	}
	return x
}

// The float32 kernels: each output element one chain of multiply-adds in increasing
// index order (fused in the AVX-512 versions of rule32_amd64.s and where the compiler
// fuses x*y+z, as on arm64), so within a platform a gemm block, a gemv and every column
// block give an element the same bits.

// gemv32 sets y[j] = scale*y[j] + Σ_{x<k} a[x]·b[x*ldb+j] for j < n.
func gemv32(y, a, b []float32, k, ldb, n int, scale float32) {
	if k > 0 {
		_ = b[(k-1)*ldb+n-1]
	}
	y, a = y[:n], a[:k]
	for j := gemv32Fast(y, a, b, k, ldb, n, scale); j < n; j++ {
		s := scale * y[j]
		for x, ax := range a {
			s = ax*b[x*ldb+j] + s
		}
		y[j] = s
	}
}

// ger32 sets d[i*ld+j] = scale*s[i*ld+j] + a[i]·x[j] for i < m, j < n (d may be s).
func ger32(d, s, a, x []float32, m, ld, n int, scale float32) {
	if m > 0 {
		_, _ = d[(m-1)*ld+n-1], s[(m-1)*ld+n-1]
	}
	a, x = a[:m], x[:n]
	c := ger32Fast(d, s, a, x, m, ld, n, scale)
	if c == n {
		return
	}
	for i, ai := range a {
		src, dst := s[i*ld+c:i*ld+n], d[i*ld+c:i*ld+n]
		for j, xj := range x[c:] {
			dst[j] = ai*xj + scale*src[j]
		}
	}
}

// gemm32 sets Y = scale*Y + A·B for Y [m, n] (row stride ldy), A [m, k] (lda), B [k, n]
// (ldb): every element the chain of gemv32; blocks of 4 rows and 64 columns share their
// loads.
func gemm32(y []float32, ldy int, a []float32, lda int, b []float32, ldb int, m, k, n int, scale float32) {
	ops32.gemm(y, ldy, a, lda, b, ldb, m, k, n, scale)
}

// scale32 sets dst[i] = a*src[i].
func scale32(dst, src []float32, a float32) {
	dst = dst[:len(src)]
	for i := scale32Fast(dst, src, a); i < len(src); i++ {
		dst[i] = a * src[i]
	}
}

// mul32 sets dst[i] = x[i]*y[i].
func mul32(dst, x, y []float32) {
	dst, y = dst[:len(x)], y[:len(x)]
	for i := mul32Fast(dst, x, y); i < len(x); i++ {
		dst[i] = x[i] * y[i]
	}
}
