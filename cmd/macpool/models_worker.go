package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/macpool/macpool/hub"
	"github.com/macpool/macpool/runner"
	"github.com/macpool/macpool/worker"
)

// placedFlags are the worker flags for models placed by the coordinators
// (macpool models add; worker/models.go).
type placedFlags struct {
	listen string
	dir    string
}

func (f *placedFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "model-store", "0.0.0.0:0", `listen address of the model store that shares this worker's models with its peers (port 0: any); "off": serve only -model, take no placed models`)
	fs.StringVar(&f.dir, "models-dir", "", "folder for models pulled from peers (default: DATA-DIR/models)")
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

// apply sets cfg.Placed (and drops the empty static model name).
func (f *placedFlags) apply(cfg *worker.Config, cf *clusterFlags, wf *workerFlags, model string, logger *slog.Logger, stderr io.Writer) error {
	if model == "" {
		cfg.Models = nil
	}
	if !f.enabled() {
		return nil
	}
	pc := worker.DefaultModelsConfig()
	pc.Listen = f.listen
	pc.Dir = f.dir
	if pc.Dir == "" {
		pc.Dir = filepath.Join(cf.dataDir, "models")
	}
	if model != "" && wf.model != "" && wf.backend != "test" {
		pc.Offer = map[string]string{model: wf.model} // share -model with peers
	}
	pc.Load = func(ctx context.Context, name, path string) (worker.Engine, func() error, error) {
		if wf.backend == "test" {
			return worker.WithPrefixKeys(&worker.TestEngine{TokenDelay: wf.tokenDelay}), func() error { return nil }, nil
		}
		e, err := runner.New(wf.settings().Config(path, name), logger)
		if err != nil {
			return nil, nil, fmt.Errorf("load model %s from %s: %w", name, path, err)
		}
		return e, e.Close, nil
	}
	pc.Resolve = func(ctx context.Context, ref string, progress func(bytes, total int64)) (string, error) {
		hc, err := hub.ConfigFromEnv(os.Getenv, stderr)
		if err != nil {
			return "", err
		}
		hc.Progress = func(p hub.Progress) { progress(p.Bytes, p.Total) }
		h, err := hub.New(hc)
		if err != nil {
			return "", err
		}
		return h.Resolve(ctx, ref)
	}
	cfg.Placed = &pc
	return nil
}
