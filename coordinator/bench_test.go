package coordinator_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/worker"
)

// overheadSetup runs a coordinator and one instant worker with many slots.
func overheadSetup(t testing.TB, slots int) api.Service {
	c, _ := startCoordinator(t, coordConfig(t, "coord-1", nil))
	startWorker(t, "worker-1", c.GossipAddr(), slots, &worker.TestEngine{})
	waitWorkers(t, c, 1)
	// Warm up: stream and consumer creation, connections.
	for i := 0; i < 20; i++ {
		if _, err := submit(context.Background(), c, chatJob("warm", "", "a b c", 3)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// TestCoordinatorOverhead measures the latency the cluster path adds to an
// instant engine (coordinator -> JetStream -> worker -> core NATS -> client)
// against calling the engine directly, and the request rate with 32 clients.
// MACPOOL_BENCH_N sets the number of sequential requests (default 300).
func TestCoordinatorOverhead(t *testing.T) {
	n := 300
	if v := os.Getenv("MACPOOL_BENCH_N"); v != "" {
		fmt.Sscan(v, &n)
	}
	svc := overheadSetup(t, 64)
	eng := &worker.TestEngine{}
	ctx := context.Background()
	j := chatJob("bench", "", "one two three four", 4)

	direct := make([]time.Duration, n)
	for i := range direct {
		start := time.Now()
		eng.Generate(ctx, j, func(*job.Event) error { return nil })
		direct[i] = time.Since(start)
	}
	viaCluster := make([]time.Duration, n)
	for i := range viaCluster {
		start := time.Now()
		r, err := submit(ctx, svc, j)
		if err != nil || r.err != nil {
			t.Fatalf("request %d: %v %v", i, err, r.err)
		}
		viaCluster[i] = time.Since(start)
	}
	p50 := percentile(viaCluster, 0.5) - percentile(direct, 0.5)
	p99 := percentile(viaCluster, 0.99) - percentile(direct, 0.99)

	const clients, per = 32, 40
	var done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if _, err := submit(ctx, svc, chatJob("rps", fmt.Sprint("key-", c), "one two three four", 4)); err == nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	rps := float64(done.Load()) / time.Since(start).Seconds()
	t.Logf("added latency (4-token stream, %d sequential requests): p50 %v, p99 %v; direct engine p50 %v; %.0f requests/s with %d clients",
		n, p50, p99, percentile(direct, 0.5), rps, clients)
	if done.Load() != clients*per {
		t.Fatalf("%d of %d concurrent requests completed", done.Load(), clients*per)
	}
}

// TestHTTPOverhead measures a whole non-streaming chat completion through
// the HTTP API (api.Server handler on a loopback listener) and the cluster
// path, against calling the instant engine directly.
func TestHTTPOverhead(t *testing.T) {
	n := 300
	if v := os.Getenv("MACPOOL_BENCH_N"); v != "" {
		fmt.Sscan(v, &n)
	}
	svc := overheadSetup(t, 64)
	srv, err := api.New(api.DefaultConfig(), svc, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	body := `{"model":"` + testModel + `","messages":[{"role":"user","content":"one two three four"}],"max_tokens":4}`
	do := func() error {
		resp, err := http.Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	for i := 0; i < 20; i++ {
		if err := do(); err != nil {
			t.Fatal(err)
		}
	}
	eng := &worker.TestEngine{}
	j := chatJob("bench", "", "one two three four", 4)
	direct := make([]time.Duration, n)
	for i := range direct {
		start := time.Now()
		eng.Generate(context.Background(), j, func(*job.Event) error { return nil })
		direct[i] = time.Since(start)
	}
	lat := make([]time.Duration, n)
	for i := range lat {
		start := time.Now()
		if err := do(); err != nil {
			t.Fatal(err)
		}
		lat[i] = time.Since(start)
	}
	t.Logf("HTTP + cluster, added latency (%d sequential requests): p50 %v, p99 %v",
		n, percentile(lat, 0.5)-percentile(direct, 0.5), percentile(lat, 0.99)-percentile(direct, 0.99))
}

// BenchmarkSubmit is one request through the cluster path per iteration.
func BenchmarkSubmit(b *testing.B) {
	svc := overheadSetup(b, 64)
	ctx := context.Background()
	job := chatJob("bench", "", "one two three four", 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := submit(ctx, svc, job); err != nil {
			b.Fatal(err)
		}
	}
}
