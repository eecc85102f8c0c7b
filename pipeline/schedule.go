package pipeline

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/macpool/macpool/runner"
)

// The Head's schedule (docs/engine.md, "Pipeline execution"). The runner
// has one scheduler lane per stage; each lane's pass is one micro-batch.
// With L lanes running sequences, the Head runs their passes as m groups
// per ring turn (1 ≤ m ≤ L): the passes of a group are merged into one
// pass (one stage-0 pass, one data frame, one pass per later stage), so a
// stage reads its weights m times per ring turn instead of L times.
//
//   - m = L: every lane's pass goes alone; L micro-batches are in flight,
//     every stage busy. Right when the stages have their own memory
//     bandwidth (separate Macs) and a pass's cost grows with its rows.
//   - m = 1: all lanes' passes go as one; the stages take turns. Right
//     when a pass costs the same for 1 or 8 rows (reading the weights) and
//     the stages share one memory bus (stages on one host), where L
//     micro-batches cost L weight reads of the same bus.
//
// Groups form at the Head's gate: at most m in flight, each of up to
// ⌈L/m⌉ lanes' passes; a lane whose pass would make an (m+1)-th group
// waits for a group to come back and goes with its lanes.
//
// Which one is faster depends on the machines, so the Head measures it:
// for each load (sequences, lanes) it measures decode tokens per second
// under each m (a window of decode-only passes, after a turn to settle),
// then keeps the fastest (fewer groups than lanes only when shapeMargin
// faster), and probes another m every shapeProbe. A load
// not measured yet starts with m = L (what a pipeline of separate
// machines wants). MemberConfig.Groups fixes m instead.

const (
	// groupHold bounds how long a group's first pass waits for the other
	// lanes' passes to join (their sequences come back within about a
	// millisecond of the previous pass; a slow consumer must not hold the
	// others longer).
	groupHold = 4 * time.Millisecond
	// shapeProbe is how often the schedule tries another m than the best
	// one measured for the load (machines' load and speed change).
	shapeProbe = 20 * time.Second
	// shapeTurns is the ring turns (steps per sequence) a measuring
	// window counts, after one turn to settle.
	shapeTurns = 3
	// shapeMargin is how much faster fewer groups than lanes must measure
	// to be chosen: one group per lane is what separate machines want,
	// and measurements on one host differ by a few percent between runs.
	shapeMargin = 0.05
)

// call is one lane's pass waiting in, or run by, a group.
type call struct {
	pass   []runner.PassSeq
	rows   int
	logits [][]float32
	toks   []int
	err    error
	done   chan struct{}
}

// group is the passes run as one.
type group struct {
	calls []*call
	rows  int
	want  int           // calls that complete it
	full  chan struct{} // closed when complete (or no more calls may join)
}

// gate forms the groups: at most m in flight, each of up to ⌈L/m⌉ lanes'
// passes. A group's first call (its leader) waits while m groups are in
// flight (the lanes that return from them join it), then up to groupHold
// for lanes that are not in flight and have not joined.
type gate struct {
	mu       sync.Mutex
	open     *group        // the group taking calls, if any
	inflight int           // calls of groups that started
	flying   int           // groups that started
	changed  chan struct{} // closed and replaced when a group finishes
}

// join adds c to the open group, or makes it the leader of a new one of
// want calls. The leader runs the group (wait, start, finish).
func (g *gate) join(c *call, maxRows, want int) (*group, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if o := g.open; o != nil {
		if o.rows+c.rows <= maxRows {
			o.calls = append(o.calls, c)
			o.rows += c.rows
			if len(o.calls) >= o.want {
				close(o.full)
				g.open = nil
			}
			return o, false
		}
		// Too big to merge: the open group takes no more, c leads the next.
		close(o.full)
		g.open = nil
	}
	n := &group{calls: []*call{c}, rows: c.rows, want: want, full: make(chan struct{})}
	if want > 1 {
		g.open = n
	} else {
		close(n.full)
	}
	return n, true
}

// wait is the leader's wait before gr starts: while m groups are in
// flight, then up to hold for lanes (of lanes) neither in flight nor in gr.
func (g *gate) wait(gr *group, m, lanes int, hold time.Duration) {
	g.mu.Lock()
	for g.flying >= m {
		if g.changed == nil {
			g.changed = make(chan struct{})
		}
		ch := g.changed
		g.mu.Unlock()
		<-ch
		g.mu.Lock()
	}
	free := lanes - g.inflight - len(gr.calls)
	g.mu.Unlock()
	select {
	case <-gr.full:
		return
	default:
	}
	if free > 0 {
		t := time.NewTimer(hold)
		select {
		case <-gr.full:
		case <-t.C:
		}
		t.Stop()
	}
}

// start closes gr to new calls and counts it in flight.
func (g *gate) start(gr *group) {
	g.mu.Lock()
	if g.open == gr {
		g.open = nil
		close(gr.full)
	}
	g.inflight += len(gr.calls)
	g.flying++
	g.mu.Unlock()
}

