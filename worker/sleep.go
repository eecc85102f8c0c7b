package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// System sleep (docs/cluster.md, "Sleep"): a laptop worker that goes to
// sleep mid-job would leave its clients waiting until the coordinator
// notices the silence. A SleepGuard listens to the system's power
// notifications (on macOS through IOKit, sleep_darwin.go; nowhere else yet)
// and reacts:
//
//   - idle sleep request (macOS kIOMessageCanSystemSleep): vetoed while
//     jobs run (besides the power assertion of power.go, which normally
//     keeps that request from coming at all), allowed otherwise;
//   - forced sleep (kIOMessageSystemWillSleep: lid closed, Apple menu →
//     Sleep, low battery; it cannot be vetoed): the worker drains: it stops
//     pulling, gossips Leaving, gives running jobs SleepConfig.DrainTimeout
//     to end, hands the others to other workers (FrameHandoff), leaves the
//     cluster; then, or at SleepConfig.AckTimeout at the latest (macOS
//     sleeps anyway 30 s after the notice), the sleep is acknowledged;
//   - wake (kIOMessageSystemHasPoweredOn after a sleep): Serve makes a new
//     Worker with the same configuration (New joins gossip again), which
//     reconnects to NATS and serves again.
//
// A drained Worker cannot serve again (its Run returned and it left the
// cluster), so waking means a new Worker; the engine (the loaded model) is
// kept: it belongs to the caller, not to the Worker.

// powerMessage is a system power notification's kind.
type powerMessage int

const (
	powerOther        powerMessage = iota
	powerCanSleep                  // idle sleep requested: may be vetoed
	powerWillSleep                 // the system sleeps: must be acknowledged
	powerWillNotSleep              // an idle sleep request was vetoed (by anyone)
	powerWillPowerOn               // waking begins
	powerHasPoweredOn              // awake
)

func (m powerMessage) String() string {
	switch m {
	case powerCanSleep:
		return "can-sleep"
	case powerWillSleep:
		return "will-sleep"
	case powerWillNotSleep:
		return "will-not-sleep"
	case powerWillPowerOn:
		return "will-power-on"
	case powerHasPoweredOn:
		return "has-powered-on"
	}
	return "other"
}

// powerNotice is one notification. reply, set for powerCanSleep and
// powerWillSleep only, answers it (allow: IOAllowPowerChange, else
// IOCancelPowerChange); the system waits for the answer (up to 30 s on
// macOS).
type powerNotice struct {
	msg   powerMessage
	raw   uint32 // the platform's message value (logs)
	reply func(allow bool) error
}

// powerSource delivers the system's power notifications to handle, one
// at a time, until close; handle may block (up to SleepConfig.AckTimeout)
// and answers each notice before it returns.
type powerSource interface {
	start(handle func(powerNotice)) error
	close() error
}

// ErrSleepUnsupported is returned by NewSleepGuard where the system's
// sleep notifications are not available (everywhere but macOS).
var ErrSleepUnsupported = errors.New("worker: system sleep notifications are only available on macOS")

// maxSleepAck is the longest a SleepGuard may delay a forced sleep: macOS
// waits at most 30 s for the acknowledgement (then sleeps regardless).
const maxSleepAck = 25 * time.Second

// SleepConfig configures a SleepGuard.
type SleepConfig struct {
	// DrainTimeout is how long jobs running when a sleep is announced may
	// go on before they are handed off to other workers.
	DrainTimeout time.Duration
	// AckTimeout bounds the time from the announcement to its
	// acknowledgement, drained or not (a job that ignores cancellation
	// must not keep the machine awake): at most 25 s.
	AckTimeout time.Duration
	// RejoinBackoff is the first wait before retrying a failed rejoin after
	// a wake (the network may come back after the system); it doubles up
	// to 30 s.
	RejoinBackoff time.Duration
	Logger        *slog.Logger
}

// DefaultSleepConfig returns a SleepConfig that hands jobs off 10 s after
// a sleep is announced and acknowledges it 5 s later at the latest.
func DefaultSleepConfig() SleepConfig {
	return SleepConfig{DrainTimeout: 10 * time.Second, AckTimeout: 15 * time.Second, RejoinBackoff: time.Second}
}

