//go:build !linux

package kernels

// allocPacked returns a zeroed buffer for packed weights (huge pages are
// asked for on Linux only: hugepage_linux.go).
func allocPacked(n int) []byte { return make([]byte, n) }

// AdviseHuge: transparent huge pages are a Linux hint (hugepage_linux.go).
func AdviseHuge([]byte) {}
