package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/internal/clustertest"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/worker"
)

// externalNATS runs a JetStream NATS server shared by several coordinators.
func externalNATS(t *testing.T) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	return ns.ClientURL()
}

func TestWorkerLeaveGetsNoWork(t *testing.T) {
	c, _ := clustertest.StartCoordinator(t, clustertest.CoordConfig(t, "coord-1", nil))
	w1, _ := clustertest.StartWorker(t, "worker-1", c.GossipAddr(), 2, &worker.TestEngine{})
	w2, stop2 := clustertest.StartWorker(t, "worker-2", c.GossipAddr(), 2, &worker.TestEngine{})
	clustertest.WaitWorkers(t, c, 2)
	stop2() // graceful leave
	clustertest.WaitWorkers(t, c, 1)
	if _, ok := c.Membership().Member(w2.Name()); ok {
		t.Fatalf("worker-2 still a member after leaving")
	}
	served := w2.Served()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 10; i++ {
		r, err := clustertest.Submit(ctx, c, clustertest.ChatJob(fmt.Sprint(i), "", "a b", 10))
		if err != nil || r.Err != nil {
			t.Fatalf("request %d: %v %v", i, err, r.Err)
		}
		if r.Worker != w1.Name() {
			t.Fatalf("request %d served by %s, want %s", i, r.Worker, w1.Name())
		}
	}
	if w2.Served() != served {
		t.Fatalf("departed worker served %d more jobs", w2.Served()-served)
	}
	clustertest.Eventually(t, 5*time.Second, "placement without worker-2", func() bool {
		p := c.State().Placement[clustertest.Model]
		return len(p) == 1 && p[0] == w1.Name()
	})
}

func TestQueueFull429(t *testing.T) {
	cfg := clustertest.CoordConfig(t, "coord-1", nil)
	cfg.QueueLimit = 3
	cfg.KeyQueueLimit = 2
	c, _ := clustertest.StartCoordinator(t, cfg)
	// One slot, slow tokens: the first job runs, the rest wait in the queue.
	w, _ := clustertest.StartWorker(t, "worker-1", c.GossipAddr(), 1, &worker.TestEngine{TokenDelay: 50 * time.Millisecond})
	clustertest.WaitWorkers(t, c, 1)
	ctx := context.Background()
	first, err := c.Submit(ctx, clustertest.ChatJob("run", "flood", "a b c d e f g h", 100))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	clustertest.Eventually(t, 5*time.Second, "the first job running", func() bool { return w.Running() == 1 })
	// The worker acks asynchronously: wait until the queue saw it.
	clustertest.Eventually(t, 5*time.Second, "the first job out of the queue", func() bool { return clustertest.Queued(t, c.NATSURL(), clustertest.Model) == 0 })

	var open []interface{ Close() error }
	defer func() {
		for _, s := range open {
			s.Close()
		}
	}()
	// Per-key bound: key "flood" may queue 2.
	for i := 0; i < 2; i++ {
		s, err := c.Submit(ctx, clustertest.ChatJob("q", "flood", "x", 1))
		if err != nil {
			t.Fatalf("queued %d: %v", i, err)
		}
		open = append(open, s)
	}
	_, err = c.Submit(ctx, clustertest.ChatJob("q", "flood", "x", 1))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.HTTPStatus() != 429 || oe.RetryAfter <= 0 {
		t.Fatalf("third job of one key: got %v, want 429 with Retry-After", err)
	}
	// Another key still gets in (fairness), until the model bound (3) is hit.
	s, err := c.Submit(ctx, clustertest.ChatJob("q", "polite", "x", 1))
	if err != nil {
		t.Fatalf("other key: got %v, want admitted", err)
	}
	open = append(open, s)
	_, err = c.Submit(ctx, clustertest.ChatJob("q", "third", "x", 1))
	if !errors.As(err, &oe) || oe.HTTPStatus() != 429 {
		t.Fatalf("over model bound: got %v, want 429", err)
	}
}

