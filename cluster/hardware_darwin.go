package cluster

import (
	"runtime"

	"golang.org/x/sys/unix"
)

func detectHardware() Hardware {
	h := Hardware{Cores: runtime.NumCPU()}
	if s, err := unix.Sysctl("machdep.cpu.brand_string"); err == nil {
		h.Chip = s
	}
	if n, err := unix.SysctlUint64("hw.memsize"); err == nil {
		h.MemoryMB = int64(n / (1 << 20))
	}
	return h
}
