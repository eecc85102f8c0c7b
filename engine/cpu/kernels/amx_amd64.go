package kernels

import (
	"github.com/macpool/macpool/engine/tensor"
	"golang.org/x/sys/cpu"
)

// useAMX selects the AMX tile kernels (amx_amd64.s) for activation rows 16
// at a time in prefill: Intel Xeons from Sapphire Rapids on, where the OS
// grants the tile state (Linux: arch_prctl, amx_linux_amd64.go). They
// compute the same int32 block sums as VPDPBUSD and then the VNNI
// kernels' float steps, so their results are bit-identical to the other
// kernels' (TestAMXBitIdentical) and only the speed changes: 16×16×32
// multiply-adds per TDPBSUD instead of 16×4 per VPDPBUSD, leaving the
// vector units the scaling only (a variable for tests and A/B runs).
var useAMX = useVNNI && cpu.X86.HasAMXTile && cpu.X86.HasAMXInt8 && requestAMX()

// amxConfig is the tile configuration the kernels load (palette 1):
// tmm0/1 int32 sums 16×64 bytes, tmm4/5 activations 16×32, tmm6/7
// weights 8×64.
var amxConfig = func() *[64]byte {
	var c [64]byte
	c[0] = 1
	set := func(t, rows, colsb int) {
		c[16+2*t], c[16+2*t+1] = byte(colsb), byte(colsb>>8)
		c[48+t] = byte(rows)
	}
	set(0, 16, 64)
	set(1, 16, 64)
	set(4, 16, 32)
	set(5, 16, 32)
	set(6, 8, 64)
	set(7, 8, 64)
	return &c
}()

// amxScratch is the kernels' per-call scratch: the int32 sums of two
// pairs of blocks (4 KiB, see amx_amd64.s) and a chunk of weight groups'
// 4-bit codes unpacked to bytes (512 per block).
type amxScratch struct {
	sums  [4 << 10]byte
	codes []byte
}

// amxTiles runs the AMX kernels for the activation rows [0, m16) over the
// weight groups [c0, c1) (full: the groups whose 16 rows all exist; a
// partial last group, and a padded last row tile, go through tmp, 16×16
// floats). Batches of amxBlockRows and more (Q8_0, Q4_0) take the whole
// tiles' full groups in column slices on signed codes (amxSlices); the
// rest (smaller batches, partial group, padded tile) run one pass over
// the chunk: Q8_0 from the packed weights, 4-bit weights unpacked once
// per call for all the row tiles (the chunk, ~128 KiB packed, 2×
// unpacked, stays in L2 while each row tile, in L1, passes over it).
func amxTiles(m *Matrix, dst []float32, ldd int, in *Input, m16, c0, c1, full int, tmp []float32, s *amxScratch) {
	sliced := m.Format != tensor.Q4_K && m16 >= amxBlockRows
	if sliced {
		amxSlices(m, dst, ldd, in, in.M&^15, c0, min(c1, full), s)
	}
	if m.Format != tensor.Q8_0 && (!sliced || c1 > full || m16 > in.M) {
		gb := m.nb * 512 // unpacked bytes per group
		if n := (c1 - c0) * gb; cap(s.codes) < n {
			s.codes = make([]byte, n)
		}
		for g := c0; g < c1; g++ {
			amxUnpack(m, g, s.codes[(g-c0)*gb:(g-c0+1)*gb])
		}
	}
	for i := 0; i < m16; i += 16 {
		end := min(c1, full)
		if i+16 > in.M { // a padded last tile: its real rows, group by group
			end = c0
		}
		if end > c0 && !sliced {
			amxKernel(m, c0, end-c0, in, i, dst[i*ldd+c0*packRows:], ldd, s, 0)
		}
		for g := end; g < c1; g++ { // through tmp
			amxKernel(m, g, 1, in, i, tmp, packRows, s, (g-c0)*m.nb*512)
			rows := min(packRows, m.Rows-g*packRows)
			for c := range min(16, in.M-i) {
				copy(dst[(i+c)*ldd+g*packRows:(i+c)*ldd+g*packRows+rows], tmp[c*packRows:c*packRows+rows])
			}
		}
	}
}

// amxUnpack unpacks the 4-bit codes of group g into codes: Q4_0 signed
// (gemmSx16AMX), Q4_K as stored (its kernel corrects with the mins).
func amxUnpack(m *Matrix, g int, codes []byte) {
	nb := m.nb
	_ = codes[nb*512-1]
	if m.layout == layoutQ4K {
		w := m.data[g*nb*q4BlockBytes : (g+1)*nb*q4BlockBytes]
		unpackQ4AMX(&w[0], q4BlockBytes, nb, &codes[0], 0)
		return
	}
	gs := m.groupStride()
	w := m.data[g*gs : (g+1)*gs]
	unpackQ4AMX(&w[packScales], packBlockQ4, nb, &codes[0], 8)
}