// finish says gr's pass is done.
func (g *gate) finish(gr *group) {
	g.mu.Lock()
	g.inflight -= len(gr.calls)
	g.flying--
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
	g.mu.Unlock()
}

// shapeKey is a load the schedule measures: sequences and busy lanes.
type shapeKey struct{ seqs, lanes int }

type shapeRate struct {
	rate float64 // decode tokens per second
	at   time.Time
}

func (r shapeRate) String() string { return fmt.Sprintf("%.1f", r.rate) }

// shaper chooses the number of groups per ring turn by measurement.
type shaper struct {
	mu    sync.Mutex
	fixed atomic.Int64 // > 0: always this many groups (at most the lanes)
	now   func() time.Time

	key   shapeKey
	m     int
	skip  int       // steps still to settle before the window
	steps int       // steps counted in the window
	t0    time.Time // the window's start (zero: not started)

	rates     map[shapeKey]map[int]shapeRate
	lastProbe map[shapeKey]time.Time
	probe     map[shapeKey]int // round-robin probe position
}

func newShaper(fixed int) *shaper {
	s := &shaper{now: time.Now, rates: map[shapeKey]map[int]shapeRate{},
		lastProbe: map[shapeKey]time.Time{}, probe: map[shapeKey]int{}}
	s.fixed.Store(int64(fixed))
	return s
}

// groups is the number of groups to form for the load k.
func (s *shaper) groups(k shapeKey) int {
	if k.lanes <= 1 {
		return 1
	}
	if f := int(s.fixed.Load()); f > 0 {
		return min(f, k.lanes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k != s.key {
		s.reset(k)
	}
	return s.m
}

// reset starts measuring load k with a newly chosen m.
func (s *shaper) reset(k shapeKey) {
	s.key = k
	s.m = s.choose(k)
	s.restart()
}

// restart starts a new window for the same load and m.
func (s *shaper) restart() {
	s.skip, s.steps, s.t0 = max(s.key.seqs, 1), 0, time.Time{}
}

// choose picks m for load k: one not measured yet (L first, then 1, then
// the rest), a probe every shapeProbe, else the fastest measured.
func (s *shaper) choose(k shapeKey) int {
	rs := s.rates[k]
	cands := []int{k.lanes}
	for m := 1; m < k.lanes; m++ {
		cands = append(cands, m)
	}
	for _, m := range cands {
		if _, ok := rs[m]; !ok {
			return m
		}
	}
	best := s.fastest(k)
	now := s.now()
	if last, ok := s.lastProbe[k]; !ok {
		s.lastProbe[k] = now
	} else if now.Sub(last) >= shapeProbe {
		s.lastProbe[k] = now
		for range cands {
			p := cands[s.probe[k]%len(cands)]
			s.probe[k]++
			if p != best {
				return p
			}
		}
	}
	return best
}

// done records a group's completion at time at: steps sequence steps
// under load k, decode is whether every step was one token (windows count
// decode only: a prompt's pass would be measured as a slow turn).
func (s *shaper) done(k shapeKey, m, steps int, decode bool, at time.Time) {
	if s.fixed.Load() > 0 || k.lanes <= 1 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case k != s.key:
		s.reset(k)
		return
	case m != s.m:
		return // formed before the last choice
	case !decode:
		s.restart()
		return
	}
	if s.skip > 0 {
		s.skip -= steps
		if s.skip <= 0 {
			s.t0 = at
		}
		return
	}
	s.steps += steps
	if s.steps < shapeTurns*max(k.seqs, 1) || !at.After(s.t0) {
		return
	}
	rate := float64(s.steps) / at.Sub(s.t0).Seconds()
	rs := s.rates[k]
	if rs == nil {
		rs = map[int]shapeRate{}
		s.rates[k] = rs
	}
	if old, ok := rs[m]; ok {
		rate = (old.rate + rate) / 2
	}
	rs[m] = shapeRate{rate: rate, at: at}
	s.m = s.choose(k)
	s.restart()
}

// fastest is the fastest m measured for load k (one per lane unless
// another is shapeMargin faster). s.mu is held.
func (s *shaper) fastest(k shapeKey) int {
	rs := s.rates[k]
	best, bestRate := k.lanes, rs[k.lanes].rate*(1+shapeMargin)
	for m := 1; m < k.lanes; m++ {
		if r, ok := rs[m]; ok && r.rate > bestRate {
			best, bestRate = m, r.rate
		}
	}
	return best
}

// best is the number of groups for load k: the fixed one, else the
// fastest measured (0: none measured).
func (s *shaper) best(k shapeKey) int {
	if f := int(s.fixed.Load()); f > 0 {
		return min(f, k.lanes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.rates[k]) == 0 {
		return 0
	}
	return s.fastest(k)
}
