// Package loader builds the engines a worker serves for the models the
// coordinators place on it: a whole model (a runner), or the worker's stage
// of a pipelined model (engine.Load of the stage's layers, joined to its
// plan on the worker's one pipeline.Server), within the worker's memory
// limit. It also reads a model's layout for pipeline placement. The worker
// package calls it through worker.ModelsConfig (Apply); cmd/macpool only
// wires it.
package loader

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/pipeline"
	"github.com/macpool/macpool/prefix"
	"github.com/macpool/macpool/runner"
	"github.com/macpool/macpool/worker"
)

// Config configures a Loader.
type Config struct {
	// Name is the worker's node name (its stage in a plan is found by it).
	Name string
	// Settings are the worker's engine settings for every model.
	Settings runner.Settings
	// MemoryLimit, if positive, is the most a model's weights plus its KV
	// cache may take, in bytes (worker --memory-limit): bigger weights are
	// refused, the KV budget is capped at what is left.
	MemoryLimit int64
	// Pipeline is the pipeline listener's address (host:port, port 0:
	// any); "" or a nil TLS: this worker runs no pipeline stages.
	Pipeline string
	// TLS is the node's mutual-TLS configuration (cluster.Secret.NodeTLS),
	// required by the stage connections.
	TLS *tls.Config
	// HealTimeout is how long a stage re-connects its broken pipeline
	// before it gives up and is reported failed (0: the pipeline
	// package's 30 s).
	HealTimeout time.Duration
	Logger      *slog.Logger
}

// DefaultConfig listens for pipeline stages on every interface, any port.
func DefaultConfig() Config { return Config{Pipeline: "0.0.0.0:0"} }

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("loader: node name is required")
	case c.MemoryLimit < 0:
		return fmt.Errorf("loader: memory limit %d must not be negative", c.MemoryLimit)
	case c.HealTimeout < 0:
		return fmt.Errorf("loader: heal timeout %v must not be negative", c.HealTimeout)
	}
	return nil
}

// minKV is the least KV cache a model may be given under a memory limit:
// below it the model does not fit.
const minKV = 16 << 20

// ErrTooBig is wrapped by Load and LoadStage when the weights do not fit
// the memory limit.
var ErrTooBig = errors.New("loader: model does not fit the memory limit")

// Loader loads placed models and runs the worker's pipeline listener.
type Loader struct {
	cfg Config
	log *slog.Logger
	srv *pipeline.Server // nil: no stages

	quit      chan struct{}
	closeOnce sync.Once
}

