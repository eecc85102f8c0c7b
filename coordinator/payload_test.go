package coordinator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/worker"
)

// TestLargeRequestReachesWorker: a request body between NATS's default 1 MiB
// and the API's 16 MiB limit reaches a worker; one beyond what the queue can
// carry is a 413 naming the limit, never a 503 that SDKs would retry.
func TestLargeRequestReachesWorker(t *testing.T) {
	c, _ := startCoordinator(t, coordConfig(t, "c1", nil))
	startWorker(t, "w1", c.GossipAddr(), 1, &worker.TestEngine{})
	waitWorkers(t, c, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	big := "start " + strings.Repeat("x", 6<<20)
	r, err := submit(ctx, c, chatJob("big", "", big, 1))
	if err != nil || r.err != nil || r.text != "start" {
		t.Fatalf("6 MiB request: text %q, err %v / %v; want the worker's echo of the first word", r.text, err, r.err)
	}

	_, err = c.Submit(ctx, chatJob("huge", "", strings.Repeat("y", 30<<20), 1))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.Status != 413 || !strings.Contains(oe.Message, "max_payload") {
		t.Fatalf("30 MiB request: error %v, want a 413 naming the queue's limit", err)
	}
}
