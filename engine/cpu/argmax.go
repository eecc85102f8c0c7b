package cpu

import (
	"fmt"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
)

var _ engine.ArgmaxOps = (*Backend)(nil)

// Argmax sets dst[r] to engine.Argmax of row r of t. With it a greedy
// decode step picks its tokens where the logits are instead of copying
// every row of VocabSize values out first: at 8 sequences of Qwen3's 152k
// vocabulary that copy (into fresh, faulting memory) plus a serial argmax
// cost ~5 ms of a ~120 ms step while the other threads idled.
func (b *Backend) Argmax(t engine.Tensor, dst []int) error {
	s := tt(t)
	if len(dst) != s.rows {
		return fmt.Errorf("cpu: argmax of %d rows into %d", s.rows, len(dst))
	}
	b.parallel(s.rows, 1, func(lo, hi, _ int) {
		for r := lo; r < hi; r++ {
			dst[r] = argmax(s.data[r*s.cols : (r+1)*s.cols])
		}
	})
	return nil
}

// argmax is engine.Argmax of v, by the SIMD kernel where there is one.
func argmax(v []float32) int {
	if i, ok := kernels.ArgmaxF32(v); ok {
		return i
	}
	return engine.Argmax(v)
}
