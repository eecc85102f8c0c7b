package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/macpool/macpool/hub"
	"github.com/macpool/macpool/loader"
	"github.com/macpool/macpool/runner"
	"github.com/macpool/macpool/worker"
)

// placedFlags are the worker flags for models placed by the coordinators
// (macpool models add; worker/models.go).
type placedFlags struct {
	listen   string
	dir      string
	memLimit runner.Bytes
	bwMBs    int64 // -memory-bandwidth
}

func (f *placedFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "model-store", "0.0.0.0:0", `listen address of the model store that shares this worker's models with its peers (port 0: any); "off": serve only -model, take no placed models`)
	fs.StringVar(&f.dir, "models-dir", "", "folder for models pulled from peers (default: DATA-DIR/models)")
	fs.Int64Var(&f.bwMBs, "memory-bandwidth", 0, "memory bandwidth in MB/s for pipeline placement (0: the Mac chip's published figure, else a ~150 ms probe at start; -1: unknown)")
	fs.Var(&f.memLimit, "memory-limit", "most memory placed models may use, e.g. 8GiB (gossiped: placement splits a model that fits no worker over several as a pipeline)")
}

func (f *placedFlags) enabled() bool { return f.listen != "off" }

// engine builds the static engine of -model; without -model a worker with
// placed models starts with none.
func (f *placedFlags) engine(wf *workerFlags, logger *slog.Logger) (worker.Engine, string, func() error, error) {
	if wf.model == "" && f.enabled() {
		if wf.slots < 1 {
			return nil, "", nil, fmt.Errorf("%w: -slots %d must be at least 1", errUsage, wf.slots)
		}
		return nil, "", func() error { return nil }, nil
	}
	return wf.engine(logger)
}

// apply sets cfg.Placed (and drops the empty static model name); the
// loader it returns (nil without placed models) loads them and serves the
// pipeline listener.
func (f *placedFlags) apply(cfg *worker.Config, cf *clusterFlags, wf *workerFlags, model string, logger *slog.Logger, stderr io.Writer) (*loader.Loader, error) {
	if model == "" {
		cfg.Models = nil
	}
	if !f.enabled() {
		return nil, nil
	}
	pc := worker.DefaultModelsConfig()
	pc.Listen = f.listen
	pc.Dir = cmp.Or(f.dir, filepath.Join(cf.dataDir, "models"))
	if model != "" && wf.model != "" && wf.backend != "test" {
		pc.Offer = map[string]string{model: wf.model} // share -model with peers
	}
	if wf.backend == "test" {
		pc.Load = func(context.Context, string, string) (worker.Engine, func() error, error) {
			return worker.WithPrefixKeys(&worker.TestEngine{TokenDelay: wf.tokenDelay}), func() error { return nil }, nil
		}
	}
	pc.Resolve = hub.Resolver(os.Getenv, stderr)
	cfg.Placed, cfg.MemoryBandwidth = &pc, f.bwMBs
	lc := loader.Config{Name: cfg.Name, Settings: wf.settings(), MemoryLimit: int64(f.memLimit), Logger: logger}
	if host, _, err := net.SplitHostPort(cf.gossip); err == nil && cfg.Secret != nil && wf.backend != "test" {
		lc.Pipeline = net.JoinHostPort(host, "0") // the stage connections need the cluster's TLS
		if lc.TLS, err = cfg.Secret.NodeTLS(cfg.Name); err != nil {
			return nil, err
		}
	}
	l, err := loader.New(lc)
	if err == nil {
		l.Apply(cfg)
	}
	return l, err
}
