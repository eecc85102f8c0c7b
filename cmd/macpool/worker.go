package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/macpool/macpool/runner"
	"github.com/macpool/macpool/worker"
)

func init() {
	register("worker", "run a worker: serve a model for the cluster", runWorker)
}

type workerFlags struct {
	model      string
	modelName  string
	backend    string
	slots      int
	tokenDelay time.Duration
	threads    int
	drain      time.Duration // drain.go
	sleep      sleepFlags    // -sleep-drain, -sleep-drain-timeout (worker_sleep.go)
	kv         kvFlags       // --kv-bytes, --no-prefix-cache (workerkv.go)

	placed placedFlags // -model-store, -models-dir (models_worker.go)
}

func (f *workerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.model, "model", "", "model to serve: a local folder, a .gguf file or a Hugging Face repo id (ORG/NAME[@REV][:FILE|QUANT])")
	fs.StringVar(&f.modelName, "model-name", "", "name clients use for the model (default: the repo id, or the folder's base name)")
	fs.StringVar(&f.backend, "backend", "auto", runner.BackendHelp+", or test (an instant echo engine for tests and benchmarks; loads no model)")
	fs.IntVar(&f.slots, "slots", 8, "sequences generated at once (batched by the engine)")
	fs.IntVar(&f.threads, "threads", 0, "engine threads (default: all cores)")
	fs.DurationVar(&f.tokenDelay, "test-token-delay", 0, "delay per token of -backend test")
	f.kv.register(fs)
	f.placed.register(fs)
	f.sleep.register(fs) // worker_sleep.go
	fs.DurationVar(&f.drain, "drain-timeout", 60*time.Second, "on SIGTERM/SIGINT or macpool drain: how long running jobs may finish before they are handed to other workers (a second signal hands them off at once)")
}

// engine builds the worker's engine, the model name it serves and a
// function that releases the engine.
func (f *workerFlags) engine(logger *slog.Logger) (worker.Engine, string, func() error, error) {
	if f.model == "" {
		return nil, "", nil, fmt.Errorf("%w: -model is required", errUsage)
	}
	if f.slots < 1 {
		return nil, "", nil, fmt.Errorf("%w: -slots %d must be at least 1", errUsage, f.slots)
	}
	name := f.modelName
	if name == "" {
		name = filepath.Base(strings.TrimRight(f.model, "/"))
	}
	switch f.backend {
	case "test":
		// Keyed like a real engine's prefix cache, so prefix routing works with it.
		return worker.WithPrefixKeys(&worker.TestEngine{TokenDelay: f.tokenDelay}), name, func() error { return nil }, nil
	default: // an engine backend: cpu, metal, ... (engine.RegisterBackend names)
		// Hub references were resolved to a cache path (folder or .gguf)
		// by resolveWorkerModel (cmd/macpool/model.go, package hub).
		dir := f.model
		if _, err := os.Stat(dir); err != nil {
			return nil, "", nil, fmt.Errorf("-model: %w", err)
		}
		e, err := runner.New(f.settings().Config(dir, name), logger)
		if err != nil {
			return nil, "", nil, fmt.Errorf("load model %s: %w", f.model, err)
		}
		return e, name, e.Close, nil
	}
}

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("worker", stderr)
	var cf clusterFlags
	var f workerFlags
	var df discoveryFlags
	cf.register(fs, "0.0.0.0:0")
	f.register(fs)
	df.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cf.useJoinToken(); err != nil { // secure.go: -join TOKEN
		return err
	}
	if cf.join == "" { // no -join: find a coordinator on the LAN (mDNS, observe.go)
		dlogger, err := cf.logger(stderr)
		if err != nil {
			return err
		}
		secret, err := cf.clusterSecret(dlogger, cf.gossip) // init.go
		if err != nil {
			return err
		}
		df.useClusterSecret(secret)
		if err := df.discoverJoin(ctx, &cf, dlogger, stderr); err != nil {
			return err
		}
	}
	if err := resolveWorkerModel(ctx, &f, stderr); err != nil { // hub: repo id → cache path
		return err
	}
	logger, err := cf.logger(stderr)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	if err := startWorker(ctx, g, &cf, &f, logger, stdout); err != nil {
		return err
	}
	return g.Wait()
}

func startWorker(ctx context.Context, g *errgroup.Group, cf *clusterFlags, f *workerFlags, logger *slog.Logger, stdout io.Writer) error {
	secret, err := cf.clusterSecret(logger, cf.gossip) // init.go; before loading a model
	if err != nil {
		return err
	}
	if secret == nil && !cf.optedOut() {
		return errNoSecret // secure.go: never plaintext unless -insecure
	}
	eng, model, closeEngine, err := f.placed.engine(f, logger) // f.engine, or none without -model
	if err != nil {
		return err
	}
	slots := f.slots
	cfg := worker.DefaultConfig()
	cfg.Name = cf.nodeName(true)
	cfg.Version, cfg.Models, cfg.Engine, cfg.Slots = version, []string{model}, eng, slots
	cfg.Gossip = cf.gossipConfig()
	if cf.dataDirSet {
		// Its own restart finds the cluster even if the -join addresses
		// are gone (the coordinators' peers files cover theirs).
		cfg.Gossip.PeersFile = filepath.Join(cf.dataDir, "worker-gossip-peers.json")
	}
	cfg.Gossip.Discover = cf.discover // mDNS when the worker found its cluster that way
	cfg.DrainTimeout = f.drain
	cfg.Logger = logger
	cfg.Secret = secret
	ld, err := f.placed.apply(&cfg, cf, f, model, logger, os.Stderr) // placed models (models_worker.go)
	if err != nil {
		closeEngine()
		return err
	}
	g.Go(func() error { return ld.Run(ctx) }) // the worker's run below closes it
	sleep, err := f.sleep.start(logger)       // worker_sleep.go: nil without -sleep-drain
	if err != nil {
		closeEngine()
		return err
	}
	w, err := worker.New(cfg)
	if err != nil {
		sleep.close()
		closeEngine()
		return err
	}
	g.Go(func() error {
		// drain.go: ctx ending drains, a second signal stops at once;
		// worker_sleep.go: a system sleep drains, the wake rejoins.
		err := sleep.run(ctx, w, cfg, logger)
		sleep.close()
		ld.Close()
		if cerr := closeEngine(); err == nil {
			err = cerr
		}
		return err
	})
	fmt.Fprintf(stdout, "listening role=worker name=%s gossip=%s model=%s backend=%s slots=%d pipeline=%s\n", cfg.Name, w.GossipAddr(), model, f.backend, slots, ld.Addr())
	return nil
}
