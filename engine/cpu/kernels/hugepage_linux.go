package kernels

import (
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Packed weights on transparent huge pages. A decode step streams every
// weight byte once; with 4 KiB pages that is a TLB miss (a two-level page
// walk in a VM) every 4 KiB. With THP in "madvise" mode (the usual
// default) only madvised memory gets huge pages, and only its 2 MiB-aligned
// whole pages, which a matrix of a few MiB barely has: so pack allocates
// from slabs (8-32 MiB) shared by consecutive matrices. Measured
// (BenchmarkRowsDRAMHuge, 0.45 GB, one thread, thread CPU time): Q8_0
// 9.0 → 12.7 GB/s, Q4_0 7.5 → 12.6 GB/s for one activation row. The cost
// is at load: faulting in huge pages took this VM 1.5-3 s more per 0.63 GB
// (the hugePages variable turns it off for A/B benchmarks).
const (
	hugePage     = 2 << 20
	madvHugepage = 14 // MADV_HUGEPAGE (not in package syscall)
	// Slabs grow from slabFirst to slabMax (a tiny model takes one small
	// slab). Each is resident up to the end of its last used huge page;
	// its unused tail (< slabMax) counts as live Go heap, so they stay
	// small enough not to move the GC's goal much.
	slabFirst = 8 << 20
	slabMax   = 32 << 20
	// Buffers from ownFrom up get their own aligned allocation; below
	// slabMin they come from make (not worth the rounding).
	ownFrom = 16 << 20
	slabMin = 256 << 10
)

var slab struct {
	sync.Mutex
	free []byte // the unused rest of the current slab (zero, untouched)
	next int    // size of the next slab
}

// allocPacked returns a zeroed buffer of n bytes for packed weights, on
// huge pages where the kernel gives them (best effort). A slab stays
// allocated while any matrix in it is reachable.
func allocPacked(n int) []byte {
	if !hugePages || n < slabMin {
		return make([]byte, n)
	}
	n64 := (n + 63) &^ 63 // keep every buffer cache-line aligned
	if n64 >= ownFrom {
		return hugeBuffer(n64)[:n:n]
	}
	slab.Lock()
	defer slab.Unlock()
	if len(slab.free) < n64 {
		size := max(slab.next, slabFirst)
		slab.next = min(2*size, slabMax)
		slab.free = hugeBuffer(max(size, n64)) // n64 < ownFrom may exceed a young slab
	}
	b := slab.free[:n:n]
	slab.free = slab.free[n64:]
	return b
}

// hugeBuffer allocates n bytes (a multiple of 64) advised to huge pages
// (AdviseHuge): packing faults it in as huge pages and what stays unused
// (a slab's tail) is not resident.
func hugeBuffer(n int) []byte {
	b := make([]byte, n)
	AdviseHuge(b)
	return b
}

// AdviseHuge puts memory that holds nothing yet on transparent huge pages
// where the system gives them (THP "madvise" or "always"; best effort):
// its whole pages are dropped first (MADV_DONTNEED: they read back as
// zeros; the Go heap zeroes memory it reuses, which would leave it resident
// in 4 KiB pages), then its 2 MiB-aligned interior is advised
// MADV_HUGEPAGE, so that first touches fault in 2 MiB pages (the < 2 MiB
// before the first boundary stays in 4 KiB pages: no alignment padding
// that the Go heap would count as live). Used for packed weights and the
// engine/cpu KV block stores.
func AdviseHuge(b []byte) {
	n := uintptr(len(b))
	if n == 0 {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	ps := uintptr(os.Getpagesize())
	if s, e := (p+ps-1)&^(ps-1), (p+n)&^(ps-1); e > s {
		_ = syscall.Madvise(b[s-p:e-p], syscall.MADV_DONTNEED)
	}
	if s, e := (p+hugePage-1)&^(hugePage-1), (p+n)&^(hugePage-1); e > s {
		_ = syscall.Madvise(b[s-p:e-p], madvHugepage)
	}
}
