package coordinator

// Prefix-aware routing (docs/cluster.md, "Prefix-aware routing"). Workers
// publish the prefix keys (package prefix) of the requests they served
// recently; at Submit the coordinator offers a job directly to the worker
// holding its longest prefix, so that its KV prefix cache serves the shared
// part of the prompt. A job no worker takes at once goes to the model's
// queue exactly as before (pull-based least-loaded dispatch).

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/metrics"
	"github.com/macpool/macpool/prefix"
)

const (
	// prefixTTL is how long a worker's summary counts without an update
	// (workers refresh it every second).
	prefixTTL = 5 * time.Second
	// maxSummaryKeys bounds the keys kept per worker and model.
	maxSummaryKeys = 256
	// offerTimeout bounds one offer round trip; a worker answers from its
	// NATS callback at once, so this only expires for a worker that died.
	offerTimeout = 500 * time.Millisecond
	// maxOffers is how many prefix holders are asked before the job is
	// queued.
	maxOffers = 2
	// startGuard is how long the start frame of a taken offer may take
	// before the job is queued after all (the worker died between taking
	// it and starting it; a late start of the same job is answered "gone").
	startGuard = 3 * time.Second
)

// router keeps the latest prefix summary of every worker and model.
type router struct {
	mu   sync.Mutex
	sums map[routeKey]routeSummary

	// Outcomes since start (RouteStats).
	offered, taken, busy, fallback atomic.Int64
}

type routeKey struct{ node, model string }

type routeSummary struct {
	keys       map[uint64]struct{}
	blocks     int
	freeBlocks int
	at         time.Time
}

// RouteStats counts prefix-routing outcomes since the coordinator started.
type RouteStats struct {
	Offered  int64 `json:"offered"`  // offers sent
	Taken    int64 `json:"taken"`    // offers a worker took
	Busy     int64 `json:"busy"`     // offers refused or unanswered
	Fallback int64 `json:"fallback"` // taken offers queued after all (no start in time)
}

// RouteStats reports the prefix-routing outcomes so far.
func (c *Coordinator) RouteStats() RouteStats {
	r := &c.routes
	return RouteStats{Offered: r.offered.Load(), Taken: r.taken.Load(), Busy: r.busy.Load(), Fallback: r.fallback.Load()}
}

// PrefixKnown reports whether the coordinator holds a fresh prefix summary
// of node for model that contains key (tests and diagnostics).
func (c *Coordinator) PrefixKnown(node, model string, key uint64) bool {
	c.routes.mu.Lock()
	defer c.routes.mu.Unlock()
	s, ok := c.routes.sums[routeKey{node, model}]
	if !ok || time.Since(s.at) > prefixTTL {
		return false
	}
	_, ok = s.keys[key]
	return ok
}

// kvRoom is node's KV pool size and free blocks from its fresh prefix
// summaries (a worker with several models: the largest pool, since one
// engine serves them all).
func (c *Coordinator) kvRoom(node string) (blocks, free int) {
	c.routes.mu.Lock()
	defer c.routes.mu.Unlock()
	for k, s := range c.routes.sums {
		if k.node == node && time.Since(s.at) <= prefixTTL && s.blocks > blocks {
			blocks, free = s.blocks, s.freeBlocks
		}
	}
	return blocks, free
}

// routeLoop keeps the prefix summaries workers publish until ctx ends and
// forgets stale ones.
func (c *Coordinator) routeLoop(ctx context.Context) {
	sub, err := c.nc.Subscribe(cluster.PrefixFilter(), c.onPrefix)
	if err != nil {
		c.log.Warn("prefix routing off: subscribe summaries", "err", err)
		return
	}
	defer sub.Unsubscribe()
	defer c.registerRouteMetrics()()
	t := time.NewTicker(prefixTTL)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.routes.mu.Lock()
		for k, s := range c.routes.sums {
			if time.Since(s.at) > prefixTTL {
				delete(c.routes.sums, k)
			}
		}
		c.routes.mu.Unlock()
	}
}

func (c *Coordinator) onPrefix(m *nats.Msg) {
	var ps prefix.Summary
	if err := json.Unmarshal(m.Data, &ps); err != nil || ps.Node == "" || ps.Model == "" {
		c.log.Debug("malformed prefix summary", "subject", m.Subject, "err", err)
		return
	}
	keys := make(map[uint64]struct{}, min(len(ps.Keys), maxSummaryKeys))
	for i, k := range ps.Keys {
		if i == maxSummaryKeys {
			break
		}
		keys[k] = struct{}{}
	}
	c.routes.mu.Lock()
	if c.routes.sums == nil {
		c.routes.sums = map[routeKey]routeSummary{}
	}
	c.routes.sums[routeKey{ps.Node, ps.Model}] = routeSummary{keys: keys, blocks: ps.Blocks, freeBlocks: ps.FreeBlocks, at: time.Now()}
	c.routes.mu.Unlock()
}

// routeCandidate is a worker holding a prefix of a job.
type routeCandidate struct {
	node       string
	match      int // keys of the job's chain the worker holds (prefix.Longest)
	free       int // free slots (gossip)
	freeBlocks int
}

