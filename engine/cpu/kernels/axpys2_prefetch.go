package kernels

// Software prefetch for the decode attention.

import "unsafe"

// PrefetchF16 asks for rows rows of cols f16 values, row r at
// v[r*stride:], to be brought into the cache (a hint: no effect on
// results; nothing where there is no prefetch instruction). v must hold
// (rows-1)*stride+cols values. Rows are taken as aligned as the first.
func PrefetchF16(v []uint16, rows, stride, cols int) {
	if rows <= 0 || cols <= 0 {
		return
	}
	_ = v[(rows-1)*stride+cols-1]
	p := unsafe.Pointer(&v[0])
	prefetchRows(p, rows, 2*stride, (int(uintptr(p))&63+2*cols+63)/64)
}