func TestCancelFreesWorker(t *testing.T) {
	c, _ := clustertest.StartCoordinator(t, clustertest.CoordConfig(t, "coord-1", nil))
	w, _ := clustertest.StartWorker(t, "worker-1", c.GossipAddr(), 1, &worker.TestEngine{TokenDelay: time.Second})
	clustertest.WaitWorkers(t, c, 1)
	ctx := context.Background()
	s, err := c.Submit(ctx, clustertest.ChatJob("long", "", "a b c d e f g h i j k l m n o p", 100))
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 5*time.Second, "job running", func() bool { return w.Running() == 1 })
	start := time.Now()
	s.Close() // client went away
	clustertest.Eventually(t, time.Second, "slot freed within 1s of cancel", func() bool { return w.Running() == 0 })
	t.Logf("slot freed %v after cancel", time.Since(start))
	// The freed slot takes new work.
	r, err := clustertest.Submit(ctx, c, clustertest.ChatJob("next", "", "x", 1))
	if err != nil || r.Err != nil || r.Text != "x" {
		t.Fatalf("after cancel: %+v %v", r, err)
	}
}

func TestCancelWhileQueued(t *testing.T) {
	c, _ := clustertest.StartCoordinator(t, clustertest.CoordConfig(t, "coord-1", nil))
	w, _ := clustertest.StartWorker(t, "worker-1", c.GossipAddr(), 1, &worker.TestEngine{TokenDelay: 20 * time.Millisecond})
	clustertest.WaitWorkers(t, c, 1)
	ctx := context.Background()
	busy, err := c.Submit(ctx, clustertest.ChatJob("busy", "", "a b c d e f g h i j", 100))
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 5*time.Second, "job running", func() bool { return w.Running() == 1 })
	queued, err := c.Submit(ctx, clustertest.ChatJob("queued", "", "never", 100))
	if err != nil {
		t.Fatal(err)
	}
	queued.Close()
	if _, err := clustertest.Collect(ctx, busy); err != nil {
		t.Fatal(err)
	}
	r, err := clustertest.Submit(ctx, c, clustertest.ChatJob("after", "", "y", 1))
	if err != nil || r.Text != "y" {
		t.Fatalf("after: %+v %v", r, err)
	}
	// The worker counts a job once its last frame is acknowledged, just
	// after the client got it.
	clustertest.Eventually(t, 2*time.Second, "two jobs served", func() bool { return w.Served() >= 2 })
	if got := w.Served(); got != 2 {
		t.Fatalf("worker served %d jobs, want 2 (the cancelled queued job must not run)", got)
	}
}

func TestRaftLeaderFailover(t *testing.T) {
	url := externalNATS(t)
	coords := make([]*coordinator.Coordinator, 3)
	kills := make([]func(), 3)
	var join []string
	for i := range coords {
		cfg := clustertest.CoordConfig(t, fmt.Sprintf("coord-%d", i), join)
		cfg.NATS = url
		c, err := coordinator.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		coords[i] = c
		stop := clustertest.Run(t, c)
		kills[i] = func() { c.Kill(); stop() }
		join = []string{coords[0].GossipAddr()}
	}
	clustertest.StartWorker(t, "worker-1", coords[1].GossipAddr(), 4, &worker.TestEngine{})
	clustertest.StartWorker(t, "worker-2", coords[2].GossipAddr(), 4, &worker.TestEngine{})
	for _, c := range coords {
		clustertest.WaitWorkers(t, c, 2)
	}
	clustertest.Eventually(t, 10*time.Second, "3 raft voters", func() bool {
		return coords[0].IsLeader() && len(coords[0].RaftServers()) == 3
	})
	// A write on a follower is forwarded to the leader.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := coords[2].RegisterModel(ctx, coordinator.ModelSpec{Name: "extra", Source: "/models/extra"}); err != nil {
		t.Fatalf("follower write: %v", err)
	}
	clustertest.Eventually(t, 5*time.Second, "registry replicated", func() bool {
		_, ok := coords[1].State().Models["extra"]
		return ok
	})

	// Leadership may move under load between the checks above and here.
	leader := -1
	clustertest.Eventually(t, 10*time.Second, "a raft leader", func() bool {
		for i, c := range coords {
			if c.IsLeader() {
				leader = i
				return true
			}
		}
		return false
	})
	killed := time.Now()
	kills[leader]()
	survivors := []*coordinator.Coordinator{}
	for i, c := range coords {
		if i != leader {
			survivors = append(survivors, c)
		}
	}
	// The API keeps answering through the survivors.
	var wg sync.WaitGroup
	for _, c := range survivors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := clustertest.Submit(ctx, c, clustertest.ChatJob("after-kill", "", "still here", 10))
			if err != nil || r.Err != nil || r.Text != "still here" {
				t.Errorf("%s after leader kill: %+v %v", c.Name(), r, err)
			}
		}()
	}
	wg.Wait()
	clustertest.Eventually(t, 10*time.Second, "new leader", func() bool {
		for _, c := range survivors {
			if c.IsLeader() {
				return true
			}
		}
		return false
	})
	t.Logf("new leader after %v", time.Since(killed))
	if err := survivors[0].RegisterModel(ctx, coordinator.ModelSpec{Name: "after-failover"}); err != nil {
		t.Fatalf("write after failover: %v", err)
	}
	if d := time.Since(killed); d > 10*time.Second {
		t.Fatalf("failover took %v, want < 10s", d)
	}
}

