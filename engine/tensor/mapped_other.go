//go:build !linux

package tensor

import "unsafe"

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// dropPages does nothing outside Linux (resident accounting of file pages
// differs; the pages are reclaimed under memory pressure anyway).
func dropPages([]byte) bool { return false }