// New opens the pipeline listener (when configured). Run serves it.
func New(cfg Config) (*Loader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	l := &Loader{cfg: cfg, log: cfg.Logger.With("component", "loader"), quit: make(chan struct{})}
	if cfg.Pipeline != "" && cfg.TLS != nil {
		tc := pipeline.DefaultConfig()
		tc.TLS = cfg.TLS
		srv, err := pipeline.NewServer(pipeline.ServerConfig{Addr: cfg.Pipeline, Transport: tc, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("loader: %w", err)
		}
		l.srv = srv
	}
	return l, nil
}

// Addr is the bound pipeline listener ("" without one, also on a nil
// Loader).
func (l *Loader) Addr() string {
	if l == nil || l.srv == nil {
		return ""
	}
	return l.srv.Addr()
}

// Run serves the pipeline listener until ctx ends or Close. A nil Loader
// (a worker without placed models) returns at once.
func (l *Loader) Run(ctx context.Context) error {
	if l == nil {
		return nil
	}
	if l.srv == nil {
		select {
		case <-ctx.Done():
		case <-l.quit:
		}
		return nil
	}
	return l.srv.Run(ctx)
}

// Close stops the pipeline listener and ends Run. Safe to call more than
// once, and on a nil Loader.
func (l *Loader) Close() error {
	if l == nil {
		return nil
	}
	var err error
	l.closeOnce.Do(func() {
		close(l.quit)
		if l.srv != nil {
			err = l.srv.Close()
		}
	})
	return err
}

// Apply makes wc's placed models load through l and gossips its pipeline
// listener and memory limit.
func (l *Loader) Apply(wc *worker.Config) {
	wc.MemoryLimit, wc.KVBytes = l.cfg.MemoryLimit, l.cfg.Settings.KVBytes
	if wc.Placed == nil {
		return
	}
	if wc.Placed.Load == nil { // a test engine stays
		wc.Placed.Load = l.Load
	}
	wc.Placed.Layout = func(path string) (*admin.ModelLayout, error) { return Layout(path, !l.cfg.Settings.KVF32) }
	if l.srv != nil {
		wc.Placed.LoadStage = l.LoadStage
		wc.Pipeline = l.srv.Addr()
	}
}

// kvBytes is the runner's KV budget for weights of the given size under
// the memory limit (the configured budget when smaller), or ErrTooBig.
func (l *Loader) kvBytes(what string, weights int64) (int64, error) {
	kv := l.cfg.Settings.KVBytes
	if l.cfg.MemoryLimit <= 0 {
		return kv, nil
	}
	left := l.cfg.MemoryLimit - weights
	if left < minKV {
		return 0, fmt.Errorf("%w: %s has %d bytes of weights, the limit is %d (%d more needed for its KV cache)", ErrTooBig, what, weights, l.cfg.MemoryLimit, minKV)
	}
	if kv == 0 || kv > left {
		kv = left
	}
	return kv, nil
}

// Load loads the whole model at path as a runner.
func (l *Loader) Load(ctx context.Context, name, path string) (worker.Engine, func() error, error) {
	rc := l.cfg.Settings.Config(path, name)
	if l.cfg.MemoryLimit > 0 {
		kv, err := l.kvBytes("model "+name, runner.WeightBytes(path))
		if err != nil {
			return nil, nil, err
		}
		rc.KVBytes = kv
	}
	e, err := runner.New(rc, l.cfg.Logger)
	if err != nil {
		return nil, nil, fmt.Errorf("load model %s from %s: %w", name, path, err)
	}
	return e, e.Close, nil
}

// LoadStage loads this worker's stage of plan from path and joins the
// plan; once ctx ends (the install is unloaded) the stage no longer
// re-connects a broken pipeline. The engine is nil unless the stage is the
// first; a job whose pipeline broke fails with pipeline.ErrStageLost and
// worker.ErrEngineInterrupted (the ring re-connects) or, once the member is
// lost for good (Stage.Lost), worker.ErrEngineLost.
func (l *Loader) LoadStage(ctx context.Context, name, path string, cp cluster.PipelinePlan) (worker.Stage, error) {
	eng, closeAll, mem, err := l.loadStage(ctx, name, path, cp)
	if err != nil {
		return worker.Stage{}, err
	}
	return worker.Stage{Engine: eng, Close: closeAll, Lost: mem.Lost(), Err: mem.Err}, nil
}

func (l *Loader) loadStage(ctx context.Context, name, path string, cp cluster.PipelinePlan) (worker.Engine, func() error, *pipeline.Member, error) {
	if l.srv == nil {
		return nil, nil, nil, errors.New("loader: this worker has no pipeline listener")
	}
	plan := PlanOf(cp)
	self := plan.Index(l.cfg.Name)
	if self < 0 {
		return nil, nil, nil, fmt.Errorf("loader: worker %s is not a stage of %s epoch %d", l.cfg.Name, plan.Model, plan.Epoch)
	}
	sa := plan.Stages[self]
	st := engine.Stage{First: sa.First, Last: sa.Last}
	// The stage's KV budget follows the whole model's rules (--kv-bytes,
	// else derived from the memory the stage's own weights leave; capped
	// by --memory-limit); placement reserved the same (Meta.KVBytes).
	r, _, err := checkpoint.TensorRanges(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load stage of %s: %w", name, err)
	}
	weights := checkpoint.Bytes(r.Stage(st))
	rc := l.cfg.Settings.StageConfig(path, name, weights)
	if l.cfg.MemoryLimit > 0 {
		kv, err := l.kvBytes(fmt.Sprintf("stage %s of %s", st, name), weights)
		if err != nil {
			return nil, nil, nil, err
		}
		rc.KVBytes = kv
	}
	m, err := engine.Load(path, engine.Options{Backend: rc.Backend, Threads: rc.Threads, KVF16: rc.KVF16, Quantize: rc.Quantize, ExactMatMul: rc.ExactMatMul, Stage: st})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load stage %s of %s from %s: %w", st, name, path, err)
	}
	mem, err := l.srv.Join(ctx, pipeline.MemberConfig{Plan: plan, Self: self, Model: m, Runner: rc, HealTimeout: l.cfg.HealTimeout, Logger: l.cfg.Logger})
	if err != nil {
		m.Close()
		return nil, nil, nil, fmt.Errorf("join %s epoch %d as stage %d: %w", name, plan.Epoch, self, err)
	}
	l.log.Info("pipeline stage joined", "model", name, "epoch", plan.Epoch, "stage", self, "layers", st.String())
	closeAll := func() error { return errors.Join(mem.Close(), m.Close()) }
	if h := mem.Engine(); h != nil {
		return headEngine{h}, closeAll, mem, nil
	}
	return nil, closeAll, mem, nil
}

