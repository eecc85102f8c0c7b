package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/macpool/macpool/worker"
)

// sleepFlags are the worker's system-sleep flags (worker/sleep.go):
// -sleep-drain (default on macOS) and -sleep-drain-timeout.
type sleepFlags struct {
	on      bool
	timeout time.Duration
}

// sleepAckGrace is how much later than -sleep-drain-timeout a sleep is
// acknowledged at the latest.
const sleepAckGrace = 5 * time.Second

func (f *sleepFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.on, "sleep-drain", runtime.GOOS == "darwin", "macOS: when the Mac is put to sleep (lid closed, Apple menu, low battery) hand running jobs to other workers and leave the cluster, rejoin after the wake; refuse idle sleep while jobs run (default on macOS, unavailable elsewhere)")
	fs.DurationVar(&f.timeout, "sleep-drain-timeout", 10*time.Second, "with -sleep-drain: how long running jobs may finish after a sleep is announced before they are handed off (at most 20s; the sleep goes ahead at most 5s later)")
}

// sleepWatch is the worker's SleepGuard, or nil without -sleep-drain.
type sleepWatch struct{ g *worker.SleepGuard }

// start listens to the system's sleep notifications. Outside macOS an
// explicit -sleep-drain is a usage error; a failure to register on macOS is
// logged and the worker serves without it.
func (f *sleepFlags) start(logger *slog.Logger) (*sleepWatch, error) {
	if !f.on {
		return nil, nil
	}
	cfg := worker.DefaultSleepConfig()
	cfg.DrainTimeout = f.timeout
	cfg.AckTimeout = f.timeout + sleepAckGrace
	cfg.Logger = logger
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: -sleep-drain-timeout %v must be between 0 and %v", errUsage, f.timeout, 25*time.Second-sleepAckGrace)
	}
	g, err := worker.NewSleepGuard(cfg)
	if errors.Is(err, worker.ErrSleepUnsupported) {
		return nil, fmt.Errorf("%w: -sleep-drain: %v", errUsage, err)
	}
	if err != nil {
		logger.Warn("cannot watch for system sleep: the worker will not drain before the Mac sleeps", "err", err)
		return nil, nil
	}
	logger.Info("watching for system sleep: jobs are handed off before the Mac sleeps", "drain_timeout", cfg.DrainTimeout, "ack_within", cfg.AckTimeout)
	return &sleepWatch{g: g}, nil
}

// run runs w with runDraining (signals drain it) until it stops; with a
// SleepGuard a sleep drains it and the wake starts a new worker from cfg.
func (s *sleepWatch) run(ctx context.Context, w *worker.Worker, cfg worker.Config, logger *slog.Logger) error {
	runOne := func(ctx context.Context, w *worker.Worker) error { return runDraining(ctx, w, logger) }
	if s == nil {
		return runOne(ctx, w)
	}
	return s.g.Serve(ctx, w, func() (*worker.Worker, error) { return worker.New(cfg) }, runOne)
}

func (s *sleepWatch) close() {
	if s != nil {
		s.g.Close()
	}
}
