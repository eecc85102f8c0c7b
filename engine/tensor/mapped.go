package tensor

// Read-only file mappings. A loader that memory-maps a
// checkpoint registers the mapping; a backend that keeps its own copy of a
// tensor (repacked or quantized at upload) then calls DropPages on the
// tensor's bytes so the mapped pages stop counting in the process's resident
// memory (they stay in the OS page cache, and are faulted back in from it
// if read again). Without this a packed model is resident twice: issue #4
// asks for a resident size within 10% of the file size.

import "sync"

var mapped struct {
	sync.Mutex
	spans [][2]uintptr // [start, end) of registered mappings
}

func span(b []byte) (uintptr, uintptr) {
	if len(b) == 0 {
		return 0, 0
	}
	p := uintptrOf(b)
	return p, p + uintptr(len(b))
}

// RegisterMapped records b as a read-only, shared file mapping whose pages
// may be dropped (MAP_SHARED, PROT_READ: dropping never loses data).
func RegisterMapped(b []byte) {
	s, e := span(b)
	if s == e {
		return
	}
	mapped.Lock()
	mapped.spans = append(mapped.spans, [2]uintptr{s, e})
	mapped.Unlock()
}

// UnregisterMapped forgets b (before it is unmapped).
func UnregisterMapped(b []byte) {
	s, e := span(b)
	mapped.Lock()
	defer mapped.Unlock()
	for i, sp := range mapped.spans {
		if sp == [2]uintptr{s, e} {
			mapped.spans = append(mapped.spans[:i], mapped.spans[i+1:]...)
			return
		}
	}
}

// DropPages releases the whole pages of b from this process's resident set
// when b lies inside a registered mapping, and reports whether it did. Other
// memory (heap, anonymous maps) is never touched.
func DropPages(b []byte) bool {
	s, e := span(b)
	if s == e {
		return false
	}
	mapped.Lock()
	inside := false
	for _, sp := range mapped.spans {
		if s >= sp[0] && e <= sp[1] {
			inside = true
			break
		}
	}
	mapped.Unlock()
	if !inside {
		return false
	}
	return dropPages(b)
}
