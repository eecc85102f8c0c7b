package cpu

import (
	"math/bits"
	"sync"
)

// tensorPool keeps the memory of released activations of poolMinFloats
// and more for the next NewTensor of their size class (capacities are
// powers of two), up to poolMaxBytes in all. A decode step allocates the
// same big tensors every token (the logits: 1 MB at a 248k vocabulary);
// fresh from the heap each one cost its page faults again, ~0.6 ms of a
// 35b token on the thread that the other workers wait for. A prefill pass
// of 512 tokens releases 31-170 MiB (qwen3-30b-a3b to qwen3.5-9b), which
// the next pass takes again instead of faulting it in (qwen3.6-35b-a3b:
// 11.7k → 4.4k minor faults a pass at 64 MiB → 256 MiB). Fresh buffers
// on transparent huge pages (kernels.AdviseHuge) took fewer faults but
// more CPU in a process's first pass (qwen3-30b-a3b: 404-409 → 425-447
// ms), so they stay on the heap's pages.
type tensorPool struct {
	mu    sync.Mutex
	free  [64][][]float32 // by log2 of the capacity
	bytes int             // held in free
}

const (
	poolMinFloats = 16 << 10 // 64 KiB: smaller ones come from the allocator's caches
	poolMaxBytes  = 256 << 20
)

// get returns a zeroed buffer of n floats (capacity its size class),
// reused when one is free.
func (p *tensorPool) get(n int) []float32 {
	if n < poolMinFloats {
		return make([]float32, n)
	}
	c := bits.Len(uint(n - 1))
	p.mu.Lock()
	if k := len(p.free[c]); k > 0 {
		d := p.free[c][k-1]
		p.free[c] = p.free[c][:k-1]
		p.bytes -= 4 * cap(d)
		p.mu.Unlock()
		d = d[:n]
		clear(d)
		return d
	}
	p.mu.Unlock()
	return make([]float32, n, 1<<c)
}

// put keeps d for a later get of its size class, while the pool holds
// less than poolMaxBytes.
func (p *tensorPool) put(d []float32) {
	c := cap(d)
	if c < poolMinFloats || c&(c-1) != 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes+4*c > poolMaxBytes {
		return
	}
	l := bits.Len(uint(c - 1))
	p.free[l] = append(p.free[l], d[:0])
	p.bytes += 4 * c
}
