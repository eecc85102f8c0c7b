package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/metrics"
	"github.com/macpool/macpool/prefix"
	"github.com/macpool/macpool/worker"
)

// convJob is turn `turns` of conversation conv: user questions (the last
// of words words, the others of 3), with an assistant answer between them.
func convJob(id string, conv, turns, words, maxTokens int) *job.Job {
	var msgs []openai.ChatMessage
	for i := 0; i < turns; i++ {
		q := make([]string, 3)
		if i == turns-1 {
			q = make([]string, words)
		}
		for j := range q {
			q[j] = fmt.Sprintf("c%dq%dw%d", conv, i, j)
		}
		msgs = append(msgs, openai.ChatMessage{Role: "user", Content: openai.TextContent(strings.Join(q, " "))})
		if i < turns-1 {
			msgs = append(msgs, openai.ChatMessage{Role: "assistant", Content: openai.TextContent(fmt.Sprintf("answer %d of %d", i, conv))})
		}
	}
	job := chatJob(id, "", "", maxTokens)
	job.Chat.Messages = msgs
	return job
}

// lastKey is the deepest prefix key of a job (what its worker advertises).
func lastKey(job *job.Job) uint64 {
	k := prefix.Chat(job.Chat)
	return k[len(k)-1]
}

func routingCluster(t *testing.T, tokenDelay time.Duration) (*coordinator.Coordinator, map[string]*worker.Worker, *metrics.Registry) {
	t.Helper()
	cfg := coordConfig(t, "coord-1", nil)
	cfg.Metrics = metrics.New()
	c, _ := startCoordinator(t, cfg)
	ws := map[string]*worker.Worker{}
	for _, name := range []string{"worker-a", "worker-b"} {
		ws[name], _ = startWorker(t, name, c.GossipAddr(), 1, worker.WithPrefixKeys(&worker.TestEngine{TokenDelay: tokenDelay}))
	}
	waitWorkers(t, c, 2)
	return c, ws, cfg.Metrics
}

