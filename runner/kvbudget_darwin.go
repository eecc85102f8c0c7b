package runner

import (
	"golang.org/x/sys/unix"

	"github.com/macpool/macpool/metal/mtl"
)

// defaultKVBytes on a Mac: Metal's recommendedMaxWorkingSetSize (what the
// GPU may use of the unified memory without hurting performance) minus the
// weights; without a Metal device two thirds of the RAM minus the weights.
func defaultKVBytes(weights int64) int64 {
	if h, err := mtl.Hardware(); err == nil && h.RecommendedMaxWorkingSet > 0 {
		return kvBudgetFrom(int64(h.RecommendedMaxWorkingSet), weights)
	}
	if n, err := unix.SysctlUint64("hw.memsize"); err == nil && n > 0 {
		return kvBudgetFrom(int64(n/3*2), weights)
	}
	return 0
}