// routeCandidates returns the live, not leaving workers serving the job's model
// that hold a prefix of it: longest match first, then most free slots,
// then most free KV blocks.
func (c *Coordinator) routeCandidates(job *job.Job) []routeCandidate {
	keys := prefix.Of(job)
	if len(keys) == 0 {
		return nil
	}
	workers := c.workersFor(job.Model)
	var out []routeCandidate
	c.routes.mu.Lock()
	for _, w := range workers {
		// Not filtered on gossip's Ready (pulling from every queue): a
		// worker that cannot take offers yet answers no one, and the job
		// is queued at once.
		if w.Meta.Leaving {
			continue
		}
		s, ok := c.routes.sums[routeKey{w.Name, job.Model}]
		if !ok || time.Since(s.at) > prefixTTL {
			continue
		}
		n := prefix.Longest(keys, func(k uint64) bool { _, ok := s.keys[k]; return ok })
		if n > 0 {
			out = append(out, routeCandidate{node: w.Name, match: n, free: w.Meta.Free, freeBlocks: s.freeBlocks})
		}
	}
	c.routes.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case a.match != b.match:
			return a.match > b.match
		case (a.free > 0) != (b.free > 0):
			return a.free > 0
		case a.free != b.free:
			return a.free > b.free
		case a.freeBlocks != b.freeBlocks:
			return a.freeBlocks > b.freeBlocks
		}
		return a.node < b.node
	})
	return out
}

// routeOrPublish offers the job in msg (headers and body as queued) to the
// worker holding its longest prefix and, if no such worker takes it at
// once, queues it with publish. A taken offer returns a PubAck with
// Sequence 0: the job is running, not queued.
func (c *Coordinator) routeOrPublish(ctx context.Context, s *stream, msg *nats.Msg) (*jetstream.PubAck, error) {
	if !c.cfg.NoPrefixRouting {
		for i, cand := range c.routeCandidates(s.job) {
			if i == maxOffers {
				break
			}
			if c.offer(ctx, s, msg, cand.node) {
				return &jetstream.PubAck{}, nil
			}
		}
	}
	return c.publish(ctx, msg)
}

// offer asks node to run the job now. Once it took it, a guard queues the
// job after all if its start frame has not come within startGuard.
func (c *Coordinator) offer(ctx context.Context, s *stream, msg *nats.Msg, node string) bool {
	om := nats.NewMsg(cluster.OfferSubject(s.model, node))
	om.Header = msg.Header
	om.Data = msg.Data
	octx, cancel := context.WithTimeout(ctx, offerTimeout)
	resp, err := c.nc.RequestMsgWithContext(octx, om)
	cancel()
	c.routes.offered.Add(1)
	if err != nil || string(resp.Data) != cluster.OfferTaken {
		c.routes.busy.Add(1)
		c.log.Debug("offer not taken", "node", node, "job", s.id, "err", err)
		return false
	}
	c.routes.taken.Add(1)
	c.requeueMu.Lock()
	if c.closing {
		c.requeueMu.Unlock()
		return true // shutting down: the stream is failed anyway
	}
	c.requeues.Add(1)
	c.requeueMu.Unlock()
	s.mu.Lock()
	id := s.id
	s.mu.Unlock()
	go func() {
		defer c.requeues.Done()
		t := time.NewTimer(startGuard)
		defer t.Stop()
		select {
		case <-c.stopCtx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		pending := !s.done && s.worker == "" && s.id == id
		s.mu.Unlock()
		if !pending {
			return
		}
		c.routes.fallback.Add(1)
		c.log.Info("offered job did not start; queueing it", "node", node, "job", id)
		ack, err := c.publish(c.stopCtx, msg)
		if err != nil {
			s.fail(c.publishError(s.job, err))
			return
		}
		s.mu.Lock()
		if s.id == id && s.worker == "" {
			s.queueSeq = ack.Sequence
		}
		s.mu.Unlock()
	}()
	return true
}

// RouteMetric is the counter of prefix-routing outcomes.
const RouteMetric = metrics.PrefixRoutes

// registerRouteMetrics exports RouteStats in Config.Metrics and returns
// the function that removes them again.
func (c *Coordinator) registerRouteMetrics() (unregister func()) {
	reg := c.cfg.Metrics.Prometheus()
	if reg == nil {
		return func() {}
	}
	var done []prometheus.Collector
	for _, o := range []struct {
		outcome string
		v       *atomic.Int64
	}{{"offered", &c.routes.offered}, {"taken", &c.routes.taken}, {"busy", &c.routes.busy}, {"fallback", &c.routes.fallback}} {
		v := o.v
		cf := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        RouteMetric,
			Help:        "Prefix-aware routing: jobs offered to the worker holding their prefix, taken, refused or unanswered (busy), and taken but queued after all (fallback).",
			ConstLabels: prometheus.Labels{"outcome": o.outcome},
		}, func() float64 { return float64(v.Load()) })
		if err := reg.Register(cf); err != nil {
			c.log.Debug("route metrics not exported", "err", err)
			continue
		}
		done = append(done, cf)
	}
	return func() {
		for _, cf := range done {
			reg.Unregister(cf)
		}
	}
}
