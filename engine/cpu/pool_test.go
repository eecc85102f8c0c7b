package cpu

import (
	"sync/atomic"
	"testing"
)

// TestParallelCoversOnce: every index of many loops of varied sizes is
// visited exactly once, with the workers spinning, parked and woken.
func TestParallelCoversOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 5} {
		b, err := New(Config{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		for it := range 2000 {
			n := 1 + it*37%1000
			hits := make([]atomic.Int32, n)
			b.parallel(n, 1+it%7, func(lo, hi, w int) {
				if w < 0 || w >= threads {
					t.Errorf("worker %d of %d", w, threads)
				}
				for i := lo; i < hi; i++ {
					hits[i].Add(1)
				}
			})
			for i := range hits {
				if got := hits[i].Load(); got != 1 {
					t.Fatalf("threads %d loop %d: index %d visited %d times, want 1", threads, it, i, got)
				}
			}
			if it%500 == 499 { // let the workers park
				for range 3 {
					b.parallel(2, 1, func(int, int, int) {})
				}
			}
		}
		b.Close()
		b.Close()
	}
}

// BenchmarkParallelDispatch: the cost of one near-empty parallel op (what
// decode pays ~300 times per token on top of the work).
func BenchmarkParallelDispatch(b *testing.B) {
	be, err := New(Config{Threads: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	var sink atomic.Int64
	for b.Loop() {
		be.parallel(64, 1, func(lo, hi, _ int) { sink.Add(int64(hi - lo)) })
	}
}
