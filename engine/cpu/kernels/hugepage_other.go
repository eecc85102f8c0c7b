//go:build !linux

package kernels

// allocPacked returns a zeroed buffer for packed weights (huge pages are
// asked for on Linux only: hugepage_linux.go).
func allocPacked(n int) []byte { return make([]byte, n) }