// A coordinator that dies mid-generation leaves nobody waiting: the worker
// notices (its ping finds no responders) and frees the slot.
func TestCoordinatorCrashFreesWorker(t *testing.T) {
	url := externalNATS(t)
	cfg := clustertest.CoordConfig(t, "coord-1", nil)
	cfg.NATS = url
	c, stop := clustertest.StartCoordinator(t, cfg)
	w, _ := clustertest.StartWorker(t, "worker-1", c.GossipAddr(), 1, &worker.TestEngine{TokenDelay: 200 * time.Millisecond})
	clustertest.WaitWorkers(t, c, 1)
	// 30 tokens at 200 ms: 6 s unless stopped.
	s, err := c.Submit(context.Background(), clustertest.ChatJob("long", "", strings.Repeat("a ", 30), 100))
	if err != nil {
		t.Fatal(err)
	}
	// The first token proves the worker started the job.
	if ev, err := s.Recv(context.Background()); err != nil || ev.Text != "a" {
		t.Fatalf("first event: %+v %v", ev, err)
	}
	c.Kill()
	stop()
	clustertest.Eventually(t, 2*time.Second, "slot freed after the coordinator died", func() bool { return w.Running() == 0 })
}

// A client flooding the queue is capped at KeyQueueLimit waiting jobs, so
// another client's request is admitted and runs after at most that many of
// the flooder's jobs.
func TestFloodingKeyDoesNotStarveOthers(t *testing.T) {
	cfg := clustertest.CoordConfig(t, "coord-1", nil)
	cfg.QueueLimit = 20
	cfg.KeyQueueLimit = 4
	c, _ := clustertest.StartCoordinator(t, cfg)
	w, _ := clustertest.StartWorker(t, "worker-1", c.GossipAddr(), 1, &worker.TestEngine{TokenDelay: 5 * time.Millisecond})
	clustertest.WaitWorkers(t, c, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	run := func(key string, s interface {
		Recv(context.Context) (*job.Event, error)
		Close() error
	}) {
		defer wg.Done()
		if _, err := clustertest.Collect(ctx, s); err != nil {
			t.Error(err)
		}
		mu.Lock()
		order = append(order, key)
		mu.Unlock()
	}
	// The first job runs long (1 s) so that the queue only moves after the burst.
	first, err := c.Submit(ctx, clustertest.ChatJob("f0", "flood", strings.Repeat("a ", 200), 200))
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go run("flood", first)
	clustertest.Eventually(t, 5*time.Second, "first job running", func() bool { return w.Running() == 1 })
	clustertest.Eventually(t, 5*time.Second, "first job out of the queue", func() bool { return clustertest.Queued(t, c.NATSURL(), clustertest.Model) == 0 })
	admitted, rejected := 0, 0
	for i := 0; i < 20; i++ {
		s, err := c.Submit(ctx, clustertest.ChatJob(fmt.Sprint("f", i), "flood", "a b c", 100))
		var oe *openai.Error
		switch {
		case err == nil:
			admitted++
			wg.Add(1)
			go run("flood", s)
		case errors.As(err, &oe) && oe.HTTPStatus() == 429:
			rejected++
		default:
			t.Fatal(err)
		}
	}
	if admitted != 4 || rejected != 16 {
		t.Fatalf("flooder: %d admitted, %d rejected; want 4 and 16", admitted, rejected)
	}
	s, err := c.Submit(ctx, clustertest.ChatJob("polite", "polite", "hello", 100))
	if err != nil {
		t.Fatalf("other client refused while the flooder is capped: %v", err)
	}
	wg.Add(1)
	go run("polite", s)
	wg.Wait()
	pos := -1
	for i, k := range order {
		if k == "polite" {
			pos = i
		}
	}
	if pos < 0 || pos > 1+cfg.KeyQueueLimit {
		t.Fatalf("polite client finished at position %d of %v, want within the first %d", pos, order, 2+cfg.KeyQueueLimit)
	}
}
