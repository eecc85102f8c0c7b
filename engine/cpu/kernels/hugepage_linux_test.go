package kernels

import "testing"

// TestAllocPackedSizes: buffers of every size class (make, slab, own
// buffer), in an order where one is larger than a young slab, come back
// with the asked length, zeroed, and do not overlap.
func TestAllocPackedSizes(t *testing.T) {
	slab.Lock()
	slab.free, slab.next = nil, 0 // as in a fresh process: the first slab is young
	slab.Unlock()
	sizes := []int{slabFirst + 1<<20, 100, slabMin, 1 << 20, ownFrom - 64, 3 << 20, ownFrom, ownFrom + 5}
	var bufs [][]byte
	for _, n := range sizes {
		b := allocPacked(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("allocPacked(%d): len %d cap %d", n, len(b), cap(b))
		}
		for i, v := range b {
			if v != 0 {
				t.Fatalf("allocPacked(%d): byte %d = %d, want 0", n, i, v)
			}
		}
		for i := range b {
			b[i] = byte(len(bufs) + 1)
		}
		bufs = append(bufs, b)
	}
	for k, b := range bufs { // a later buffer overlapping an earlier one overwrote it
		for i, v := range b {
			if v != byte(k+1) {
				t.Fatalf("buffer %d (%d bytes): byte %d = %d, want %d", k, len(b), i, v, k+1)
			}
		}
	}
}