// PlanOf is the pipeline.Plan of a plan as the worker got it.
func PlanOf(cp cluster.PipelinePlan) pipeline.Plan {
	p := pipeline.Plan{Model: cp.Model, Epoch: cp.Epoch}
	for _, s := range cp.Stages {
		p.Stages = append(p.Stages, pipeline.StageAddr{Worker: s.Worker, Addr: s.Addr, First: s.First, Last: s.Last})
	}
	return p
}

// headEngine is the first stage's Head as a worker engine: a lost stage is
// worker.ErrEngineInterrupted (the ring re-connects) or, once the pipeline
// is lost for good, worker.ErrEngineLost, so the worker hands the job back
// instead of failing it.
type headEngine struct{ h *pipeline.Head }

func (e headEngine) Generate(ctx context.Context, j *job.Job, emit func(*job.Event) error) error {
	return e.GenerateResume(ctx, j, nil, func(ev *job.Event, _ []int) error { return emit(ev) })
}

func (e headEngine) GenerateResume(ctx context.Context, j *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error {
	err := e.h.GenerateResume(ctx, j, r, emit)
	if errors.Is(err, pipeline.ErrStageLost) {
		if e.h.Lost() {
			return fmt.Errorf("%w: %w", worker.ErrEngineLost, err)
		}
		return fmt.Errorf("%w: %w", worker.ErrEngineInterrupted, err)
	}
	return err
}

func (e headEngine) RoutingSummary(max int) prefix.Summary { return e.h.RoutingSummary(max) }

// Layout reads the layout of the checkpoint at path from its headers: the
// bytes of each layer, embedding and head, the KV cache per token (f16 or
// float32 values) and the tensors' file ranges.
func Layout(path string, kvF16 bool) (*admin.ModelLayout, error) {
	r, cfg, err := checkpoint.TensorRanges(path)
	if err != nil {
		return nil, err
	}
	layers := make([]int64, len(r.Layers))
	for i, l := range r.Layers {
		layers[i] = checkpoint.Bytes(l)
	}
	kvValue := 4
	if kvF16 {
		kvValue = 2
	}
	s := pipeline.SizeOfConfig(cfg, layers, checkpoint.Bytes(r.Embed), checkpoint.Bytes(r.Head), kvValue)
	out := &admin.ModelLayout{Layers: s.Layers, Embed: s.Embed, Head: s.Head, KVPerToken: s.KVPerToken, StatePerSeq: s.StatePerSeq,
		Ranges: &admin.LayoutRanges{Layers: make([][]admin.FileRange, len(r.Layers)), Embed: fileRanges(r.Embed), Head: fileRanges(r.Head), Common: fileRanges(r.Common)}}
	for i, l := range r.Layers {
		out.Ranges.Layers[i] = fileRanges(l)
	}
	return out, nil
}

func fileRanges(rs []checkpoint.FileRange) []admin.FileRange {
	out := make([]admin.FileRange, len(rs))
	for i, r := range rs {
		out[i] = admin.FileRange(r)
	}
	return out
}
