package cluster

import (
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/macpool/macpool/metal/mtl"
)

func detectHardware() Hardware {
	h := Hardware{Cores: runtime.NumCPU()}
	if s, err := unix.Sysctl("machdep.cpu.brand_string"); err == nil {
		h.Chip = s
	}
	if n, err := unix.SysctlUint64("hw.memsize"); err == nil {
		h.MemoryMB = int64(n / (1 << 20))
	}
	// The GPU through Metal and IOKit (metal/mtl; no cgo). Without a Metal
	// device (an Intel Mac without one, a VM) these stay zero.
	if g, err := mtl.Hardware(); err == nil {
		h.GPUCores = g.GPUCores
		h.GPUWorkingMB = int64(g.RecommendedMaxWorkingSet / (1 << 20))
		if h.Chip == "" {
			h.Chip = g.Chip
		}
		// The published figure of the chip: a Mac's GPU reaches most of it
		// (docs/metal.md); an unknown chip stays unknown rather than being
		// measured from the CPU, which reaches far less of it.
		chip := g.Chip
		if chip == "" {
			chip = h.Chip
		}
		if gbs, ok := mtl.PeakBandwidth(chip, g.GPUCores); ok {
			h.BandwidthMBs = int64(gbs * 1000)
		}
	}
	return h
}

// lastLevelCache is not read here: the probe's default size is used.
func lastLevelCache() int64 { return 0 }