// amxKernel: ngroups groups from g × the activation rows [i, i+16) in one
// pass over the columns; 4-bit weights read their unpacked codes from
// s.codes at co. Q8_0 reads the packed weights as stored (+128): batches
// of one or two tiles (the MoE experts') would not repay a signed copy.
func amxKernel(m *Matrix, g, ngroups int, in *Input, i int, dst []float32, ldd int, s *amxScratch, co int) {
	K, nb, gs := in.K, m.nb, m.groupStride()
	_ = dst[15*ldd+ngroups*packRows-1]
	_ = in.x16.q[(i+16)*K-1]
	o := i / 16 * nb * amxEntry
	_ = in.x16.xds[o+nb*amxEntry-1]
	xq, xds, cfg, buf := &in.x16.q[i*K], &in.x16.xds[o], &amxConfig[0], &s.sums[0]
	switch m.Format {
	case tensor.Q8_0:
		w := m.data[g*gs : (g+ngroups)*gs]
		gemmQ8x16AMX(&w[0], nb, ngroups, xq, K, xds, &dst[0], ldd*4, buf, cfg, gs, false)
		return
	case tensor.Q4_K:
		codes := s.codes[co : co+ngroups*nb*512]
		nsb := m.Cols / tensor.QKK
		w := m.data[g*nsb*q4SBCodes : (g+ngroups)*nsb*q4SBCodes]
		hd := m.data[m.kqHeads+g*nsb*q5Head : m.kqHeads+(g+ngroups)*nsb*q5Head]
		gemmQ4Kx16AMX(&w[0], &hd[0], nb, ngroups, xq, K, xds, &dst[0], ldd*4, buf, cfg, &codes[0])
		return
	}
	codes := s.codes[co : co+ngroups*nb*512]
	w := m.data[g*gs : (g+ngroups)*gs]
	gemmSx16AMX(&w[0], nb, ngroups, xq, K, xds, &dst[0], ldd*4, buf, cfg, &codes[0], gs, false, packBlockQ4)
}

// amxSlices runs the signed kernel (Q8_0, Q4_0) for the activation rows
// [0, m16) (whole tiles) over the full weight groups [c0, c1), the columns
// in slices of amxSliceBlocks blocks, slice-major: each slice of the
// groups is made signed once (Q8_0 copied, Q4_0 unpacked, both to 512
// bytes a block) and every row tile passes over it, so the scratch that
// must stay in L2 is one slice's codes, while an activation tile's slice
// stays in L1 (amxSliceBlocks). Between slices the float sums go through
// dst (exact), so the result is bit-identical to one pass.
func amxSlices(m *Matrix, dst []float32, ldd int, in *Input, m16, c0, c1 int, s *amxScratch) {
	K, nb, gs, bs := in.K, m.nb, m.groupStride(), packBlockBytes(m.Format)
	if m16 == 0 || c1 <= c0 {
		return
	}
	_ = dst[(m16-1)*ldd+c1*packRows-1]
	_ = in.x16.q[m16*K-1]
	_ = in.x16.xds[m16/16*nb*amxEntry-1]
	w := m.data[c0*gs : c1*gs]
	for b0 := 0; b0 < nb; b0 += amxSliceBlocks {
		n := min(amxSliceBlocks, nb-b0)
		if need := (c1 - c0) * n * 512; cap(s.codes) < need {
			s.codes = make([]byte, need)
		}
		for g := range c1 - c0 {
			src, codes := &w[g*gs+b0*bs+packScales], &s.codes[g*n*512]
			if m.Format == tensor.Q8_0 {
				signQ8AMX(src, bs, n, codes)
			} else {
				unpackQ4AMX(src, bs, n, codes, 8)
			}
		}
		for i := 0; i < m16; i += 16 {
			gemmSx16AMX(&w[b0*bs], n, c1-c0, &in.x16.q[i*K+b0*QK], K,
				&in.x16.xds[(i/16*nb+b0)*amxEntry], &dst[i*ldd+c0*packRows], ldd*4,
				&s.sums[0], &amxConfig[0], &s.codes[0], gs, b0 > 0, bs)
		}
	}
}

//go:noescape
func gemmQ8x16AMX(w *byte, nb, ngroups int, xq *int8, kstride int, xds *float32, dst *float32, lddBytes int, buf *byte, cfg *byte, gstride int, acc bool)

//go:noescape
func gemmSx16AMX(w *byte, nb, ngroups int, xq *int8, kstride int, xds *float32, dst *float32, lddBytes int, buf *byte, cfg *byte, codes *byte, gstride int, acc bool, bstride int)

//go:noescape
func gemmQ4Kx16AMX(w, hd *byte, nb, ngroups int, xq *int8, kstride int, xds *float32, dst *float32, lddBytes int, buf *byte, cfg *byte, codes *byte)

//go:noescape
func unpackQ4AMX(src *byte, srcStride, nb int, dst *byte, bias byte)

//go:noescape
func signQ8AMX(src *byte, srcStride, nb int, dst *byte)

// amxOn: the AMX kernels run (tests turn VNNI off to check the other
// paths, which takes AMX with it).
func amxOn() bool { return useAMX && useVNNI }
