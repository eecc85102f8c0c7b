package kernels

import (
	"github.com/macpool/macpool/engine/tensor"
	"golang.org/x/sys/cpu"
)

// Feature flags, set at start-up; variables so that tests can turn the
// faster paths off and compare every implementation on this machine.
var (
	useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C && cpu.X86.HasOSXSAVE
	// useVNNI selects the packed int8 kernels (VPDPBUSD on zmm) and the
	// AVX-512 quantizer.
	useVNNI = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL &&
		cpu.X86.HasAVX512VNNI && useAVX2
	// useAVX512F selects the zmm float kernels (float tiles, attention).
	useAVX512F = cpu.X86.HasAVX512F && useAVX2
)

// The AVX-512 float kernels behind GemmF32NT, GemmF32NN, MaxF32 and
// ExpSubF32; nil without AVX-512 (the Go versions run).
var (
	gemmF32Fast = map[bool]func(x *float32, xStride int, w *float32, wStride, k int, dst *float32, dstStride int){true: gemmF32x4x4}[useAVX512F]
	gemmNNFast  = map[bool]func(a *float32, lda int, b *float32, ldb, k int, dst *float32, ldd, cols int){true: gemmNN8x32}[useAVX512F]
	expSubFast  = map[bool]func(x *float32, n int, mx float32) float32{true: expSubAVX512}[useAVX512F]
	maxFast     = map[bool]func(x *float32, n int) float32{true: maxAVX512}[useAVX512F]
	argmaxFast  = map[bool]func(x *float32, n int) int{true: argmaxAVX512}[useAVX512F]
)

var (
	hasAxpy    = useAVX2
	hasDotF32  = useAVX2
	hasDotBF16 = useAVX2
)

func impl() string {
	switch {
	case useVNNI:
		return "avx512vnni"
	case useAVX2:
		return "avx2"
	}
	return "go"
}

func usePacked() bool { return useVNNI }

// dotsFast does the keys [0, n&^3) when the vector path applies.
func dotsFast(dst, q, k []float32, stride, n int) int {
	hd := len(q)
	n4 := n &^ 3
	if !useAVX512F || hd%16 != 0 || n4 == 0 {
		return 0
	}
	_ = k[(n4-1)*stride+hd-1]
	dotsF32AVX512(&dst[0], &q[0], &k[0], 4*stride, n4, hd)
	return n4
}

// axpysFast does the columns [0, c) of acc it can, returning c.
func axpysFast(acc, p, v []float32, stride, n int) int {
	if !useAVX512F || n == 0 {
		return 0
	}
	_ = v[(n-1)*stride+len(acc)-1]
	c := 0
	for ; c+128 <= len(acc); c += 128 {
		axpys128AVX512(&acc[c], &p[0], &v[c], 4*stride, n)
	}
	for ; c+16 <= len(acc); c += 16 {
		axpys16AVX512(&acc[c], &p[0], &v[c], 4*stride, n)
	}
	return c
}

func axpyFast(dst []float32, a float32, x []float32) { axpyAVX2(&dst[0], a, &x[0], len(dst)) }

func dotF32Fast(a, b []float32) float32           { return dotF32AVX2(&a[0], &b[0], len(a)) }
func dotBF16Fast(x []float32, w []uint16) float32 { return dotBF16AVX2(&x[0], &w[0], len(x)) }

func quantizeRow(x []float32, q []int8, d []float32, s8, s128 []int32) {
	if useVNNI && len(d) > 0 {
		_, _, _ = x[len(d)*QK-1], q[len(d)*QK-1], s8[len(d)-1]
		_ = s128[len(d)-1]
		quantizeQ8AVX512(&x[0], len(d), &q[0], &d[0], &s8[0], &s128[0])
		return
	}
	quantizeRowGo(x, q, d, s8, s128)
}

func dotQ8Rows(w []byte, q []int8, d []float32, nb int) float32 {
	if useAVX2 {
		_, _, _ = w[nb*BlockQ8_0-1], q[nb*QK-1], d[nb-1]
		return dotQ8RowsAVX2(&w[0], &q[0], &d[0], nb)
	}
	return dotQ8RowsGo(w, q, d, nb)
}

