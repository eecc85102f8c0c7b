package pipeline

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/runner"
)

// fakeClock is a shaper's clock that tests move.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// turns feeds the shaper ring turns of load k under its current m, each
// turn taking turn(m): every group of m completes its share of the
// sequences' steps. It returns the m used.
func turns(s *shaper, c *fakeClock, k shapeKey, n int, turn func(m int) time.Duration) int {
	m := s.groups(k)
	for range n {
		m = s.groups(k)
		per := k.seqs / m
		for g := range m {
			c.t = c.t.Add(turn(m) / time.Duration(m))
			steps := per
			if g == m-1 {
				steps = k.seqs - per*(m-1)
			}
			s.done(k, m, steps, true, c.t)
		}
	}
	return m
}

// TestShaperChoosesFastest: for a load, the schedule starts with one
// micro-batch per lane, measures each number of groups once, then keeps
// the fastest; it probes another every shapeProbe and follows a change;
// a new load is measured anew; prompt passes do not count.
func TestShaperChoosesFastest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lanes int
		turn  map[int]time.Duration // ring turn per m
		want  int
	}{
		{"separate machines: all lanes apart", 3, map[int]time.Duration{1: 90 * time.Millisecond, 2: 80 * time.Millisecond, 3: 60 * time.Millisecond}, 3},
		{"shared bus: one group", 3, map[int]time.Duration{1: 60 * time.Millisecond, 2: 80 * time.Millisecond, 3: 90 * time.Millisecond}, 1},
		{"in between", 3, map[int]time.Duration{1: 90 * time.Millisecond, 2: 70 * time.Millisecond, 3: 80 * time.Millisecond}, 2},
		{"two lanes", 2, map[int]time.Duration{1: 50 * time.Millisecond, 2: 70 * time.Millisecond}, 1},
		{"within the margin: one per lane", 2, map[int]time.Duration{1: 68 * time.Millisecond, 2: 70 * time.Millisecond}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &fakeClock{t: time.Unix(1000, 0)}
			s := newShaper(0)
			s.now = c.now
			k := shapeKey{seqs: 8, lanes: tc.lanes}
			if m := s.groups(k); m != tc.lanes {
				t.Fatalf("first choice %d groups, want %d (one per lane)", m, tc.lanes)
			}
			turn := func(m int) time.Duration { return tc.turn[m] }
			tried := map[int]bool{}
			for range 10 * tc.lanes {
				tried[turns(s, c, k, 1, turn)] = true
			}
			if len(tried) != tc.lanes {
				t.Errorf("tried %v, want every m in 1..%d", tried, tc.lanes)
			}
			if m := turns(s, c, k, 8, turn); m != tc.want {
				t.Errorf("settled on %d groups, want %d", m, tc.want)
			}
			// The machines change: the best becomes the slowest. A probe
			// after shapeProbe finds the new best.
			slow := func(m int) time.Duration {
				if m == tc.want {
					return 200 * time.Millisecond
				}
				return tc.turn[m]
			}
			end := c.t.Add(5 * shapeProbe / 2) // between probes
			var m int
			for c.t.Before(end) {
				m = turns(s, c, k, 1, slow)
			}
			if m == tc.want {
				t.Errorf("still %d groups after it became the slowest", m)
			}
		})
	}
}

func TestShaperLoadsAndPrompts(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	s := newShaper(0)
	s.now = c.now
	k := shapeKey{seqs: 6, lanes: 3}
	s.groups(k)
	// Prompt passes restart the window: no rate is stored however long.
	for range 50 {
		c.t = c.t.Add(10 * time.Millisecond)
		s.done(k, 3, 2, false, c.t)
	}
	if len(s.rates[k]) != 0 {
		t.Errorf("rates %v measured from prompt passes", s.rates[k])
	}
	turns(s, c, k, 6, func(int) time.Duration { return 30 * time.Millisecond })
	if len(s.rates[k]) == 0 {
		t.Fatal("no rate after six decode turns")
	}
	// Another load starts with one group per lane again.
	k2 := shapeKey{seqs: 4, lanes: 2}
	if m := s.groups(k2); m != 2 {
		t.Errorf("new load: %d groups, want 2", m)
	}
	// One lane: one group, nothing measured; fixed: that many.
	if m := s.groups(shapeKey{seqs: 3, lanes: 1}); m != 1 {
		t.Errorf("one lane: %d groups", m)
	}
	if m := newShaper(2).groups(shapeKey{seqs: 8, lanes: 3}); m != 2 {
		t.Errorf("fixed 2: %d groups", m)
	}
	if m := newShaper(5).groups(shapeKey{seqs: 8, lanes: 3}); m != 3 {
		t.Errorf("fixed 5 over 3 lanes: %d groups, want 3", m)
	}
}

