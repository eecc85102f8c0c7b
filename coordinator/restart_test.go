package coordinator_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/macpool/macpool/worker"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// A job waiting in the queue is stored by JetStream in the data dir: it is
// still there after the coordinator (and its embedded NATS) restarts.
func TestQueuedJobSurvivesRestart(t *testing.T) {
	cfg := coordConfig(t, "coord-1", nil)
	cfg.NATSListen = freeAddr(t) // the restarted server must come back on the same port
	c, stop := startCoordinator(t, cfg)
	w, _ := startWorker(t, "worker-1", c.GossipAddr(), 1, &worker.TestEngine{TokenDelay: 25 * time.Millisecond})
	waitWorkers(t, c, 1)
	ctx := context.Background()
	busy, err := c.Submit(ctx, chatJob("busy", "", "a b c d e f g h i j k l m n o p q r s t", 100))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	eventually(t, 5*time.Second, "busy job running", func() bool { return w.Running() == 1 })
	if _, err := c.Submit(ctx, chatJob("waiting", "", "x", 1)); err != nil {
		t.Fatal(err)
	}
	if got := queued(t, c.NATSURL(), testModel); got != 1 {
		t.Fatalf("queued before restart: got %d, want 1", got)
	}
	c.Kill()
	stop()

	cfg.Gossip.Join = []string{w.GossipAddr()}
	c2, _ := startCoordinator(t, cfg)
	if got := queued(t, c2.NATSURL(), testModel); got != 1 {
		t.Fatalf("queued after restart: got %d, want 1", got)
	}
	// The restarted coordinator serves new requests through the same worker
	// (which reconnected to NATS by itself).
	waitWorkers(t, c2, 1)
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r, err := submit(rctx, c2, chatJob("after", "", "back again", 10))
	if err != nil || r.err != nil || r.text != "back again" {
		t.Fatalf("after restart: %+v %v", r, err)
	}
}
