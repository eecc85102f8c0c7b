package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/macpool/macpool/cluster"
)

// Graceful drain (docs/cluster.md, "Drain"): a draining worker stops
// pulling jobs, gossips Leaving so that coordinators route nothing new to
// it, waits for its running jobs up to Config.DrainTimeout, then stops the
// ones still running and hands them back (FrameHandoff: the coordinator
// resumes them on another worker from the tokens the client already has),
// and finally leaves gossip and closes (Run returns nil).

// drainState is the Worker's drain bookkeeping.
type drainState struct {
	draining   atomic.Bool  // a drain began: gossip Leaving, pull nothing
	handoff    atomic.Bool  // the drain deadline passed: stopped jobs are handed off
	pullers    atomic.Int64 // pull loops still running (each may run a job)
	runStarted atomic.Bool

	mu       sync.Mutex
	stopPull context.CancelFunc // ends the pull loops' context; nil before Run

	drainedOnce sync.Once
	drained     chan struct{} // closed when Run should return
	runDone     chan struct{} // closed when Run returned
}

func newDrainState() drainState {
	return drainState{drained: make(chan struct{}), runDone: make(chan struct{})}
}

// pullContext returns the context of Run's pull loops: it ends with ctx or
// when a drain begins (also one that began before Run).
func (d *drainState) pullContext(ctx context.Context) context.Context {
	pctx, cancel := context.WithCancel(ctx)
	d.mu.Lock()
	d.stopPull = cancel
	d.mu.Unlock()
	if d.draining.Load() {
		cancel()
	}
	return pctx
}

// runContext returns Run's context: it also ends when a drain completed
// (so a Run still looking for NATS returns). stop releases it.
func (d *drainState) runContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-d.drained:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Draining reports whether a drain has begun.
func (w *Worker) Draining() bool { return w.drain.draining.Load() }

// drainPoll is how often Drain checks whether the running jobs ended.
const drainPoll = 20 * time.Millisecond

// Drain stops the worker gracefully: it stops taking jobs, gossips that it
// is leaving, waits for the running jobs until Config.DrainTimeout passes
// or ctx ends, then stops the ones still running and hands them back to
// their coordinators (which resume them elsewhere), and leaves the
// cluster. It returns when the worker has left (Run returned). Calling it
// again while a drain runs is allowed; a call whose ctx has ended hands
// the running jobs off at once (a second signal). Drain on a worker whose
// Run never started just leaves the cluster.
func (w *Worker) Drain(ctx context.Context) error { return w.drainFor(ctx, w.cfg.DrainTimeout) }

// drainFor is Drain with timeout in place of Config.DrainTimeout.
func (w *Worker) drainFor(ctx context.Context, timeout time.Duration) error {
	d := &w.drain
	start := time.Now()
	if !d.draining.Swap(true) {
		w.log.Info("draining", "running", w.running.Load(), "timeout", timeout)
		d.mu.Lock()
		if d.stopPull != nil {
			d.stopPull()
		}
		d.mu.Unlock()
		// Gossip Leaving now rather than at the next load tick.
		m := w.meta
		m.Leaving, m.Ready = true, w.Ready()
		m.Running = int(w.running.Load())
		if err := w.ml.UpdateMeta(m); err != nil {
			w.log.Debug("gossip leaving", "err", err)
		}
		w.loadChanged()
	}
	if !d.runStarted.Load() {
		// sleep.go: a Run that starts after this returns at once.
		d.drainedOnce.Do(func() { close(d.drained) })
		return w.Close()
	}

	// Wait for the pull loops to end (a loop ends after its running job
	// finished) and for offered jobs (prefix.go), which run beside them.
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !w.waitPullers(dctx) {
		n := w.handOff()
		w.log.Info("drain deadline: handing jobs off", "jobs", n, "waited", time.Since(start).Round(time.Millisecond))
		// Engines stop at their next token and the handoff frame is
		// acknowledged at once; bound the wait anyway (a coordinator that
		// does not answer makes the worker retry its last frame).
		hctx, hcancel := context.WithTimeout(context.Background(), 15*time.Second)
		w.waitPullers(hctx)
		hcancel()
	}
	d.drainedOnce.Do(func() { close(d.drained) })
	<-d.runDone
	w.log.Info("drained", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// waitPullers waits until no pull loop runs and no job runs (offered jobs,
// prefix.go, run outside the pull loops); false if ctx ended first.
func (w *Worker) waitPullers(ctx context.Context) bool {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for !w.idle() {
		select {
		case <-ctx.Done():
			return w.idle()
		case <-w.drain.runDone:
			return true
		case <-t.C:
		}
	}
	return true
}

// idle reports whether no pull loop and no job (pulled or offered) runs.
func (w *Worker) idle() bool {
	if w.drain.pullers.Load() > 0 || w.running.Load() > 0 {
		return false
	}
	w.route.mu.Lock()
	defer w.route.mu.Unlock()
	return w.route.offered == 0
}

// handOff stops every running job; runJob then sends FrameHandoff for
// each instead of an error. It returns how many jobs it stopped.
func (w *Worker) handOff() int {
	w.drain.handoff.Store(true)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cancel := range w.cancels {
		cancel()
	}
	return len(w.cancels)
}

// onDrain answers a coordinator's drain request (cluster.DrainSubject) and
// drains in the background; Run returns once the worker has left.
func (w *Worker) onDrain(m *nats.Msg) {
	var req cluster.DrainRequest
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &req); err != nil || req.TimeoutMS < 0 {
			if err == nil {
				err = fmt.Errorf("timeout %d ms must not be negative", req.TimeoutMS)
			}
			w.respondDrain(m, cluster.DrainReply{Node: w.cfg.Name, Error: fmt.Sprintf("bad drain request: %v", err)})
			return
		}
	}
	w.respondDrain(m, cluster.DrainReply{Node: w.cfg.Name, Running: int(w.running.Load())})
	timeout := w.cfg.DrainTimeout
	if req.TimeoutMS > 0 {
		timeout = time.Duration(req.TimeoutMS) * time.Millisecond
	}
	// The drain's own goroutine: it ends when Run has returned (Drain
	// waits for that), so nothing outlives the worker.
	go func() {
		if err := w.drainFor(context.Background(), timeout); err != nil {
			w.log.Warn("drain", "err", err)
		}
	}()
}

func (w *Worker) respondDrain(m *nats.Msg, r cluster.DrainReply) {
	if m.Reply == "" {
		return
	}
	b, _ := json.Marshal(r)
	if err := m.Respond(b); err != nil {
		w.log.Debug("answer drain request", "err", err)
	}
}
