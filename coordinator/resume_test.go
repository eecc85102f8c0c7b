package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/metrics"
	"github.com/macpool/macpool/worker"
)

// stallEngine is the test engine that, on a fresh (not resumed) run, stops
// making progress after `after` tokens until its job is cancelled.
type stallEngine struct {
	worker.TestEngine
	after int
}

func (e *stallEngine) GenerateResume(ctx context.Context, j *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error {
	n := 0
	return e.TestEngine.GenerateResume(ctx, j, r, func(ev *job.Event, toks []int) error {
		n += len(toks)
		if r == nil && n > e.after {
			<-ctx.Done()
			return ctx.Err()
		}
		return emit(ev, toks)
	})
}

// generateOnly is e without resume support (no token ids).
type generateOnly struct{ e *stallEngine }

func (g generateOnly) Generate(ctx context.Context, j *job.Job, emit func(*job.Event) error) error {
	return g.e.GenerateResume(ctx, j, nil, func(ev *job.Event, _ []int) error { return emit(ev) })
}

func TestStalledWorkerFailsOver(t *testing.T) {
	words := make([]string, 30)
	for i := range words {
		words[i] = string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	prompt := strings.Join(words, " ")
	for _, tc := range []struct {
		name      string
		resumable bool
	}{{"resumable", true}, {"generate only", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := coordConfig(t, "coord-1", nil)
			cfg.StallTimeout = 300 * time.Millisecond
			cfg.Metrics = metrics.New()
			c, _ := startCoordinator(t, cfg)
			se := &stallEngine{TestEngine: worker.TestEngine{TokenDelay: 5 * time.Millisecond}, after: 10}
			var eng worker.Engine = se
			if !tc.resumable {
				eng = generateOnly{se}
			}
			startWorker(t, "worker-1", c.GossipAddr(), 1, eng)
			startWorker(t, "worker-2", c.GossipAddr(), 1, eng)
			waitWorkers(t, c, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			s, err := c.Submit(ctx, chatJob("stall", "", prompt, 100))
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			roles, workers := 0, map[string]bool{}
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
				workers[ev.Worker] = true
				last = ev
			}
			s.Close()
			if !tc.resumable {
				if last == nil || last.Err == nil || last.Err.HTTPStatus() != 503 {
					t.Fatalf("got last event %+v, want a 503 error", last)
				}
				return
			}
			if last == nil || last.Err != nil || text.String() != prompt || roles != 1 {
				t.Fatalf("after failover: text %q, roles %d, workers %v, last %+v", text.String(), roles, workers, last)
			}
			if n, _ := scrape(t, cfg.Metrics, `macpool_failovers_total{kind="worker"}`); n < 1 {
				t.Errorf("macpool_failovers_total{kind=\"worker\"} = %v after a failover", n)
			}
			t.Logf("finished %v after submit, served by %v", time.Since(start), workers)
		})
	}
}
