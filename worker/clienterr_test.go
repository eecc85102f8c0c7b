package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/internal/clustertest"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/worker"
)

// rejecting is an engine that refuses every job as the client's mistake
// (a prompt longer than the context, a bad template argument).
type rejecting struct{}

func (rejecting) Generate(context.Context, *job.Job, func(*job.Event) error) error {
	return openai.InvalidRequest("messages", "prompt of 9000 tokens exceeds the context of 4096")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A job the engine refuses as a client error reaches the client as that
// 4xx, and the worker does not log it as a warning: every client 400 used
// to add a worker WARN, drowning the real ones.
func TestClientErrorIsNoWorkerWarning(t *testing.T) {
	c, _ := clustertest.StartCoordinator(t, clustertest.CoordConfig(t, "c1", nil))
	var logs syncBuffer
	cfg := worker.DefaultConfig()
	cfg.Name = "w1"
	cfg.Models = []string{clustertest.Model}
	cfg.Engine = rejecting{}
	cfg.Slots = 1
	cfg.Gossip = cluster.FastConfig()
	cfg.Gossip.Join = []string{c.GossipAddr()}
	cfg.MetaInterval = 50 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Run(t, w)
	clustertest.WaitWorkers(t, c, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := clustertest.Submit(ctx, c, clustertest.ChatJob("j1", "", "hi", 4))
	if err != nil {
		t.Fatal(err)
	}
	if r.Err == nil || r.Err.HTTPStatus() != 400 {
		t.Fatalf("got %+v, want the engine's 400", r)
	}
	if s := logs.String(); strings.Contains(s, "level=WARN") || !strings.Contains(s, "job refused") {
		t.Fatalf("worker log for a client error: want an INFO \"job refused\" and no WARN:\n%s", s)
	}
}
