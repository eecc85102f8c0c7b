package kernels

import "github.com/macpool/macpool/engine/tensor"

// kqKernel multiplies ngroups packed Q6_K/Q5_K/Q4_K groups starting at
// group g with the activation rows [i, i+cols) (cols 1, 4 or 8) into dst
// (row stride ldd) on the SDOT kernels (kquant_arm64.s): 4 rows at a time
// (the codes unpacked once for the 4), then 1. x8 is not used (the 8-row
// interleave is the VNNI kernels'); every kernel sums a row in the same
// order, so a row's result does not depend on cols.
func kqKernel(m *Matrix, cols, g, ngroups int, in *Input, x8 []uint32, i int, dst []float32, ldd int) {
	for c := 0; c < cols; {
		n := 1
		if cols-c >= 4 {
			n = 4
		}
		kqKernelNEON(m, n, g, ngroups, in, i+c, dst[c*ldd:], ldd)
		c += n
	}
}

// kqKernelNEON runs the rows-row kernel (1 or 4) on activation rows
// [i, i+rows).
func kqKernelNEON(m *Matrix, rows, g, ngroups int, in *Input, i int, dst []float32, ldd int) {
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
	_ = dst[(rows-1)*ldd+ngroups*packRows-1]
	_ = in.Q[(i+rows)*K-1]
	_ = in.D[(i+rows)*nb-1]
	_ = in.S128[(i+rows)*nb-1]
	_ = in.S6[(i+rows)*2*nb-1]
	xq, xd := &in.Q[i*K], &in.D[i*nb]
	xs := &in.S128[i*nb]
	f := gemmQ5Kx1NEON
	switch {
	case m.layout == layoutQ6K && rows == 4:
		f, xs = gemmQ6Kx4NEON, &in.S6[i*2*nb]
	case m.layout == layoutQ6K:
		f, xs = gemmQ6Kx1NEON, &in.S6[i*2*nb]
	case m.layout == layoutQ5K && rows == 4:
		f = gemmQ5Kx4NEON
	case m.layout == layoutQ4K && rows == 4:
		f = gemmQ4Kx4NEON
	case m.layout == layoutQ4K:
		f = gemmQ4Kx1NEON
	}
	f(&w[0], &hd[0], nb, ngroups, xq, xd, xs, K, &dst[0], ldd*4)
}

// kqMultiRow reports whether matmulKQ builds the 8-row interleave (the
// VNNI kernels'); the SDOT kernels read the rows as QuantizeRows left them.
func kqMultiRow() bool { return false }

// kqPacked reports whether the packed K-quant kernels run here: SDOT
// (ARMv8.2 dot product, every Apple M-series core). Without it the backend
// requantizes K-quants to Q8_0 at load.
func kqPacked() bool { return useDotProd }

func halfSums(q []int8, s6 []int32) { halfSumsGo(q, s6) }

// Implemented in kquant_arm64.s. One activation row (x1) or four (x4, row c
// at xq + c·kstride, its scales and corrections nb resp. 2·nb on); out row c
// at dst + c·lddBytes, 16 values per group.

//go:noescape
func gemmQ6Kx1NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)

//go:noescape
func gemmQ6Kx4NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)

//go:noescape
func gemmQ5Kx1NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)

//go:noescape
func gemmQ5Kx4NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)

//go:noescape
func gemmQ4Kx1NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)

//go:noescape
func gemmQ4Kx4NEON(w, hd *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)
