package cpu

import (
	"os"
	"syscall"
	"unsafe"
)

// hugeKV: KV block stores on transparent huge pages (a variable for A/B
// benchmarks).
var hugeKV = true

// adviseHuge puts a KV block store that has not been written yet on
// transparent huge pages where the system gives them (THP "madvise" or
// "always"; best effort, failures ignored): its whole 4 KiB pages are first
// dropped (MADV_DONTNEED: they read back as zeros; the Go heap zeroes
// memory it reuses, which would leave it resident in 4 KiB pages), then
// advised MADV_HUGEPAGE, so first touches fault in 2 MiB pages. Stores
// under 4 MiB are left alone.
func adviseHuge(p unsafe.Pointer, bytes int) {
	if !hugeKV || bytes < 4<<20 {
		return
	}
	ps := uintptr(os.Getpagesize())
	start := (uintptr(p) + ps - 1) &^ (ps - 1)
	end := (uintptr(p) + uintptr(bytes)) &^ (ps - 1)
	if end <= start {
		return
	}
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, start, end-start, syscall.MADV_DONTNEED)
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, start, end-start, 14 /* MADV_HUGEPAGE, not in package syscall */)
}
