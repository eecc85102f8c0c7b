//go:build !unix

package bench

// processCPU is not measured here.
func processCPU() float64 { return 0 }