func dotQ4Rows(w []byte, q []int8, d []float32, nb int) float32 {
	if useAVX2 {
		_, _, _ = w[nb*BlockQ4_0-1], q[nb*QK-1], d[nb-1]
		return dotQ4RowsAVX2(&w[0], &q[0], &d[0], nb)
	}
	return dotQ4RowsGo(w, q, d, nb)
}

// packedKernel multiplies ngroups packed groups of w with input rows
// [i, i+cols) (cols 1 or 4) into dst (row stride ldd floats).
// Software prefetch distances (bytes) of the one-row (decode) kernels: the
// block that far ahead goes to L1, the one twice as far to L2. Measured
// on a 2-vCPU Xeon streaming from DRAM (thread CPU time): L1 prefetch alone
// (BenchmarkPrefetchAB) took Q8_0 9.3 → 10.3 GB/s at 2048, Q4_0 6.9 → 9.1
// at 1024; on 0.45 GB of huge pages (BenchmarkRowsDRAM*), with the
// L2 prefetch twice as far, Q8_0 13.2 → 15.3 GB/s at 3072, Q4_0 12.8 →
// 15.5 at 2048-3072.
const (
	prefetchQ8 = 3072
	prefetchQ4 = 3072
)

// Prefetch distances (bytes) of the ×4 and ×8 kernels, as the one-row
// ones (variables for the sweeps of BenchmarkRowsDRAMAB: 3072 was the best
// of 1024-4096 for M = 4 and 8, Q8_0 and Q4_0).
var (
	prefetch4Q8, prefetch4Q4 = 3072, 3072
	prefetch8Q8, prefetch8Q4 = 3072, 3072
)

func packedKernel(m *Matrix, cols int, w []byte, ngroups int, in *Input, i int, dst []float32, ldd int) {
	K, nb := in.K, m.nb
	_ = w[ngroups*m.groupStride()-1]
	_ = dst[(cols-1)*ldd+ngroups*packRows-1]
	_ = in.Q[(i+cols)*K-1]
	xq, xd := &in.Q[i*K], &in.D[i*nb]
	switch {
	case m.Format == tensor.MLXAffine:
		xs := &in.S128[i*nb]
		ngr, bpg := m.Cols/m.groupSize, m.groupSize/QK
		switch {
		case m.headF32 && cols == 4:
			gemmMLXF4x4VNNI(&w[0], ngr, bpg, ngroups, xq, xd, xs, K, &dst[0], ldd*4)
		case m.headF32:
			gemmMLXF4x1VNNI(&w[0], ngr, bpg, ngroups, xq, xd, xs, &dst[0])
		case m.bits == 8 && cols == 4:
			gemmMLX8x4VNNI(&w[0], ngr, bpg, ngroups, xq, xd, xs, K, &dst[0], ldd*4)
		case m.bits == 8:
			gemmMLX8x1VNNI(&w[0], ngr, bpg, ngroups, xq, xd, xs, &dst[0])
		case cols == 4:
			gemmMLX4x4VNNI(&w[0], ngr, bpg, ngroups, xq, xd, xs, K, &dst[0], ldd*4)
		default:
			gemmMLX4x1VNNI(&w[0], ngr, bpg, ngroups, xq, xd, xs, &dst[0])
		}
	case m.Format == tensor.Q8_0:
		xs := &in.S128[i*nb]
		if cols == 4 {
			gemmQ8x4VNNI(&w[0], nb, ngroups, xq, xd, xs, K, &dst[0], ldd*4, prefetch4Q8)
		} else {
			gemmQ8x1VNNI(&w[0], nb, ngroups, xq, xd, xs, &dst[0], prefetchQ8)
		}
	default:
		xs := &in.S8[i*nb]
		if cols == 4 {
			gemmQ4x4VNNI(&w[0], nb, ngroups, xq, xd, xs, K, &dst[0], ldd*4, prefetch4Q4)
		} else {
			gemmQ4x1VNNI(&w[0], nb, ngroups, xq, xd, xs, &dst[0], prefetchQ4)
		}
	}
}