// Validate checks the configuration.
func (c SleepConfig) Validate() error {
	if c.DrainTimeout < 0 {
		return fmt.Errorf("worker: sleep drain timeout %v must not be negative", c.DrainTimeout)
	}
	if c.AckTimeout <= c.DrainTimeout {
		return fmt.Errorf("worker: sleep acknowledgement timeout %v must exceed the sleep drain timeout %v", c.AckTimeout, c.DrainTimeout)
	}
	if c.AckTimeout > maxSleepAck {
		return fmt.Errorf("worker: sleep acknowledgement timeout %v must be at most %v (macOS sleeps 30 s after the notice)", c.AckTimeout, maxSleepAck)
	}
	if c.RejoinBackoff <= 0 {
		return fmt.Errorf("worker: rejoin backoff %v must be positive", c.RejoinBackoff)
	}
	return nil
}

// SleepGuard drains the Worker it serves before a system sleep and serves
// with a new one after the wake (Serve).
type SleepGuard struct {
	cfg SleepConfig
	log *slog.Logger
	src powerSource

	mu      sync.Mutex
	w       *Worker       // the worker Serve runs; nil between a sleep and the wake
	slept   *Worker       // the worker a sleep drained
	asleep  bool          // a sleep was acknowledged and no wake followed yet
	wake    chan struct{} // closed by the wake that ends asleep
	closeMu sync.Mutex
	closed  bool
}

// NewSleepGuard starts listening to the system's power notifications;
// Close stops. Where they are not available it returns ErrSleepUnsupported.
func NewSleepGuard(cfg SleepConfig) (*SleepGuard, error) {
	src, err := systemPower()
	if err != nil {
		return nil, err
	}
	return newSleepGuard(cfg, src)
}

func newSleepGuard(cfg SleepConfig, src powerSource) (*SleepGuard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	g := &SleepGuard{cfg: cfg, log: logger.With("component", "sleep"), src: src}
	if err := src.start(g.handle); err != nil {
		return nil, fmt.Errorf("worker: system sleep notifications: %w", err)
	}
	return g, nil
}

// Close stops the notifications. Safe to call more than once.
func (g *SleepGuard) Close() error {
	g.closeMu.Lock()
	defer g.closeMu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	return g.src.close()
}

// Serve runs w with run (which returns when w's Run returned: ctx ended,
// drained, failed) and returns run's result, except after a sleep drained
// the worker: then it waits for the wake, makes a new worker with renew
// (retried with backoff while it fails) and runs that one. It returns nil
// when ctx ends while the machine sleeps or while it rejoins.
func (g *SleepGuard) Serve(ctx context.Context, w *Worker, renew func() (*Worker, error), run func(context.Context, *Worker) error) error {
	for {
		if g.attach(w) {
			err := run(ctx, w)
			if !g.detach(w) {
				return err
			}
			if err != nil {
				g.log.Warn("worker stopped with an error while going to sleep", "err", err)
			}
		} else {
			// The system went to sleep while the worker was being made.
			w.Close()
		}
		if !g.waitWake(ctx) {
			return nil
		}
		nw, err := g.rejoin(ctx, renew)
		if err != nil {
			return nil // ctx ended
		}
		w = nw
		g.log.Info("woke up: rejoined the cluster", "node", w.Name(), "gossip", w.GossipAddr())
	}
}

// attach makes w the served worker unless the system sleeps.
func (g *SleepGuard) attach(w *Worker) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.asleep {
		return false
	}
	g.w = w
	return true
}

// detach forgets w and reports whether a sleep drained it.
func (g *SleepGuard) detach(w *Worker) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.w == w {
		g.w = nil
	}
	slept := g.slept == w
	if slept {
		g.slept = nil
	}
	return slept
}

// waitWake waits until the system is awake; false if ctx ended first.
func (g *SleepGuard) waitWake(ctx context.Context) bool {
	g.mu.Lock()
	wake := g.wake
	asleep := g.asleep
	g.mu.Unlock()
	if asleep {
		select {
		case <-wake:
		case <-ctx.Done():
		}
	}
	return ctx.Err() == nil
}

