package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/macpool/macpool/worker"
)

// A second coordinator in embedded mode finds the first one's NATS by gossip;
// a worker joined to the second one serves requests sent to the first.
func TestEmbeddedNATSCluster(t *testing.T) {
	start := time.Now()
	cfg1 := coordConfig(t, "coord-1", nil)
	c1, _ := startCoordinator(t, cfg1)
	cfg2 := coordConfig(t, "coord-2", []string{c1.GossipAddr()})
	c2, _ := startCoordinator(t, cfg2)
	t.Logf("coordinators up after %v", time.Since(start))
	startWorker(t, "worker-1", c2.GossipAddr(), 2, &worker.TestEngine{})
	waitWorkers(t, c1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var r result
	eventually(t, 10*time.Second, "a request through coord-1", func() bool {
		var err error
		r, err = submit(ctx, c1, chatJob("x", "", "via routes", 10))
		if err != nil {
			t.Logf("submit: %v", err)
		}
		return err == nil && r.err == nil
	})
	if r.text != "via routes" || r.worker != "worker-1" {
		t.Fatalf("got %+v", r)
	}
	t.Logf("first answer after %v", time.Since(start))
	r, err := submit(ctx, c2, chatJob("y", "", "other side", 10))
	if err != nil || r.text != "other side" {
		t.Fatalf("via coord-2: %+v %v", r, err)
	}
}
