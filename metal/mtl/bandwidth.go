package mtl

import "strings"

// peakBandwidth is Apple's published unified-memory bandwidth (GB/s,
// 10^9 bytes) per chip, keyed by the Metal device name (the same as the
// sysctl machdep.cpu.brand_string) without "Apple ". Chips sold with two
// memory configurations are split by GPU core count: byCores[cores]
// overrides gbs. It is the one table: the Metal backend's prediction and
// bench report a share of it, and the cluster gossips a Mac's figure for
// bandwidth-aware pipeline placement (cluster.DetectHardware).
var peakBandwidth = map[string]struct {
	gbs     float64
	byCores map[int]float64
}{
	"M1":       {gbs: 68.25},
	"M1 Pro":   {gbs: 200},
	"M1 Max":   {gbs: 400},
	"M1 Ultra": {gbs: 800},
	"M2":       {gbs: 100},
	"M2 Pro":   {gbs: 200},
	"M2 Max":   {gbs: 400},
	"M2 Ultra": {gbs: 800},
	"M3":       {gbs: 100},
	"M3 Pro":   {gbs: 150},
	"M3 Max":   {gbs: 400, byCores: map[int]float64{30: 300}},
	"M3 Ultra": {gbs: 819},
	"M4":       {gbs: 120},
	"M4 Pro":   {gbs: 273},
	"M4 Max":   {gbs: 546, byCores: map[int]float64{32: 410}},
	"M5":       {gbs: 153},
	"M5 Pro":   {gbs: 307},
	"M5 Max":   {gbs: 614},
}

// PeakBandwidth returns the memory-bandwidth limit (GB/s) of an Apple chip
// by its Metal device name ("Apple M2 Pro") and GPU core count (0 if
// unknown: the chip's larger configuration). ok is false for chips not in
// the table (and for the emulator), whose share of the limit is then not
// reported.
func PeakBandwidth(chip string, gpuCores int) (gbs float64, ok bool) {
	name := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(chip), "Apple"))
	e, ok := peakBandwidth[name]
	if !ok {
		return 0, false
	}
	if v, ok := e.byCores[gpuCores]; ok {
		return v, true
	}
	return e.gbs, true
}
