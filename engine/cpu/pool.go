package cpu

// Worker pool (core designed the API). Decode runs ~300
// parallel ops per token, each a few tens of microseconds, so the cost of
// handing an op to the workers and waiting for them must be far below a
// microsecond: a channel send to a parked goroutine plus a WaitGroup wait
// costs 5–50 µs (futex wake-ups), which made two threads slower than one.
//
// Protocol: the caller publishes the job (an immutable *job with atomic
// chunk counters) in b.cur and bumps b.seq; workers spin on b.seq for
// spinFor and then park on their wake channel (spin-then-park). Every
// worker that sees a new seq claims chunks of the job until none is left;
// completion is counted per chunk, so a worker that wakes late (descheduled
// by the OS) finds nothing to claim and the caller never waits for it.
// The caller runs chunks too, then spins until every chunk is done, then
// parks on j.doneCh. Park/wake handshakes use a CAS on a state word so a
// wake-up is never lost and never blocks the sender.

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/macpool/macpool/engine/cpu/kernels"
)

// spinFor is how long an idle worker (or a waiting caller) polls before
// parking: longer than the gaps between the ops of one forward pass, short
// enough that an idle backend gives the cores back at once.
const spinFor = 100 * time.Microsecond

const (
	awake int32 = iota
	parked
)

// job is one parallel loop: chunks of [0, n) handed out by an atomic counter.
type job struct {
	fn      func(lo, hi, worker int)
	n       int
	grain   int
	chunks  int64
	next    atomic.Int64 // next chunk to claim
	done    atomic.Int64 // chunks finished
	waiting atomic.Int32 // awake: caller spinning; parked: caller blocked on doneCh
	doneCh  chan struct{}
}

// run claims and runs chunks; whoever finishes the last one wakes a parked
// caller.
func (j *job) run(w int) {
	for {
		c := j.next.Add(1) - 1
		if c >= j.chunks {
			return
		}
		lo := int(c) * j.grain
		j.fn(lo, min(lo+j.grain, j.n), w)
		if j.done.Add(1) == j.chunks && j.waiting.Load() == parked && j.waiting.CompareAndSwap(parked, awake) {
			j.doneCh <- struct{}{}
		}
	}
}

// worker w (≥ 1) runs published jobs until Close.
func (b *Backend) worker(w int) {
	defer b.wg.Done()
	var seen uint64
	for {
		s := b.seq.Load()
		if s == seen {
			s = b.waitSeq(w, seen)
		}
		seen = s
		if b.closed.Load() {
			return
		}
		if j := b.cur.Load(); j != nil {
			j.run(w)
		}
	}
}

// waitSeq spins, then parks, until b.seq differs from seen.
func (b *Backend) waitSeq(w int, seen uint64) uint64 {
	deadline := time.Now().Add(spinFor)
	for i := 1; ; i++ {
		if s := b.seq.Load(); s != seen {
			return s
		}
		kernels.Pause()
		if i%256 == 0 {
			if time.Now().After(deadline) {
				break
			}
			osYield()
		}
	}
	for {
		st := &b.state[w]
		st.Store(parked)
		if s := b.seq.Load(); s != seen {
			if !st.CompareAndSwap(parked, awake) {
				<-b.wake[w] // a publisher already claimed the wake-up: take it
			}
			return s
		}
		<-b.wake[w]
		if s := b.seq.Load(); s != seen {
			return s
		}
	}
}

// osYield gives the core to another runnable thread, if any (sched_yield):
// on a machine shared with other processes a spinning thread would
// otherwise keep our own other worker, or anyone else, off the core.
// runtime.Gosched does the same for goroutines (GOMAXPROCS below Threads).
func osYield() {
	runtime.Gosched()
	schedYield()
}

// publish makes j the current job and wakes parked workers.
func (b *Backend) publish(j *job) {
	b.cur.Store(j)
	b.seq.Add(1)
	for w := 1; w < b.threads; w++ {
		if st := &b.state[w]; st.Load() == parked && st.CompareAndSwap(parked, awake) {
			b.wake[w] <- struct{}{}
		}
	}
}

// parallel calls fn over chunks of [0, n) of at least minGrain items, on up
// to Threads goroutines, and returns when all are done. worker identifies
// the goroutine (0..Threads-1) for per-worker scratch. Not reentrant: fn
// must not call parallel (a nested call runs serially as worker 0's).
func (b *Backend) parallel(n, minGrain int, fn func(lo, hi, worker int)) {
	if n <= 0 {
		return
	}
	b.parallelGrain(n, max(minGrain, (n+4*b.threads-1)/(4*b.threads), 1), fn)
}

// parallelGrain is parallel with chunks of exactly grain items (the last
// one shorter), for callers that know a better chunk size than ~4 per
// thread.
func (b *Backend) parallelGrain(n, grain int, fn func(lo, hi, worker int)) {
	chunks := (n + grain - 1) / grain
	if b.threads == 1 || chunks == 1 || !b.busy.CompareAndSwap(false, true) {
		fn(0, n, 0)
		return
	}
	defer b.busy.Store(false)
	j := &job{fn: fn, n: n, grain: grain, chunks: int64(chunks), doneCh: b.doneCh}
	b.publish(j)
	j.run(0)
	if j.done.Load() == j.chunks {
		return
	}
	deadline := time.Now().Add(spinFor)
	for i := 1; j.done.Load() != j.chunks; i++ {
		kernels.Pause()
		if i%256 == 0 {
			osYield()
		}
		if i%256 == 0 && !time.Now().Before(deadline) {
			j.waiting.Store(parked)
			if j.done.Load() == j.chunks {
				if !j.waiting.CompareAndSwap(parked, awake) {
					<-j.doneCh // the last worker already claimed the wake-up
				}
				return
			}
			<-j.doneCh
			return
		}
	}
}
