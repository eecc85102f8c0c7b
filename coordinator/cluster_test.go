package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/worker"
)

func TestThirtyRequestsThreeWorkers(t *testing.T) {
	c, _ := startCoordinator(t, coordConfig(t, "coord-1", nil))
	workers := make([]*worker.Worker, 3)
	for i := range workers {
		workers[i], _ = startWorker(t, fmt.Sprintf("worker-%d", i), c.GossipAddr(), 2, &worker.TestEngine{TokenDelay: 5 * time.Millisecond})
	}
	waitWorkers(t, c, 3)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	results := make([]result, 30)
	errs := make([]error, 30)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = submit(ctx, c, chatJob(fmt.Sprint("req-", i), fmt.Sprint("key-", i%5), "one two three four five", 100))
		}()
	}
	wg.Wait()
	by := map[string]int{}
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if r.err != nil || r.text != "one two three four five" || r.finish != "stop" {
			t.Fatalf("request %d: got %+v (error %v), want the echoed text, finish stop", i, r, r.err)
		}
		by[r.worker]++
	}
	for _, w := range workers {
		if by[w.Name()] == 0 {
			t.Errorf("worker %s served nothing (distribution %v)", w.Name(), by)
		}
	}
	t.Logf("distribution: %v", by)
}

func TestUnknownModel404(t *testing.T) {
	c, _ := startCoordinator(t, coordConfig(t, "coord-1", nil))
	job := chatJob("x", "", "hi", 4)
	job.Model = "nope"
	_, err := c.Submit(context.Background(), job)
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.HTTPStatus() != 404 {
		t.Fatalf("got %v, want a 404 *openai.Error", err)
	}
}

func TestAPIKeys(t *testing.T) {
	c, _ := startCoordinator(t, coordConfig(t, "coord-1", nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// No keys stored: everyone is let in, told apart by their bearer token.
	if id, err := c.Check(ctx, ""); err != nil || id != "" {
		t.Fatalf("anonymous: got %q %v", id, err)
	}
	a, _ := c.Check(ctx, "sk-a")
	b, _ := c.Check(ctx, "sk-b")
	if a == b || !strings.HasPrefix(a, "anon-") {
		t.Fatalf("anonymous ids: got %q and %q, want distinct anon-* ids", a, b)
	}
	if _, err := c.CreateAPIKey(ctx, coordinator.KeyRequest{ID: "team-a", Name: "Team A", Secret: "sk-a"}); err != nil {
		t.Fatal(err)
	}
	if id, err := c.Check(ctx, "sk-a"); err != nil || id != "team-a" {
		t.Fatalf("stored key: got %q %v, want team-a", id, err)
	}
	for _, k := range []string{"sk-b", ""} {
		var oe *openai.Error
		if _, err := c.Check(ctx, k); !errors.As(err, &oe) || oe.HTTPStatus() != 401 {
			t.Fatalf("key %q: got %v, want 401", k, err)
		}
	}
	if st := c.State(); len(st.APIKeys) != 1 || st.APIKeys[coordinator.HashKey("sk-a")].ID != "team-a" {
		t.Fatalf("state keeps %+v, want only the hash of sk-a", st.APIKeys)
	}
}
