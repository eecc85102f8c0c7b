package metal

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/macpool/macpool/engine"
)

var _ engine.ArgmaxOps = (*Backend)(nil)

// ErrNaNLogits is returned by Argmax for a row without a maximum (NaN
// logits: a numerical failure upstream).
var ErrNaNLogits = errors.New("metal: argmax of NaN logits")

// Argmax sets dst[r] to the index of the largest value of row r of t (the
// lowest index on ties, as engine.Greedy), computed on the GPU, and syncs:
// greedy decoding then reads 4 bytes per sequence instead of its logits.
// It implements engine.ArgmaxOps: Model.ForwardGreedy (the runner's
// greedy steps) calls it instead of reading the logits.
func (b *Backend) Argmax(t engine.Tensor, dst []int) error {
	x := tt(t)
	if len(dst) != x.rows || x.cols == 0 {
		panic(fmt.Sprintf("metal: argmax of [%d, %d] into %d values", x.rows, x.cols, len(dst)))
	}
	if x.rows == 0 {
		return nil
	}
	out := b.scratchBuf(&b.argOut, 4*x.rows) // read right after the sync below
	b.dispatch("argmax", [3]int{x.rows, 1, 1}, [3]int{32, 1, 1}, buf(out), buf(x.buf), gpu32(x.cols))
	if err := b.sync(); err != nil {
		return err
	}
	o := out.Bytes()
	for i := range dst {
		dst[i] = int(int32(binary.LittleEndian.Uint32(o[4*i:])))
		if dst[i] < 0 || dst[i] >= x.cols {
			// The kernel finds no maximum in a row of NaNs: fail the
			// step instead of handing token -1 to the sampler.
			return fmt.Errorf("%w: row %d (argmax %d of %d columns)", ErrNaNLogits, i, dst[i], x.cols)
		}
	}
	return nil
}
