package cpu

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks for transparent huge pages (madvise MADV_HUGEPAGE) over
// the whole 4 KB pages of a KV block store that has not been touched yet,
// so its first touches fault in 2 MB pages where the system allows it
// (THP "madvise" or "always"); a hint: failures are ignored. Stores under
// 4 MB are left alone (a huge page would make them resident at once).
func adviseHuge(p unsafe.Pointer, bytes int) {
	if bytes < 4<<20 {
		return
	}
	const page = 4096
	start := (uintptr(p) + page - 1) &^ (page - 1)
	end := (uintptr(p) + uintptr(bytes)) &^ (page - 1)
	if end <= start {
		return
	}
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, start, end-start, 14 /* MADV_HUGEPAGE */)
}
