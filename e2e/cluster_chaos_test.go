package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/internal/clustertest"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/worker"
)

// quitEngine is the test engine that, on a fresh (not resumed) run, gives
// up with a 503 after `after` tokens, as an engine that is closing does.
type quitEngine struct {
	worker.TestEngine
	after int
}

func (e *quitEngine) GenerateResume(ctx context.Context, j *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error {
	n := 0
	err := e.TestEngine.GenerateResume(ctx, j, r, func(ev *job.Event, toks []int) error {
		n += len(toks)
		if r == nil && n > e.after {
			return openai.Unavailable("model is shutting down")
		}
		return emit(ev, toks)
	})
	return err
}

func chaosWords(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	return strings.Join(w, " ")
}

// TestWorkerUnavailableFailsOver: a worker whose engine answers 503 in the
// middle of a stream (closing, cannot go on) hands the job to another
// worker, which continues it: the client sees the whole text once, one
// role event and no error.
func TestWorkerUnavailableFailsOver(t *testing.T) {
	c, _ := clustertest.StartCoordinator(t, clustertest.CoordConfig(t, "coord-1", nil))
	eng := &quitEngine{TestEngine: worker.TestEngine{TokenDelay: time.Millisecond}, after: 10}
	clustertest.StartWorker(t, "worker-1", c.GossipAddr(), 1, eng)
	clustertest.StartWorker(t, "worker-2", c.GossipAddr(), 1, eng)
	clustertest.WaitWorkers(t, c, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prompt := chaosWords(30)
	s, err := c.Submit(ctx, clustertest.ChatJob("quit", "", prompt, 100))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var text strings.Builder
	roles := 0
	var last *job.Event
	for {
		ev, err := s.Recv(ctx)
		if err != nil {
			break
		}
		text.WriteString(ev.Text)
		if ev.Role != "" {
			roles++
		}
		last = ev
	}
	if last == nil || last.Err != nil || text.String() != prompt || roles != 1 {
		t.Fatalf("after a 503 mid-stream: text %q, roles %d, last %+v; want %q, 1 role, no error", text.String(), roles, last, prompt)
	}
}

// TestQueuedJobWithoutWorkersFails: a job waiting in the queue when the last
// worker of its model is gone ends with a 503 error event after a bounded
// wait, instead of waiting for ever.
func TestQueuedJobWithoutWorkersFails(t *testing.T) {
	c, _ := clustertest.StartCoordinator(t, clustertest.CoordConfig(t, "coord-1", nil))
	// One slot, slow tokens: the first job keeps it busy while the second waits.
	w, _ := clustertest.StartWorker(t, "worker-1", c.GossipAddr(), 1, &worker.TestEngine{TokenDelay: 50 * time.Millisecond})
	clustertest.WaitWorkers(t, c, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	busy, err := c.Submit(ctx, clustertest.ChatJob("busy", "", chaosWords(400), 1000))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	clustertest.Eventually(t, 5*time.Second, "the first job running", func() bool { return w.Running() == 1 })
	queued, err := c.Submit(ctx, clustertest.ChatJob("queued", "", "never runs", 10))
	if err != nil {
		t.Fatal(err)
	}
	defer queued.Close()
	w.Kill() // gone from gossip; its slot stays busy with the first job
	gone := time.Now()
	var last *job.Event
	for {
		ev, err := queued.Recv(ctx)
		if err != nil {
			break
		}
		last = ev
	}
	took := time.Since(gone)
	if last == nil || last.Err == nil || last.Err.HTTPStatus() != 503 {
		t.Fatalf("queued job with no worker left: last event %+v, want a 503 error", last)
	}
	if took > 15*time.Second {
		t.Fatalf("queued job failed %v after its last worker left, want within 15 s", took)
	}
	t.Logf("queued job failed %v after the worker left: %s", took, last.Err.Message)
}
