package coordinator_test

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

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/worker"
)

const testModel = "qwen3-test"

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("MACPOOL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

type node interface{ Run(context.Context) error }

// runNode runs n until the returned stop is called (or the test ends).
func runNode(t testing.TB, n node) (stop func()) {
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

func coordConfig(t testing.TB, name string, join []string) coordinator.Config {
	cfg := coordinator.DefaultConfig()
	cfg.Name = name
	cfg.DataDir = t.TempDir()
	cfg.NATSListen = "127.0.0.1:0"
	cfg.Gossip = cluster.FastConfig()
	cfg.Gossip.Join = join
	cfg.Bootstrap = len(join) == 0
	cfg.FastRaft()
	cfg.Logger = testLogger(t)
	return cfg
}

func startCoordinator(t testing.TB, cfg coordinator.Config) (*coordinator.Coordinator, func()) {
	t.Helper()
	c, err := coordinator.New(cfg)
	if err != nil {
		t.Fatalf("coordinator.New: %v", err)
	}
	return c, runNode(t, c)
}

func startWorker(t testing.TB, name string, join string, slots int, eng worker.Engine) (*worker.Worker, func()) {
	t.Helper()
	cfg := worker.DefaultConfig()
	cfg.Name = name
	cfg.Models = []string{testModel}
	cfg.Engine = eng
	cfg.Slots = slots
	cfg.Gossip = cluster.FastConfig()
	cfg.Gossip.Join = []string{join}
	cfg.MetaInterval = 50 * time.Millisecond
	cfg.PingInterval = 100 * time.Millisecond
	cfg.Logger = testLogger(t)
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	return w, runNode(t, w)
}

func chatJob(id, key, text string, maxTokens int) *job.Job {
	return &job.Job{
		ID: id, Kind: job.KindChat, Model: testModel, APIKey: key,
		Chat: &openai.ChatCompletionRequest{
			Model:     testModel,
			Messages:  []openai.ChatMessage{{Role: "user", Content: openai.TextContent(text)}},
			MaxTokens: &maxTokens,
		},
	}
}

type result struct {
	worker string
	text   string
	finish string
	err    *openai.Error
}

// collect reads a stream to the end.
func collect(ctx context.Context, s job.Stream) (result, error) {
	defer s.Close()
	var r result
	var b strings.Builder
	for {
		ev, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			r.text = b.String()
			return r, nil
		}
		if err != nil {
			return r, err
		}
		if ev.Worker == "" {
			return r, fmt.Errorf("event without worker: %+v", ev)
		}
		r.worker = ev.Worker
		b.WriteString(ev.Text)
		if ev.FinishReason != "" {
			r.finish = ev.FinishReason
		}
		if ev.Err != nil {
			r.err = ev.Err
		}
	}
}

func submit(ctx context.Context, svc api.Service, job *job.Job) (result, error) {
	s, err := svc.Submit(ctx, job)
	if err != nil {
		return result{}, err
	}
	return collect(ctx, s)
}

// waitWorkers waits until c sees n workers serving testModel and pulling jobs.
func waitWorkers(t testing.TB, c *coordinator.Coordinator, n int) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%d workers", n), func() bool {
		k := 0
		for _, m := range c.Membership().Members() {
			if m.Meta.Role == cluster.RoleWorker && m.Meta.Serves(testModel) && m.Meta.Ready {
				k++
			}
		}
		return k == n
	})
}