//go:noescape
func gemmMLXF4x4VNNI(w *byte, ngr, bpg, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)

//go:noescape
func gemmMLXF4x1VNNI(w *byte, ngr, bpg, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32)

//go:noescape
func gemmMLX4x4VNNI(w *byte, ngr, bpg, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)

//go:noescape
func gemmMLX8x4VNNI(w *byte, ngr, bpg, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes int)

//go:noescape
func gemmMLX4x1VNNI(w *byte, ngr, bpg, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32)

//go:noescape
func gemmMLX8x1VNNI(w *byte, ngr, bpg, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32)

// matmulFloatFast: F32/BF16 weights on 4×4 tiles (AVX-512); the activation
// rows and weight rows the tiles leave over go through one-row kernels that
// sum in the tiles' order, so a row's result does not depend on how many
// rows share the call (batch invariance: see gemm1_amd64.s).
func matmulFloatFast(m *Matrix, dst []float32, ldd int, in *Input, n0, n1 int) bool {
	K := in.K
	if !useAVX512F || K%16 != 0 {
		return false
	}
	M := in.M
	M4 := M &^ 3
	const nChunk = 64 // weight rows that stay in L2 while all x rows pass
	for c0 := n0; c0 < n1; c0 += nChunk {
		c1 := min(n1, c0+nChunk)
		c4 := c0 + (c1-c0)&^3
		for i := 0; i < M4; i += 4 {
			x := in.X[i*K : (i+4)*K]
			for n := c0; n < c4; n += 4 {
				_ = dst[(i+3)*ldd+n+3]
				if m.f32 != nil {
					w := m.f32[n*K : (n+4)*K]
					gemmF32x4x4(&x[0], 4*K, &w[0], 4*K, K, &dst[i*ldd+n], 4*ldd)
				} else {
					w := m.u16[n*K : (n+4)*K]
					gemmBF16x4x4(&x[0], 4*K, &w[0], 2*K, K, &dst[i*ldd+n], 4*ldd)
				}
			}
		}
		for i := M4; i < M; i++ {
			x := in.X[i*K : (i+1)*K]
			for n := c0; n < c4; n += 4 {
				_ = dst[i*ldd+n+3]
				if m.f32 != nil {
					w := m.f32[n*K : (n+4)*K]
					gemmF32x1x4(&x[0], &w[0], 4*K, K, &dst[i*ldd+n])
				} else {
					w := m.u16[n*K : (n+4)*K]
					gemmBF16x1x4(&x[0], &w[0], 2*K, K, &dst[i*ldd+n])
				}
			}
		}
		for n := c4; n < c1; n++ {
			for i := 0; i < M; i++ {
				x := in.X[i*K : (i+1)*K]
				if m.f32 != nil {
					dst[i*ldd+n] = gemmF32x1x1(&x[0], &m.f32[n*K], K)
				} else {
					dst[i*ldd+n] = gemmBF16x1x1(&x[0], &m.u16[n*K], K)
				}
			}
		}
	}
	return true
}

//go:noescape
func gemmF32x4x4(x *float32, xStride int, w *float32, wStride, k int, dst *float32, dstStride int)

//go:noescape
func gemmBF16x4x4(x *float32, xStride int, w *uint16, wStride, k int, dst *float32, dstStride int)

// Implemented in kernels_amd64.s (AVX2) and vnni_amd64.s (AVX-512).

//go:noescape
func dotsF32AVX512(dst, q, k *float32, strideBytes, n, hd int)

//go:noescape
func axpys128AVX512(acc, p, v *float32, strideBytes, n int)

//go:noescape
func axpys16AVX512(acc, p, v *float32, strideBytes, n int)

//go:noescape
func axpyAVX2(dst *float32, a float32, x *float32, n int)

//go:noescape
func dotF32AVX2(a, b *float32, n int) float32

//go:noescape
func dotBF16AVX2(x *float32, w *uint16, n int) float32

