package e2e

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/internal/clustertest"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/worker"
)

// startDrainWorker is startWorker with a drain timeout.
func startDrainWorker(t *testing.T, name, join string, eng worker.Engine, drain time.Duration) *worker.Worker {
	t.Helper()
	cfg := worker.DefaultConfig()
	cfg.Name = name
	cfg.Models = []string{clustertest.Model}
	cfg.Engine = eng
	cfg.Gossip = cluster.FastConfig()
	cfg.Gossip.Join = []string{join}
	cfg.MetaInterval = 50 * time.Millisecond
	cfg.PingInterval = 100 * time.Millisecond
	cfg.DrainTimeout = drain
	cfg.Logger = clustertest.Logger(t)
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	clustertest.Run(t, w)
	return w
}

// recvAll reads a stream to the end, recording which workers produced text.
func recvAll(ctx context.Context, s job.Stream) (text string, workers []string, err error) {
	defer s.Close()
	var b strings.Builder
	for {
		ev, rerr := s.Recv(ctx)
		if errors.Is(rerr, io.EOF) {
			return b.String(), workers, nil
		}
		if rerr != nil {
			return b.String(), workers, rerr
		}
		if ev.Err != nil {
			return b.String(), workers, ev.Err
		}
		if ev.Text != "" && (len(workers) == 0 || workers[len(workers)-1] != ev.Worker) {
			workers = append(workers, ev.Worker)
		}
		b.WriteString(ev.Text)
	}
}

// A drained worker stops taking jobs at once (nothing new is routed to it)
// but finishes the job it runs, then leaves.
func TestDrainFinishesRunningJob(t *testing.T) {
	c, _ := clustertest.StartCoordinator(t, clustertest.CoordConfig(t, "c1", nil))
	w := startDrainWorker(t, "w1", c.GossipAddr(), &worker.TestEngine{TokenDelay: 20 * time.Millisecond}, time.Minute)
	clustertest.WaitWorkers(t, c, 1)
	clustertest.Eventually(t, 10*time.Second, "model registered", func() bool { _, ok := c.State().Models[clustertest.Model]; return ok })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 30
	s, err := c.Submit(ctx, clustertest.ChatJob("r1", "k", clustertest.Words(n), n))
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		text    string
		workers []string
		err     error
	}
	got := make(chan res, 1)
	go func() { text, ws, err := recvAll(ctx, s); got <- res{text, ws, err} }()
	clustertest.Eventually(t, 10*time.Second, "job running", func() bool { return w.Running() == 1 })

	start := time.Now()
	drained := make(chan error, 1)
	go func() { drained <- w.Drain(ctx) }()
	clustertest.Eventually(t, 5*time.Second, "worker gossiping leaving", func() bool {
		m, ok := c.Membership().Member("w1")
		return ok && m.Meta.Leaving
	})
	// Nothing new is routed to a leaving worker.
	if _, err := c.Submit(ctx, clustertest.ChatJob("r2", "k", "a b", 2)); err == nil {
		t.Fatal("submit during drain: got a stream, want 503 (the only worker is draining)")
	} else if oe := (*openai.Error)(nil); !errors.As(err, &oe) || oe.HTTPStatus() != 503 {
		t.Fatalf("submit during drain: got %v, want a 503", err)
	}
	r := <-got
	if r.err != nil || r.text != clustertest.Words(n) || len(r.workers) != 1 || r.workers[0] != "w1" {
		t.Fatalf("got text %q workers %v err %v, want the full text from w1 alone", r.text, r.workers, r.err)
	}
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("drain did not return within 15s of the job's end")
	}
	clustertest.Eventually(t, 5*time.Second, "w1 gone from gossip", func() bool {
		_, ok := c.Membership().Member("w1")
		return !ok
	})
	t.Logf("drain took %v (job of %d tokens at 20ms)", time.Since(start).Round(time.Millisecond), n)
}

// A job still running at the drain deadline is handed off and resumed on
// another worker: the client's stream carries on without an error and
// the text equals an uninterrupted run.
func TestDrainHandsOffAtDeadline(t *testing.T) {
	c, _ := clustertest.StartCoordinator(t, clustertest.CoordConfig(t, "c1", nil))
	eng := &worker.TestEngine{TokenDelay: 25 * time.Millisecond}
	w1 := startDrainWorker(t, "w1", c.GossipAddr(), eng, 300*time.Millisecond)
	w2 := startDrainWorker(t, "w2", c.GossipAddr(), eng, 300*time.Millisecond)
	clustertest.WaitWorkers(t, c, 2)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 60
	s, err := c.Submit(ctx, clustertest.ChatJob("r1", "k", clustertest.Words(n), n))
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		text    string
		workers []string
		err     error
	}
	got := make(chan res, 1)
	go func() { text, ws, err := recvAll(ctx, s); got <- res{text, ws, err} }()
	var busy, other *worker.Worker
	clustertest.Eventually(t, 10*time.Second, "job running", func() bool {
		switch {
		case w1.Running() == 1:
			busy, other = w1, w2
		case w2.Running() == 1:
			busy, other = w2, w1
		}
		return busy != nil
	})
	start := time.Now()
	if err := busy.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	took := time.Since(start)
	r := <-got
	if r.err != nil {
		t.Fatalf("stream failed after the handoff: %v (text so far %q)", r.err, r.text)
	}
	if r.text != clustertest.Words(n) {
		t.Fatalf("got text\n%q\nwant\n%q", r.text, clustertest.Words(n))
	}
	// The other worker finished it (busy had sent some of it, unless the
	// machine was too loaded for a token within the 300 ms deadline).
	if n := len(r.workers); n == 0 || n > 2 || r.workers[n-1] != other.Name() || (n == 2 && r.workers[0] != busy.Name()) {
		t.Fatalf("text came from %v, want %s then %s", r.workers, busy.Name(), other.Name())
	}
	if took > 10*time.Second {
		t.Fatalf("drain with a 300ms deadline took %v", took)
	}
	t.Logf("drain with handoff took %v", took.Round(time.Millisecond))
}