func (g *SleepGuard) rejoin(ctx context.Context, renew func() (*Worker, error)) (*Worker, error) {
	delay := g.cfg.RejoinBackoff
	for {
		w, err := renew()
		if err == nil {
			return w, nil
		}
		g.log.Warn("rejoin after wake failed, retrying", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// handle is the state machine: one notification in, actions and the
// answer out. It runs on the power source's thread and returns after
// answering (at most AckTimeout after a forced sleep's notice).
func (g *SleepGuard) handle(n powerNotice) {
	switch n.msg {
	case powerCanSleep:
		g.mu.Lock()
		w := g.w
		g.mu.Unlock()
		busy := 0
		if w != nil {
			busy = w.busy()
		}
		if busy > 0 {
			g.log.Info("system wants to idle-sleep: vetoed, jobs are running", "jobs", busy)
			g.answer(n, false)
			return
		}
		g.log.Info("system wants to idle-sleep: allowed, no job is running")
		g.answer(n, true)
	case powerWillSleep:
		g.willSleep(n)
	case powerHasPoweredOn:
		g.mu.Lock()
		was := g.asleep
		if was {
			g.asleep = false
			close(g.wake)
		}
		g.mu.Unlock()
		if was {
			g.log.Info("system woke up: rejoining the cluster")
		} else {
			g.log.Info("system has powered on (no sleep was seen)")
		}
	default:
		g.log.Info("system power event", "event", n.msg, "message", fmt.Sprintf("0x%08x", n.raw))
		if n.reply != nil { // not expected: answer so that the system never waits on us
			g.answer(n, true)
		}
	}
}

// willSleep drains the served worker, bounded by DrainTimeout for the
// running jobs and AckTimeout for the answer, then allows the sleep.
func (g *SleepGuard) willSleep(n powerNotice) {
	start := time.Now()
	g.mu.Lock()
	w := g.w
	if !g.asleep {
		g.asleep = true
		g.wake = make(chan struct{})
	}
	// A worker already draining (signal, macpool drain) is leaving for
	// good: after the wake it is not replaced.
	if w != nil && !w.Draining() {
		g.slept = w
	}
	g.mu.Unlock()
	if w == nil {
		g.log.Info("system will sleep: no worker is serving")
		g.answer(n, true)
		return
	}
	g.log.Info("system will sleep: draining", "jobs", w.busy(), "drain_timeout", g.cfg.DrainTimeout, "ack_within", g.cfg.AckTimeout)
	actx, cancel := context.WithTimeout(context.Background(), g.cfg.AckTimeout)
	defer cancel()
	done := make(chan error, 1)
	// Owned by the worker's Run: it returns when Run did, which a job that
	// ignores cancellation can delay past the acknowledgement.
	go func() { done <- w.sleepDrain(actx, g.cfg.DrainTimeout) }()
	select {
	case err := <-done:
		if err != nil {
			g.log.Warn("sleep drain", "err", err)
		}
		g.log.Info("drained for sleep: allowing it", "took", time.Since(start).Round(time.Millisecond))
	case <-actx.Done():
		g.log.Warn("sleep drain still running at the acknowledgement deadline: allowing the sleep anyway", "jobs", w.busy(), "took", time.Since(start).Round(time.Millisecond))
	}
	g.answer(n, true)
}

func (g *SleepGuard) answer(n powerNotice, allow bool) {
	if n.reply == nil {
		return
	}
	if err := n.reply(allow); err != nil {
		g.log.Warn("answer system power event", "event", n.msg, "allow", allow, "err", err)
	}
}

// busy is the number of jobs running (pulled or offered).
func (w *Worker) busy() int {
	w.route.mu.Lock()
	offered := w.route.offered
	w.route.mu.Unlock()
	return max(int(w.running.Load()), offered)
}

// sleepDrain drains w before a sleep: running jobs get timeout, the rest
// are handed off; ctx ending hands them off at once.
func (w *Worker) sleepDrain(ctx context.Context, timeout time.Duration) error {
	return w.drainFor(ctx, timeout)
}
