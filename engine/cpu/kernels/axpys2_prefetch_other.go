//go:build !amd64

package kernels

import "unsafe"

func prefetchRows(p unsafe.Pointer, rows, strideBytes, lines int) {}
