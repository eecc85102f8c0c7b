package cpu

import "testing"

// TestTensorPool: a released buffer of a size class comes back for the
// next tensor of that class, zeroed and of the asked length; small
// buffers and what exceeds poolMaxBytes are not kept.
func TestTensorPool(t *testing.T) {
	var p tensorPool
	a := p.get(100_000) // class 2^17
	if len(a) != 100_000 || cap(a) != 1<<17 {
		t.Fatalf("get(100000): len %d cap %d, want 100000, %d", len(a), cap(a), 1<<17)
	}
	for i := range a {
		a[i] = 1
	}
	p.put(a)
	b := p.get(70_000)
	if &b[0] != &a[0] {
		t.Fatal("a released buffer of the class was not reused")
	}
	if len(b) != 70_000 {
		t.Fatalf("len %d, want 70000", len(b))
	}
	for i, v := range b {
		if v != 0 {
			t.Fatalf("reused buffer not zeroed at %d: %v", i, v)
		}
	}
	if c := p.get(100_000); &c[0] == &a[0] {
		t.Fatal("a buffer in use was handed out twice")
	}

	small := p.get(1000)
	p.put(small)
	if p.bytes != 0 {
		t.Fatalf("a %d-float buffer was pooled", len(small))
	}

	const bigBytes = 16 << 20
	keep := poolMaxBytes / bigBytes
	var big [][]float32
	for range keep + 1 { // one more than poolMaxBytes holds
		big = append(big, p.get(bigBytes/4))
	}
	for _, d := range big {
		p.put(d)
	}
	if p.bytes > poolMaxBytes {
		t.Fatalf("pool holds %d bytes, more than %d", p.bytes, poolMaxBytes)
	}
	if p.bytes != keep*bigBytes {
		t.Fatalf("pool holds %d bytes, want %d × 16 MiB", p.bytes, keep)
	}
}