// TestPrefixRoutingFollowUp: the follow-up turn of each of six
// conversations goes to the worker that served its first turn. The queue
// alone hands sequential jobs to the two idle workers alternately, so the
// follow-ups are sent grouped by first worker: without routing at most
// half of them would land right.
func TestPrefixRoutingFollowUp(t *testing.T) {
	c, ws, reg := routingCluster(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := map[int]string{}
	for conv := 0; conv < 6; conv++ {
		job := convJob(fmt.Sprint("first-", conv), conv, 1, 3, 4)
		r, err := submit(ctx, c, job)
		if err != nil || r.err != nil {
			t.Fatalf("first turn %d: %v %v", conv, err, r.err)
		}
		first[conv] = r.worker
		eventually(t, 5*time.Second, "prefix summary of "+r.worker, func() bool { return c.PrefixKnown(r.worker, testModel, lastKey(job)) })
	}
	t.Logf("first turns: %v", first)
	order := []int{0, 1, 2, 3, 4, 5}
	sort.SliceStable(order, func(i, j int) bool { return first[order[i]] < first[order[j]] })
	for _, conv := range order {
		r, err := submit(ctx, c, convJob(fmt.Sprint("second-", conv), conv, 2, 3, 4))
		if err != nil || r.err != nil {
			t.Fatalf("follow-up %d: %v %v", conv, err, r.err)
		}
		if r.worker != first[conv] {
			t.Errorf("follow-up of conversation %d: served by %s, want %s (its first turn's worker)", conv, r.worker, first[conv])
		}
		// The next follow-up may be for the same worker: its slot frees
		// just after the client saw the end (a loaded box may take longer
		// than the worker waits for it before answering busy).
		eventually(t, 5*time.Second, r.worker+" idle", func() bool { return ws[r.worker].Running() == 0 })
	}
	if st := c.RouteStats(); st.Taken < 6 {
		t.Errorf("route stats %+v: want at least 6 offers taken", st)
	}
	if v, ok := scrape(t, reg, coordinator.RouteMetric+`{outcome="taken"}`); !ok || v < 6 {
		t.Errorf("/metrics %s{outcome=taken}: got %v (found %v), want ≥ 6", coordinator.RouteMetric, v, ok)
	}
}

// TestPrefixRoutingBusyWorker: while the worker holding a conversation's
// prefix is busy, its next turn goes to the other worker.
func TestPrefixRoutingBusyWorker(t *testing.T) {
	c, ws, _ := routingCluster(t, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job := convJob("first", 0, 1, 3, 2)
	r, err := submit(ctx, c, job)
	if err != nil || r.err != nil {
		t.Fatalf("first turn: %v %v", err, r.err)
	}
	holder := r.worker
	eventually(t, 5*time.Second, "prefix summary", func() bool { return c.PrefixKnown(holder, testModel, lastKey(job)) })
	eventually(t, 5*time.Second, holder+" idle", func() bool { return ws[holder].Running() == 0 })

	// A long second turn occupies the holder's only slot.
	long, err := c.Submit(ctx, convJob("long", 0, 2, 60, 60))
	if err != nil {
		t.Fatal(err)
	}
	longDone := make(chan result, 1)
	go func() { r, _ := collect(ctx, long); longDone <- r }()
	eventually(t, 5*time.Second, holder+" busy", func() bool { return ws[holder].Running() == 1 })

	r, err = submit(ctx, c, convJob("third", 0, 3, 3, 2))
	if err != nil || r.err != nil {
		t.Fatalf("third turn: %v %v", err, r.err)
	}
	if r.worker == holder {
		t.Errorf("third turn served by the busy holder %s, want the other worker", holder)
	}
	if lr := <-longDone; lr.worker != holder || lr.err != nil {
		t.Errorf("long turn: served by %s (err %v), want the holder %s", lr.worker, lr.err, holder)
	}
	if st := c.RouteStats(); st.Busy < 1 {
		t.Errorf("route stats %+v: want a busy answer", st)
	}
}

// ghost is a worker that gossips (ready, one free slot) and advertises a
// prefix but never pulls: it died, or takes offers and then vanishes.
func ghost(t *testing.T, c *coordinator.Coordinator, nc *nats.Conn, keys []uint64) {
	t.Helper()
	gc := cluster.FastConfig()
	gc.Name = "ghost"
	gc.Join = []string{c.GossipAddr()}
	gc.Meta = cluster.Meta{Role: cluster.RoleWorker, Models: []string{testModel}, Slots: 1, Free: 1, Ready: true}
	gc.Logger = testLogger(t)
	ml, err := cluster.New(gc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ml.Close() })
	b, _ := json.Marshal(prefix.Summary{Node: "ghost", Model: testModel, Keys: keys})
	eventually(t, 5*time.Second, "ghost's summary", func() bool {
		nc.Publish(cluster.PrefixSubject(testModel, "ghost"), b)
		nc.Flush()
		return c.PrefixKnown("ghost", testModel, keys[len(keys)-1])
	})
	waitWorkers(t, c, 2)
}

// TestPrefixRoutingLosesNoJob: a job routed to a prefix holder that is
// gone (no answer) or that takes it and vanishes before starting it still
// runs, on the live worker.
func TestPrefixRoutingLosesNoJob(t *testing.T) {
	for _, takes := range []bool{false, true} {
		t.Run(fmt.Sprintf("takes=%v", takes), func(t *testing.T) {
			c, _ := startCoordinator(t, coordConfig(t, "coord-1", nil))
			live, _ := startWorker(t, "live", c.GossipAddr(), 1, worker.WithPrefixKeys(&worker.TestEngine{}))
			waitWorkers(t, c, 1)
			nc, err := nats.Connect(c.NATSURL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if takes {
				sub, err := nc.Subscribe(cluster.OfferSubject(testModel, "ghost"), func(m *nats.Msg) { m.Respond([]byte(cluster.OfferTaken)) })
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Unsubscribe()
			}
			job := convJob("follow-up", 7, 2, 3, 3)
			ghost(t, c, nc, prefix.Chat(job.Chat)[:1])

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			r, err := submit(ctx, c, job)
			if err != nil || r.err != nil {
				t.Fatalf("follow-up: %v %v", err, r.err)
			}
			if r.worker != live.Name() || r.text == "" {
				t.Errorf("follow-up: got %+v, want text from %s", r, live.Name())
			}
			st := c.RouteStats()
			t.Logf("served after %v, route stats %+v", time.Since(start), st)
			if st.Offered < 1 {
				t.Errorf("route stats %+v: the ghost was not offered the job", st)
			}
			if takes && st.Fallback != 1 {
				t.Errorf("route stats %+v: want 1 fallback to the queue", st)
			}
			if !takes && st.Busy < 1 {
				t.Errorf("route stats %+v: want the unanswered offer counted", st)
			}
		})
	}
}

// countingEngine is the test engine that records how many jobs ran at once.
type countingEngine struct {
	worker.TestEngine
	mu        sync.Mutex
	now, peak int
}

func (e *countingEngine) GenerateResume(ctx context.Context, job *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error {
	e.mu.Lock()
	e.now++
	e.peak = max(e.peak, e.now)
	e.mu.Unlock()
	defer func() { e.mu.Lock(); e.now--; e.mu.Unlock() }()
	return e.TestEngine.GenerateResume(ctx, job, r, emit)
}

// TestPrefixRoutingKeepsSlotBound: an offered job takes the slot whose
// pull loop waits on the queue; a queued job that reaches that loop
// meanwhile goes back to the queue and runs after it, so a one-slot worker
// never runs two jobs at once.
func TestPrefixRoutingKeepsSlotBound(t *testing.T) {
	c, _ := startCoordinator(t, coordConfig(t, "coord-1", nil))
	eng := &countingEngine{TestEngine: worker.TestEngine{TokenDelay: 10 * time.Millisecond}}
	w, _ := startWorker(t, "worker-1", c.GossipAddr(), 1, worker.WithPrefixKeys(eng))
	waitWorkers(t, c, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := convJob("first", 0, 1, 3, 2)
	if r, err := submit(ctx, c, first); err != nil || r.err != nil {
		t.Fatalf("first turn: %v %v", err, r.err)
	}
	eventually(t, 5*time.Second, "prefix summary", func() bool { return c.PrefixKnown(w.Name(), testModel, lastKey(first)) })
	eventually(t, 5*time.Second, "worker idle", func() bool { return w.Running() == 0 })

	long, err := c.Submit(ctx, convJob("long", 0, 2, 30, 30))
	if err != nil {
		t.Fatal(err)
	}
	longDone := make(chan result, 1)
	go func() { r, _ := collect(ctx, long); longDone <- r }()
	eventually(t, 5*time.Second, "long turn running", func() bool { return w.Running() == 1 })
	other, err := submit(ctx, c, chatJob("other", "", "unrelated words here", 3))
	if err != nil || other.err != nil || other.text != "unrelated words here" {
		t.Fatalf("queued job: %+v %v", other, err)
	}
	if lr := <-longDone; lr.err != nil || lr.worker != w.Name() {
		t.Fatalf("long turn: %+v", lr)
	}
	if st := c.RouteStats(); st.Taken < 1 {
		t.Errorf("route stats %+v: the long turn was not offered", st)
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if eng.peak != 1 {
		t.Errorf("a one-slot worker ran %d jobs at once, want 1", eng.peak)
	}
}

// TestPrefixRoutingConcurrentConversations: 8 conversations of 4 turns
// each at once on two two-slot workers. Every turn completes with the right
// text, no worker ever runs more than its 2 slots, and follow-ups mostly
// stay with the worker of the turn before (logged; a busy holder sends one
// to the other worker).
func TestPrefixRoutingConcurrentConversations(t *testing.T) {
	c, _ := startCoordinator(t, coordConfig(t, "coord-1", nil))
	engines := map[string]*countingEngine{}
	for _, name := range []string{"worker-a", "worker-b"} {
		engines[name] = &countingEngine{TestEngine: worker.TestEngine{TokenDelay: 2 * time.Millisecond}}
		startWorker(t, name, c.GossipAddr(), 2, worker.WithPrefixKeys(engines[name]))
	}
	waitWorkers(t, c, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const convs, turns = 8, 4
	var mu sync.Mutex
	stayed, moved := 0, 0
	var wg sync.WaitGroup
	for conv := 0; conv < convs; conv++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prev := ""
			for turn := 1; turn <= turns; turn++ {
				job := convJob(fmt.Sprintf("c%d-t%d", conv, turn), conv, turn, 3, 3)
				r, err := submit(ctx, c, job)
				want := fmt.Sprintf("c%dq%dw0 c%dq%dw1 c%dq%dw2", conv, turn-1, conv, turn-1, conv, turn-1)
				if err != nil || r.err != nil || r.text != want {
					t.Errorf("conversation %d turn %d: got %q (%v %v), want %q", conv, turn, r.text, err, r.err, want)
					return
				}
				mu.Lock()
				if prev != "" {
					if r.worker == prev {
						stayed++
					} else {
						moved++
					}
				}
				mu.Unlock()
				prev = r.worker
				// The next turn comes once the holder can know this one
				// (polled here: t.Fatal is for the test's goroutine).
				for deadline := time.Now().Add(5 * time.Second); !c.PrefixKnown(r.worker, testModel, lastKey(job)); {
					if time.Now().After(deadline) {
						t.Errorf("conversation %d turn %d: no prefix summary from %s", conv, turn, r.worker)
						return
					}
					time.Sleep(5 * time.Millisecond) // polling interval
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("follow-ups: %d stayed on their worker, %d moved; route stats %+v", stayed, moved, c.RouteStats())
	for name, e := range engines {
		e.mu.Lock()
		if e.peak > 2 {
			t.Errorf("%s ran %d jobs at once, want at most its 2 slots", name, e.peak)
		}
		e.mu.Unlock()
	}
	if st := c.RouteStats(); st.Taken == 0 {
		t.Errorf("route stats %+v: no offer taken", st)
	}
}
