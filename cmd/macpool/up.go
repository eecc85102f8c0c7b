package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sync/errgroup"
)

func init() {
	register("up", "run a one-machine cluster: coordinator, queue and a local worker", runUp)
}

func runUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("up", stderr)
	var cf coordinatorFlags
	var wf workerFlags
	cf.register(fs)
	wf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if wf.model == "" {
		return fmt.Errorf("%w: -model is required", errUsage)
	}
	if err := resolveWorkerModel(ctx, &wf, stderr); err != nil { // hub: repo id → cache path
		return err
	}
	logger, err := cf.logger(stderr)
	if err != nil {
		return err
	}
	// The local worker stops first so that its graceful leave reaches the
	// coordinator while NATS is still up; a coordinator failure stops both.
	wbase, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	cbase, stopCoordinator := context.WithCancel(context.Background())
	defer stopCoordinator()
	cg, cctx := errgroup.WithContext(cbase)
	c, _, err := startCoordinator(cctx, cg, &cf, logger, stdout)
	if err != nil {
		return err
	}
	wcf := cf.clusterFlags // the local worker joins the coordinator
	wcf.name = c.Name() + "-worker"
	// Same interface as the coordinator's gossip (so that workers on other
	// machines can reach it too), any port.
	wcf.gossip = "127.0.0.1:0"
	if host, _, err := net.SplitHostPort(cf.gossip); err == nil {
		wcf.gossip = net.JoinHostPort(host, "0")
	}
	wcf.join = c.GossipAddr()
	wcf.dataDirSet = false // the in-process worker rejoins its own coordinator; the coordinator remembers the peers
	wg, wctx := errgroup.WithContext(wbase)
	if err := startWorker(wctx, wg, &wcf, &wf, logger, stdout); err != nil {
		stopCoordinator()
		return errors.Join(err, cg.Wait())
	}
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case <-cctx.Done(): // coordinator failed or is stopping
			stopWorker()
		case <-wctx.Done():
		}
	}()
	werr := wg.Wait()
	stopCoordinator()
	cerr := cg.Wait()
	<-watchDone
	return errors.Join(werr, cerr)
}
