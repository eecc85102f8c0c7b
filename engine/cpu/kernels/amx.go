package kernels

import (
	"sync"

	"github.com/macpool/macpool/engine/tensor"
)

// amxEntry is the size (float32s) of one block's entry of input16: the
// 16 rows' scales and S128 and S8 corrections.
const amxEntry = 48

// amxFormat reports whether m has an AMX kernel for in: Q8_0/Q4_0 packed
// or Q4_K, an even number of blocks per row, and 16 rows or more.
func amxFormat(m *Matrix, in *Input) bool {
	if !amxOn() || in.x16.rows == 0 || m.nb%2 != 0 {
		return false
	}
	switch m.layout {
	case layoutPacked16:
		return m.Format == tensor.Q8_0 || m.Format == tensor.Q4_0
	case layoutQ4K:
		return true
	}
	return false
}

// input16 holds, for the first M&^15 rows of an Input, each row group's
// per-block scales and corrections interleaved as the AMX kernels read
// them: row group j, block b, row r: d at (j·nb+b)·48 + r, float32(S128)
// at +16, float32(S8) at +32 (exact: |S| < 2^24). The quants stay in
// Input.Q (the activation tile is loaded with the row stride K).
type input16 struct {
	rows, nb int
	xds      []float32
}

func (x *input16) reset(M, K int) {
	x.rows, x.nb = 0, K/QK
	if !amxOn() || M < 16 {
		return
	}
	x.rows = M &^ 15
	n := x.rows / 16 * x.nb * amxEntry
	if cap(x.xds) < n {
		x.xds = make([]float32, n)
	}
	x.xds = x.xds[:n]
}

func (x *input16) fill(in *Input, r0, r1 int) {
	nb := x.nb
	for row := r0; row < min(r1, x.rows); row++ {
		j, r := row/16, row%16
		for b := range nb {
			e := x.xds[(j*nb+b)*amxEntry:][:amxEntry]
			e[r] = in.D[row*nb+b]
			e[16+r] = float32(in.S128[row*nb+b])
			e[32+r] = float32(in.S8[row*nb+b])
		}
	}
}

// amxRows is how many leading rows of in the AMX kernels take for m (a
// multiple of 16, 0 without AMX), with a scratch for them.
func amxRows(m *Matrix, in *Input) (int, *amxScratch) {
	if !amxFormat(m, in) {
		return 0, nil
	}
	return in.x16.rows, amxScratches.Get().(*amxScratch)
}

var amxScratches = sync.Pool{New: func() any { return new(amxScratch) }}
