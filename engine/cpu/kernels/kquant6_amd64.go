package kernels

import "github.com/macpool/macpool/engine/tensor"

//go:generate go run kquant_avx2_gen.go

// kqKernel multiplies ngroups packed Q6_K/Q5_K/Q4_K groups starting at group g
// with the activation rows [i, i+cols) (cols 1, 4 or 8) into dst (row
// stride ldd). With cols 8, x8 holds the rows' scales and corrections
// interleaved (q6x8 / q5x8).
func kqKernel(m *Matrix, cols, g, ngroups int, in *Input, x8 []uint32, i int, dst []float32, ldd int) {
	if !useVNNI {
		for c := range cols { // AVX2: one row at a time (kquant_avx2_amd64.s)
			kqKernelAVX2(m, g, ngroups, in, i+c, dst[c*ldd:], ldd)
		}
		return
	}
	K, nb := in.K, m.nb
	nsb := m.Cols / tensor.QKK
	sbCodes, head, x8Words := q6SBCodes, q6Head, q6x8Words
	q5, q4 := m.layout == layoutQ5K, m.layout == layoutQ4K
	switch {
	case q5:
		sbCodes, head, x8Words = q5SBCodes, q5Head, q5x8Words
	case q4:
		sbCodes, head, x8Words = q4SBCodes, q5Head, q5x8Words
	}
	w := m.data[g*nsb*sbCodes : (g+ngroups)*nsb*sbCodes]
	hd := m.data[m.kqHeads+g*nsb*head : m.kqHeads+(g+ngroups)*nsb*head]
	_ = dst[(cols-1)*ldd+ngroups*packRows-1]
	_ = in.Q[(i+cols)*K-1]
	_ = in.S6[(i+cols)*2*nb-1]
	xq, xd := &in.Q[i*K], &in.D[i*nb]
	switch {
	case cols == 16: // Q6_K only (kqRows)
		o := i / 8 * nb * x8Words
		_ = x8[o+2*nb*x8Words-1]
		gemmQ6Kx16VNNI(&w[0], &hd[0], nb, ngroups, xq, K, &x8[o], &x8[o+nb*x8Words], &dst[0], ldd*4)
	case cols == 8:
		o := i / 8 * nb * x8Words
		_ = x8[o+nb*x8Words-1]
		if q4 {
			gemmQ4Kx8VNNI(&w[0], &hd[0], nb, ngroups, xq, K, &x8[o], &dst[0], ldd*4)
		} else if q5 {
			gemmQ5Kx8VNNI(&w[0], &hd[0], nb, ngroups, xq, K, &x8[o], &dst[0], ldd*4)
		} else {
			gemmQ6Kx8VNNI(&w[0], &hd[0], nb, ngroups, xq, K, &x8[o], &dst[0], ldd*4)
		}
	case cols == 4 && q4:
		gemmQ4Kx4VNNI(&w[0], &hd[0], nb, ngroups, xq, xd, &in.S128[i*nb], K, &dst[0], ldd*4)
	case cols == 4 && q5:
		gemmQ5Kx4VNNI(&w[0], &hd[0], nb, ngroups, xq, xd, &in.S128[i*nb], K, &dst[0], ldd*4)
	case cols == 4:
		gemmQ6Kx4VNNI(&w[0], &hd[0], nb, ngroups, xq, xd, &in.S6[i*2*nb], K, &dst[0], ldd*4)
	case q4:
		gemmQ4Kx1VNNI(&w[0], &hd[0], nb, ngroups, xq, xd, &in.S128[i*nb], &dst[0], prefetchKQ)
	case q5:
		gemmQ5Kx1VNNI(&w[0], &hd[0], nb, ngroups, xq, xd, &in.S128[i*nb], &dst[0], prefetchKQ)
	default:
		gemmQ6Kx1VNNI(&w[0], &hd[0], nb, ngroups, xq, xd, &in.S6[i*2*nb], &dst[0], prefetchKQ)
	}
}