//go:noescape
func dotQ8RowsAVX2(w *byte, q *int8, d *float32, nb int) float32

//go:noescape
func dotQ4RowsAVX2(w *byte, q *int8, d *float32, nb int) float32

//go:noescape
func quantizeQ8AVX512(x *float32, nb int, q *int8, d *float32, s8, s128 *int32)

//go:noescape
func gemmQ8x4VNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes, pf int)

//go:noescape
func gemmQ4x4VNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, kstride int, dst *float32, lddBytes, pf int)

//go:noescape
func gemmNN8x32(a *float32, lda int, b *float32, ldb, k int, dst *float32, ldd, cols int)

//go:noescape
func maxAVX512(x *float32, n int) float32

//go:noescape
func argmaxAVX512(x *float32, n int) int

//go:noescape
func expSubAVX512(x *float32, n int, mx float32) float32

//go:noescape
func gemmQ8x1VNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, pf int)

//go:noescape
func gemmQ4x1VNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, pf int)

// packedKernel8 multiplies ngroups packed Q8_0/Q4_0 groups of w with the
// interleaved rows [i, i+8) of x8 into dst (row stride ldd floats): rows at
// or past x8.m (padding) are not stored; a group of 5-8 real rows takes the
// 8-row kernel, one of 2-4 the interleaved 4-row one.
func packedKernel8(m *Matrix, w []byte, ngroups int, x8 *input8, i int, dst []float32, ldd int, next *[]byte) {
	nb := x8.nb
	rows := min(8, x8.m-i)
	if rows < 2 {
		panic("kernels: interleaved kernels for fewer than 2 rows")
	}
	_ = w[ngroups*m.groupStride()-1]
	_ = dst[(rows-1)*ldd+ngroups*packRows-1]
	o := i / 8 * nb * 8 // first (block, row) entry of the row group
	_ = x8.q[(o+nb*8)*QK-1]
	_, _ = x8.s128[o+nb*8-1], x8.s8[o+nb*8-1]
	xq, xd := &x8.q[o*QK], &x8.d[o]
	switch {
	case m.Format == tensor.Q8_0 && rows >= 5:
		gemmQ8x8VNNI(&w[0], nb, ngroups, xq, xd, &x8.s128[o], &dst[0], ldd*4, prefetch8Q8, rows)
	case m.Format == tensor.Q8_0:
		gemmQ8x4iVNNI(&w[0], nb, ngroups, xq, xd, &x8.s128[o], &dst[0], ldd*4, prefetch4Q8, rows)
	case rows >= 5 && len(*next) > 0:
		// Spread the prefetches over the call's blocks: two lines a
		// block, at most 128 bytes on (the rest is the next call's).
		step := min(128, (len(*next)+ngroups*nb-1)/(ngroups*nb))
		gemmQ4x8VNNIpf(&w[0], nb, ngroups, xq, xd, &x8.s8[o], &dst[0], ldd*4, prefetch8Q4, rows, &(*next)[0], step)
		*next = (*next)[min(len(*next), step*ngroups*nb):]
	case rows >= 5:
		gemmQ4x8VNNI(&w[0], nb, ngroups, xq, xd, &x8.s8[o], &dst[0], ldd*4, prefetch8Q4, rows)
	default:
		gemmQ4x4iVNNI(&w[0], nb, ngroups, xq, xd, &x8.s8[o], &dst[0], ldd*4, prefetch4Q4, rows)
	}
}

//go:noescape
func gemmQ8x8VNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, lddBytes, pf, rows int)

//go:noescape
func gemmQ4x8VNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, lddBytes, pf, rows int)

//go:noescape
func gemmQ4x8VNNIpf(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, lddBytes, pf, rows int, next *byte, step int)

//go:noescape
func gemmQ8x4iVNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, lddBytes, pf, rows int)

//go:noescape
func gemmQ4x4iVNNI(w *byte, nb, ngroups int, xq *int8, xd *float32, xs *int32, dst *float32, lddBytes, pf, rows int)
