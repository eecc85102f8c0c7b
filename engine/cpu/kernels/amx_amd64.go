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
// pairs of blocks and the unpacked 4-bit codes of two pairs (6 KiB; see
// amx_amd64.s).
type amxScratch [6 << 10]byte

// amxTile runs the AMX kernel for the activation rows [i, i+16) over the
// weight groups [c0, c1) (full: the groups whose 16 rows all exist; a
// partial last group goes through tmp, 16×16 floats).
func amxTile(m *Matrix, dst []float32, ldd int, in *Input, i, c0, c1, full int, tmp []float32, s *amxScratch) {
	if end := min(c1, full); end > c0 {
		amxKernel(m, c0, end-c0, in, i, dst[i*ldd+c0*packRows:], ldd, s)
	}
	if c1 > full {
		g := c1 - 1
		amxKernel(m, g, 1, in, i, tmp, packRows, s)
		rows := m.Rows - g*packRows
		for c := range 16 {
			copy(dst[(i+c)*ldd+g*packRows:(i+c)*ldd+g*packRows+rows], tmp[c*packRows:c*packRows+rows])
		}
	}
}

func amxKernel(m *Matrix, g, ngroups int, in *Input, i int, dst []float32, ldd int, s *amxScratch) {
	K, nb := in.K, m.nb
	_ = dst[15*ldd+ngroups*packRows-1]
	_ = in.Q[(i+16)*K-1]
	o := i / 16 * nb * amxEntry
	_ = in.x16.xds[o+nb*amxEntry-1]
	xq, xds, cfg, buf := &in.Q[i*K], &in.x16.xds[o], &amxConfig[0], &s[0]
	switch m.layout {
	case layoutQ4K:
		nsb := m.Cols / tensor.QKK
		w := m.data[g*nsb*q4SBCodes : (g+ngroups)*nsb*q4SBCodes]
		hd := m.data[m.kqHeads+g*nsb*q5Head : m.kqHeads+(g+ngroups)*nsb*q5Head]
		gemmQ4Kx16AMX(&w[0], &hd[0], nb, ngroups, xq, K, xds, &dst[0], ldd*4, buf, cfg)
	default:
		gs := m.groupStride()
		w := m.data[g*gs : (g+ngroups)*gs]
		if m.Format == tensor.Q8_0 {
			gemmQ8x16AMX(&w[0], nb, ngroups, xq, K, xds, &dst[0], ldd*4, buf, cfg)
		} else {
			gemmQ4x16AMX(&w[0], nb, ngroups, xq, K, xds, &dst[0], ldd*4, buf, cfg)
		}
	}
}

//go:noescape
func gemmQ8x16AMX(w *byte, nb, ngroups int, xq *int8, kstride int, xds *float32, dst *float32, lddBytes int, buf *byte, cfg *byte)

//go:noescape
func gemmQ4x16AMX(w *byte, nb, ngroups int, xq *int8, kstride int, xds *float32, dst *float32, lddBytes int, buf *byte, cfg *byte)

//go:noescape
func gemmQ4Kx16AMX(w, hd *byte, nb, ngroups int, xq *int8, kstride int, xds *float32, dst *float32, lddBytes int, buf *byte, cfg *byte)

// amxOn: the AMX kernels run (tests turn VNNI off to check the other
// paths, which takes AMX with it).
func amxOn() bool { return useAMX && useVNNI }