// kqKernelAVX2 is kqKernel's one-row AVX2 version (no VNNI).
func kqKernelAVX2(m *Matrix, g, ngroups int, in *Input, i int, dst []float32, ldd int) {
	K, nb := in.K, m.nb
	nsb := m.Cols / tensor.QKK
	sbCodes, head := q6SBCodes, q6Head
	switch m.layout {
	case layoutQ5K:
		sbCodes, head = q5SBCodes, q5Head
	case layoutQ4K:
		sbCodes, head = q4SBCodes, q5Head
	}
	w := m.data[g*nsb*sbCodes : (g+ngroups)*nsb*sbCodes]
	hd := m.data[m.kqHeads+g*nsb*head : m.kqHeads+(g+ngroups)*nsb*head]
	_ = dst[ngroups*packRows-1]
	_ = in.Q[(i+1)*K-1]
	_ = in.S6[(i+1)*2*nb-1]
	xq, xd := &in.Q[i*K], &in.D[i*nb]
	switch m.layout {
	case layoutQ5K:
		gemmQ5Kx1AVX2(&w[0], &hd[0], nb, ngroups, xq, xd, &in.S128[i*nb], &dst[0])
	case layoutQ4K:
		gemmQ4Kx1AVX2(&w[0], &hd[0], nb, ngroups, xq, xd, &in.S128[i*nb], &dst[0])
	default:
		gemmQ6Kx1AVX2(&w[0], &hd[0], nb, ngroups, xq, xd, &in.S6[i*2*nb], &dst[0])
	}
}

// prefetchKQ is the software prefetch distance (bytes of packed codes) of
// the one-row (decode) K-quant kernels: the code lines that far ahead go
// to L1 and those twice as far to L2, as the Q8_0/Q4_0 decode kernels do
// (prefetchQ8). It was 1024–1536 bytes, L1 only, and a Q4_K_M decode
// streamed its weights ~30% slower than a Q8_0 one. A variable for the
// sweep of BenchmarkDecodeDRAMKQuant.
var prefetchKQ = 3072

// kq16 reports whether m has the 16-row K-quant kernel (Q6_K on VNNI:
// its codes unpacked once for 16 rows).
func kq16(m *Matrix) bool { return m.layout == layoutQ6K && useVNNI && useKQ16 }

// useKQ16 off keeps Q6_K on the 8-row kernel (BenchmarkKQuantCPU's
// Q6_K-x8 comparison).
var useKQ16 = true

// kqMultiRow reports whether kqKernel runs the 4- and 8-row kernels
// (VNNI); the AVX2 path takes one row at a time.
func kqMultiRow() bool { return useVNNI }

// kqPacked reports whether the packed K-quant kernels run here: VNNI, or
// the AVX2 one-row versions.
func kqPacked() bool { return useVNNI || useAVX2 }

// halfSums sets s6[j] = −32·Σ q[16j : 16j+16] (Input.S6).
func halfSums(q []int8, s6 []int32) {
	if n := len(q) / 64; useVNNI && n > 0 {
		_ = s6[4*n-1]
		halfSumsAVX512(&q[0], n, &s6[0])
		q, s6 = q[64*n:], s6[4*n:]
	}
	halfSumsGo(q, s6)
}

//go:noescape
func gemmQ6Kx1AVX2(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32)

//go:noescape
func gemmQ5Kx1AVX2(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32)

//go:noescape
func gemmQ4Kx1AVX2(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32)

//go:noescape
func halfSumsAVX512(q *int8, n int, s6 *int32)

//go:noescape
func gemmQ6Kx1VNNI(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, pf int)

//go:noescape
func gemmQ6Kx4VNNI(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)

//go:noescape
func gemmQ6Kx8VNNI(w, hd *byte, nb, ngroups int, xq *int8, kstride int, xds *uint32, dst *float32, lddBytes int)

//go:noescape
func gemmQ6Kx16VNNI(w, hd *byte, nb, ngroups int, xq *int8, kstride int, xds, xds2 *uint32, dst *float32, lddBytes int)

//go:noescape
func gemmQ4Kx1VNNI(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, pf int)

//go:noescape
func gemmQ4Kx4VNNI(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)

//go:noescape
func gemmQ4Kx8VNNI(w, hd *byte, nb, ngroups int, xq *int8, kstride int, xds *uint32, dst *float32, lddBytes int)

//go:noescape
func gemmQ5Kx1VNNI(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, pf int)

//go:noescape
func gemmQ5Kx4VNNI(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)

//go:noescape
func gemmQ5Kx8VNNI(w, hd *byte, nb, ngroups int, xq *int8, kstride int, xds *uint32, dst *float32, lddBytes int)
