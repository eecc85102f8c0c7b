package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/macpool/macpool/worker"
)

func init() {
	register("drain", "drain a worker: it finishes (or hands off) its jobs, then leaves: drain NODE [-timeout D]", runDrain)
}

// runDraining runs w until ctx ends (the first SIGTERM/SIGINT, or the
// process stopping for another reason), then drains it: no new jobs,
// running ones finish within the worker's drain timeout or are handed to
// other workers, then it leaves the cluster. A second signal hands the
// running jobs off at once. It also returns when the worker was drained
// by `macpool drain`.
func runDraining(ctx context.Context, w *worker.Worker, logger *slog.Logger) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	signals := 0
	for ctx.Err() == nil {
		select {
		case err := <-done: // drained by macpool drain, or failed
			return err
		case <-sigs:
			signals++
		case <-ctx.Done():
		}
	}
	logger.Info("draining worker: running jobs finish, then it leaves; a second signal hands them off at once", "node", w.Name())
	dctx, handOff := context.WithCancel(context.Background())
	defer handOff()
	drained := make(chan error, 1)
	go func() { drained <- w.Drain(dctx) }()
	for {
		// The signal that ended ctx may be counted above or here; two
		// quick signals may both have been counted above.
		if signals >= 2 && dctx.Err() == nil {
			logger.Info("second signal: handing running jobs off now", "node", w.Name())
			handOff()
		}
		select {
		case <-sigs:
			signals++
		case err := <-drained:
			if rerr := <-done; err == nil {
				err = rerr
			}
			return err
		}
	}
}

func runDrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("drain", stderr)
	var af adminFlags
	af.register(fs)
	timeout := fs.Duration("timeout", 0, "how long running jobs may finish before they are handed to other workers (default: the worker's -drain-timeout)")
	wait := fs.Duration("wait", 5*time.Minute, "give up waiting for the node to leave after this long")
	node, err := splitVerb(fs, args)
	if err != nil {
		return err
	}
	if node == "" {
		return fmt.Errorf("%w: drain needs the node name (see macpool status)", errUsage)
	}
	if *timeout < 0 || *wait <= 0 {
		return fmt.Errorf("%w: -timeout must not be negative and -wait must be positive", errUsage)
	}
	c, err := af.client()
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	resp, err := c.Drain(rctx, node, timeout.Milliseconds())
	cancel()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: draining, %d job(s) running\n", node, resp.Running)
	return c.WaitDrained(ctx, node, resp.Running, *wait, stdout, stderr)
}
