package kernels

import "unsafe"

func prefetchRows(p unsafe.Pointer, rows, strideBytes, lines int) {
	prefetchRowsT0(p, rows, strideBytes, lines)
}

//go:noescape
func prefetchRowsT0(p unsafe.Pointer, rows, strideBytes, lines int)
