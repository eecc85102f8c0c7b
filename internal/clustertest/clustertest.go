// Package clustertest starts real in-process clusters for tests: a
// coordinator with embedded NATS and Raft on 127.0.0.1 (random ports, a
// temporary data dir, fast timeouts) and workers that join it by gossip,
// plus the polling and stream-reading helpers those tests share.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Model is the model name test workers serve.
const Model = "qwen3-test"

// Logger discards logs unless MACPOOL_TEST_LOG is set.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("MACPOOL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Eventually polls cond until it holds or d passes.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// Node is a component with a blocking Run.
type Node interface{ Run(context.Context) error }

// Run runs n until the returned stop is called (or the test ends).
func Run(t testing.TB, n Node) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("node did not stop within 10s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// CoordConfig is a coordinator configuration for tests; without join it
// bootstraps a new cluster.
func CoordConfig(t testing.TB, name string, join []string) coordinator.Config {
	cfg := coordinator.DefaultConfig()
	cfg.Name = name
	cfg.DataDir = t.TempDir()
	cfg.NATSListen = "127.0.0.1:0"
	cfg.Gossip = cluster.FastConfig()
	cfg.Gossip.Join = join
	cfg.Bootstrap = len(join) == 0
	cfg.FastRaft()
	cfg.Logger = Logger(t)
	return cfg
}

// StartCoordinator starts a coordinator; stop ends it (also at test end).
func StartCoordinator(t testing.TB, cfg coordinator.Config) (*coordinator.Coordinator, func()) {
	t.Helper()
	c, err := coordinator.New(cfg)
	if err != nil {
		t.Fatalf("coordinator.New: %v", err)
	}
	return c, Run(t, c)
}

// StartWorker starts a worker serving Model with eng that joins the
// cluster at the gossip address join.
func StartWorker(t testing.TB, name string, join string, slots int, eng worker.Engine) (*worker.Worker, func()) {
	t.Helper()
	cfg := worker.DefaultConfig()
	cfg.Name = name
	cfg.Models = []string{Model}
	cfg.Engine = eng
	cfg.Slots = slots
	cfg.Gossip = cluster.FastConfig()
	cfg.Gossip.Join = []string{join}
	cfg.MetaInterval = 50 * time.Millisecond
	cfg.PingInterval = 100 * time.Millisecond
	cfg.Logger = Logger(t)
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	return w, Run(t, w)
}

// ChatJob is a one-message chat job for Model from API key id key.
func ChatJob(id, key, text string, maxTokens int) *job.Job {
	return &job.Job{
		ID: id, Kind: job.KindChat, Model: Model, APIKey: key,
		Chat: &openai.ChatCompletionRequest{
			Model:     Model,
			Messages:  []openai.ChatMessage{{Role: "user", Content: openai.TextContent(text)}},
			MaxTokens: &maxTokens,
		},
	}
}

// Result is what a stream delivered.
type Result struct {
	Worker string // the last event's worker
	Text   string
	Finish string
	Err    *openai.Error
}

// Collect reads a stream to the end and closes it.
func Collect(ctx context.Context, s job.Stream) (Result, error) {
	defer s.Close()
	var r Result
	var b strings.Builder
	for {
		ev, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			r.Text = b.String()
			return r, nil
		}
		if err != nil {
			return r, err
		}
		if ev.Worker == "" {
			return r, fmt.Errorf("event without worker: %+v", ev)
		}
		r.Worker = ev.Worker
		b.WriteString(ev.Text)
		if ev.FinishReason != "" {
			r.Finish = ev.FinishReason
		}
		if ev.Err != nil {
			r.Err = ev.Err
		}
	}
}

// Submitter is what Submit needs of a coordinator.
type Submitter interface {
	Submit(ctx context.Context, j *job.Job) (job.Stream, error)
}

// Submit submits j and collects its stream.
func Submit(ctx context.Context, svc Submitter, j *job.Job) (Result, error) {
	s, err := svc.Submit(ctx, j)
	if err != nil {
		return Result{}, err
	}
	return Collect(ctx, s)
}

// WaitWorkers waits until c sees n workers serving Model and pulling jobs.
func WaitWorkers(t testing.TB, c *coordinator.Coordinator, n int) {
	t.Helper()
	Eventually(t, 30*time.Second, fmt.Sprintf("%d workers", n), func() bool {
		k := 0
		for _, m := range c.Membership().Members() {
			if m.Meta.Role == cluster.RoleWorker && m.Meta.Serves(Model) && m.Meta.Ready {
				k++
			}
		}
		return k == n
	})
}

// Words is n distinct words "w0 w1 …": a prompt the test engine echoes.
func Words(n int) string {
	ws := make([]string, n)
	for i := range ws {
		ws[i] = fmt.Sprintf("w%d", i)
	}
	return strings.Join(ws, " ")
}

// Queued is how many jobs model's JetStream queue holds at the coordinator
// whose NATS URL is url.
func Queued(t testing.TB, url, model string) uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, cluster.StreamName(model))
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
