package cluster

import "runtime"

// Hardware describes the machine a node runs on.
type Hardware struct {
	Chip     string
	Cores    int
	MemoryMB int64
	// Apple silicon (darwin; zero elsewhere): GPU core count and the
	// Metal device's recommended working set (MB).
	GPUCores     int
	GPUWorkingMB int64
	// BandwidthMBs is the memory bandwidth in MB/s (10^6 bytes): a Mac's
	// published figure by chip (mtl.PeakBandwidth), elsewhere 0 until
	// MeasureBandwidth fills it in (0: unknown).
	BandwidthMBs int64
}

// DetectHardware reads the chip name, core count and memory size of this
// machine (/proc on Linux, sysctl on macOS). Unknown fields stay zero.
func DetectHardware() Hardware {
	h := detectHardware()
	if h.Cores == 0 {
		h.Cores = runtime.NumCPU()
	}
	if h.Chip == "" {
		h.Chip = runtime.GOARCH
	}
	return h
}
