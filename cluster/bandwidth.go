package cluster

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// MeasureBandwidth estimates this machine's memory bandwidth in MB/s
// (10^6 bytes) by a streaming read: one goroutine per CPU sums its share of
// a buffer of twice the last-level cache (64–512 MiB), pass after pass,
// and the best pass counts. It is what a memory-bound decode step, which
// streams the weights with every core, can get. It takes about budget in
// all (~150 ms at worker start), first touch of the pages included, plus
// at most one pass; a machine too busy to fault the buffer in within the
// budget reads as 0 (unknown: a figure measured under such load would be
// far too low, and unknown puts placement back on the memory rule).
func MeasureBandwidth(budget time.Duration) int64 {
	// Twice the last-level cache, so that the passes read memory, within
	// bounds that keep the page faults of the first touch short.
	size := min(max(2*lastLevelCache(), 64<<20), 512<<20)
	deadline := time.Now().Add(budget)
	buf := make([]uint64, size/8)
	threads := max(1, min(runtime.GOMAXPROCS(0), 64))
	parts := make([][]uint64, threads)
	for i := range parts {
		parts[i] = buf[i*len(buf)/threads : (i+1)*len(buf)/threads]
	}
	// Fault the pages in (in parallel, as the reads will be), so the
	// timed passes read memory, not the zero page; give up at the
	// deadline.
	var late atomic.Bool
	each(parts, func(p []uint64) uint64 {
		for i := 0; i < len(p); i += 512 {
			p[i] = uint64(i)
			if i%(1<<21) == 0 && time.Now().After(deadline) {
				late.Store(true)
				return 0
			}
		}
		return 0
	})
	if late.Load() {
		return 0
	}
	// At least one pass; another only while one more of the best so far
	// still ends before the deadline.
	var best time.Duration
	for {
		t0 := time.Now()
		each(parts, sumWords)
		if d := time.Since(t0); best == 0 || d < best {
			best = d
		}
		if time.Now().Add(best).After(deadline) {
			break
		}
	}
	if best <= 0 {
		return 0
	}
	return int64(float64(size) / best.Seconds() / 1e6)
}

// sinkWords keeps the sums alive so the compiler cannot drop the reads.
var sinkWords atomic.Uint64

// each runs f over every part in its own goroutine and waits for all.
func each(parts [][]uint64, f func([]uint64) uint64) {
	var wg sync.WaitGroup
	sums := make([]uint64, len(parts))
	for i := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sums[i] = f(parts[i])
		}()
	}
	wg.Wait()
	for _, s := range sums {
		sinkWords.Add(s)
	}
}

// sumWords reads every word of p with four independent sums (one
// dependency chain would bound the loop by add latency, not memory).
func sumWords(p []uint64) uint64 {
	var a, b, c, d uint64
	i := 0
	for ; i+4 <= len(p); i += 4 {
		a += p[i]
		b += p[i+1]
		c += p[i+2]
		d += p[i+3]
	}
	for ; i < len(p); i++ {
		a += p[i]
	}
	return a + b + c + d
}
