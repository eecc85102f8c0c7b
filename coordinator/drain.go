package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
)

// DrainNode asks worker node (over NATS) to drain: stop taking jobs,
// finish or after timeout hand off its running jobs, and leave. It returns
// once the worker accepted; watch gossip (or Status) to see it leave.
func (c *Coordinator) DrainNode(ctx context.Context, node string, timeout time.Duration) (DrainResponse, error) {
	m, ok := c.ml.Member(node)
	if !ok {
		return DrainResponse{}, fmt.Errorf("drain %s: %w", node, ErrNodeNotFound)
	}
	if m.Meta.Role != cluster.RoleWorker {
		return DrainResponse{}, fmt.Errorf("drain %s: %w (it is a %s)", node, ErrNotWorker, m.Meta.Role)
	}
	body, _ := json.Marshal(cluster.DrainRequest{TimeoutMS: timeout.Milliseconds()})
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := c.nc.RequestWithContext(rctx, cluster.DrainSubject(node), body)
	if err != nil {
		return DrainResponse{}, fmt.Errorf("drain %s: ask the worker over nats: %w", node, err)
	}
	var r cluster.DrainReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return DrainResponse{}, fmt.Errorf("drain %s: malformed answer: %w", node, err)
	}
	if r.Error != "" {
		return DrainResponse{}, fmt.Errorf("drain %s: worker refused: %s", node, r.Error)
	}
	c.log.Info("worker draining", "node", node, "running", r.Running, "timeout", timeout)
	return DrainResponse{Node: node, Running: r.Running}, nil
}

// NodeDrainState reports node as gossip shows it.
func (c *Coordinator) NodeDrainState(node string) NodeDrainState {
	m, ok := c.ml.Member(node)
	if !ok {
		return NodeDrainState{Node: node}
	}
	return NodeDrainState{Node: node, Present: true, Leaving: m.Meta.Leaving, Running: m.Meta.Running}
}

// ErrNodeNotFound and ErrNotWorker are DrainNode's errors for a node that
// gossip does not show and for a node that is not a worker.
var (
	ErrNodeNotFound = admin.ErrNodeNotFound
	ErrNotWorker    = admin.ErrNotWorker
)