// TestGateGroups: calls join the open group until it has the calls it
// wants; one that would make it too big closes it and leads the next; a
// leader waits while m groups are in flight, then for lanes that could
// still join (at most the hold), not for lanes in flight.
func TestGateGroups(t *testing.T) {
	var g gate
	a, b, c, d := &call{rows: 1}, &call{rows: 1}, &call{rows: 1}, &call{rows: 1}
	ga, lead := g.join(a, 8, 3)
	if !lead {
		t.Fatal("the first call does not lead")
	}
	if gb, lead := g.join(b, 8, 3); lead || gb != ga {
		t.Fatal("the second call does not join the open group")
	}
	select {
	case <-ga.full:
		t.Fatal("group full at 2 of 3")
	default:
	}
	g.join(c, 8, 3)
	select {
	case <-ga.full:
	default:
		t.Fatal("group not full at 3 of 3")
	}
	g.wait(ga, 1, 3, time.Hour) // full, nothing in flight: no wait
	g.start(ga)
	if g.inflight != 3 || g.flying != 1 {
		t.Errorf("in flight %d calls, %d groups; want 3, 1", g.inflight, g.flying)
	}
	// m = 1 and a group in flight: d's group waits until it is back.
	gd, _ := g.join(d, 8, 4)
	waited := make(chan struct{})
	go func() {
		g.wait(gd, 1, 4, time.Millisecond)
		close(waited)
	}()
	select {
	case <-waited:
		t.Fatal("a second group started with one in flight and m = 1")
	case <-time.After(20 * time.Millisecond):
	}
	g.finish(ga)
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the group did not start once the one in flight was back")
	}
	g.start(gd)
	// m = 2: a group may start beside one in flight, and does not wait
	// for lanes in flight (4 lanes: d in flight, e here, 2 free → hold).
	e := &call{rows: 1}
	ge, _ := g.join(e, 8, 2)
	t0 := time.Now()
	g.wait(ge, 2, 2, time.Hour) // 2 lanes: d in flight, e: none free
	if time.Since(t0) > time.Second {
		t.Error("waited for a lane in flight")
	}
	g.start(ge)
	g.finish(gd)
	g.finish(ge)
	// Too big to merge: the open group closes, the call leads the next.
	f, h := &call{rows: 5}, &call{rows: 5}
	gf, _ := g.join(f, 8, 3)
	gh, lead := g.join(h, 8, 3)
	if !lead || gh == gf {
		t.Fatal("a call over maxRows joined the open group")
	}
	select {
	case <-gf.full:
	default:
		t.Error("the group it could not join still takes calls")
	}
}

// TestHeadMergedPasses: with the lanes' passes merged into one group per
// ring turn (and into two), the Head still generates the whole model's
// token ids and logprobs for concurrent requests (greedy, sampled on the
// last stage, logprobs, two choices): each lane gets its own sequences'
// share of a merged pass's result. The passes did merge.
func TestHeadMergedPasses(t *testing.T) {
	for _, name := range []string{"qwen3", "qwen3_5", "qwen3_moe"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("..", "testdata", "hf", name)
			rc := fixtureRunner(path, engine.Options{})
			whole, err := runner.New(rc, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Close()
			jobs := requests(whole.Model().VocabSize())
			want := runAll(t, whole, jobs, false)
			secret := newSecret(t)
			epoch := uint64(1)
			for _, stages := range splits(whole.Model().Config().NumHiddenLayers) {
				for _, groups := range []int{1, 2} {
					tp := startPipelineWith(t, secret, path, engine.Options{}, stages, epoch, rc, func(_ int, mc *MemberConfig) { mc.Groups = groups })
					epoch++
					sameGenerations(t, runAll(t, tp.head, jobs, true), want)
					if groups == 1 && tp.head.merged.Load() == 0 {
						t.Errorf("%d stages, 1 group: no pass merged two lanes' passes (%d passes)", len(stages), tp.head.groups.Load())
					}
				}
			}
		})
	}
}
