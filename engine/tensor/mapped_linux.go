package tensor

import (
	"os"
	"syscall"
	"unsafe"
)

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// dropPages madvises MADV_DONTNEED on the whole pages inside b.
func dropPages(b []byte) bool {
	ps := uintptr(os.Getpagesize())
	s, e := uintptrOf(b), uintptrOf(b)+uintptr(len(b))
	s0, e0 := (s+ps-1)&^(ps-1), e&^(ps-1)
	if e0 <= s0 {
		return false
	}
	return syscall.Madvise(b[s0-s:e0-s], syscall.MADV_DONTNEED) == nil
}
