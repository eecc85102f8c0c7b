package coordinator_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/metrics"
	"github.com/macpool/macpool/worker"
)

// scrape returns the value of the sample line of a /metrics page that
// starts with series (name and labels exactly as exposed).
func scrape(t *testing.T, reg *metrics.Registry, series string) (float64, bool) {
	t.Helper()
	rec := httptest.NewRecorder()
	reg.Handler().ServeHTTP(rec, httptest.NewRequest("GET", metrics.Path, nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v, true
		}
	}
	return 0, false
}

// TestQueueWaitMetric: after a load on one one-slot worker, /metrics has
// one queue-wait observation per request, and the queued ones waited for
// the jobs ahead of them.
func TestQueueWaitMetric(t *testing.T) {
	cfg := coordConfig(t, "coord-1", nil)
	cfg.Metrics = metrics.New()
	c, _ := startCoordinator(t, cfg)
	startWorker(t, "worker-1", c.GossipAddr(), 1, &worker.TestEngine{TokenDelay: 10 * time.Millisecond})
	waitWorkers(t, c, 1)

	const n = 6
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := submit(ctx, c, chatJob(fmt.Sprint("req-", i), "", "one two three four five six seven eight nine ten", 10))
			if err != nil || r.err != nil {
				t.Errorf("request %d: %v %v", i, err, r.err)
			}
		}()
	}
	wg.Wait()
	count, ok := scrape(t, cfg.Metrics, `macpool_queue_wait_seconds_count{model="`+testModel+`"}`)
	if !ok || count != n {
		t.Fatalf("queue wait count: got %v (found %v), want %d", count, ok, n)
	}
	sum, _ := scrape(t, cfg.Metrics, `macpool_queue_wait_seconds_sum{model="`+testModel+`"}`)
	// The jobs ran one after another (≥ 100 ms each), so together the
	// queued ones waited at least 1+2+…+5 jobs' time minus slack.
	if sum < 0.5 {
		t.Errorf("queue wait sum %.3fs, want at least 0.5s for %d jobs of ≥ 100ms on one slot", sum, n)
	}
	t.Logf("queue wait: %v observations, sum %.3fs", count, sum)
	// Routing outcomes are exported too (nothing was offered: no summaries).
	if v, ok := scrape(t, cfg.Metrics, coordinator.RouteMetric+`{outcome="offered"}`); !ok || v != 0 {
		t.Errorf("%s{outcome=offered}: got %v (found %v), want 0", coordinator.RouteMetric, v, ok)
	}
}
