//go:build !linux

package cpu

import "unsafe"

// adviseHuge: transparent huge pages are a Linux hint (paged_linux.go).
func adviseHuge(p unsafe.Pointer, bytes int) {}
