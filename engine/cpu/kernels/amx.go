package kernels

import (
	"sync"

	"github.com/macpool/macpool/engine/tensor"
)

// amxEntry is the size (float32s) of one block's entry of input16: the
// 16 rows' scales and S128 and S8 corrections.
const amxEntry = 48

// amxFormat reports whether m has an AMX kernel for in: Q8_0/Q4_0 packed
// or Q4_K, an even number of blocks per row, and a tile of rows.
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

// input16 holds, for the rows of an Input that the AMX kernels take
// (amxQRows), each row group's per-block scales and corrections
// interleaved as the kernels read them: row group j, block b, row r: d at
// (j·nb+b)·48 + r, float32(S128) at +16, float32(S8) at +32 (exact:
// |S| < 2^24). The quants stay in Input.Q (the activation tile is loaded
// with the row stride K); q is Input.Q with the padding rows of a last,
// partial tile (zero quants, zero scales: their sums are dropped).
type input16 struct {
	rows, m, nb int // rows held (a multiple of 16), real rows among them, blocks per row
	xds         []float32
	q           []int8
}

// amxPadFrom: past the first 16 rows, a last group of M%16 ≥ amxPadFrom
// rows is padded to a full AMX tile (one pass over the weights instead of
// the 8-, 4- and 1-row kernels' two or three: the MoE experts' batches of
// ~32 rows); fewer rows go through those kernels, and so do batches of
// fewer than 16 rows (batched decode: the 8-row kernels prefetch the
// weights from DRAM).
const amxPadFrom = 8

// amxQRows is the rows of quants an Input of M rows holds: M, or M
// rounded up to a whole AMX tile.
func amxQRows(M int) int {
	if amxOn() && M > 16 && M%16 >= amxPadFrom {
		return (M + 15) &^ 15
	}
	return M
}

func (x *input16) reset(in *Input, M, K int) {
	x.rows, x.m, x.nb = 0, 0, K/QK
	if !amxOn() || M < 16 {
		return
	}
	x.rows = amxQRows(M) &^ 15
	x.m = min(M, x.rows)
	n := x.rows / 16 * x.nb * amxEntry
	if cap(x.xds) < n {
		x.xds = make([]float32, n)
	}
	x.xds = x.xds[:n]
	x.q = in.Q[:x.rows*K]
	if x.rows > M {
		clear(x.q[M*K:])
	}
	for row := M; row < x.rows; row++ {
		j, r := row/16, row%16
		for b := range x.nb {
			e := x.xds[(j*x.nb+b)*amxEntry:][:amxEntry]
			e[r], e[16+r], e[32+r] = 0, 0, 0
		}
	}
}

func (x *input16) fill(in *Input, r0, r1 int) {
	nb := x.nb
	for row := r0; row < min(r1, x.m); row++ {
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
// multiple of 16, possibly past in.M: a padded last tile; 0 without AMX),
// with a scratch for them.
func amxRows(m *Matrix, in *Input) (int, *amxScratch) {
	if !amxFormat(m, in) {
		return 0, nil
	}
	return in.x16.rows, amxScratches.Get().(*amxScratch)
}

var amxScratches = sync.Pool{New: func() any { return new(amxScratch) }}
