// Package worker hosts an inference engine on one machine, joins the cluster
// by gossip, pulls jobs from the NATS JetStream queue of each model it serves
// when it has a free slot, and streams the results back to the coordinator
// that queued them.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/job"
)

// Engine generates the answer to one job. It renders the chat template,
// tokenizes, generates and parses output, calling emit for every delta and
// once with Usage at the end. It must return promptly when ctx ends.
// Returning an *openai.Error passes that error to the client as is.
type Engine interface {
	Generate(ctx context.Context, job *job.Job, emit func(*job.Event) error) error
}

// ResumeEngine is an Engine that reports the token ids behind every event
// and can continue a generation from them, so that the coordinator can move
// a running job to another worker when its worker dies or stalls
// (docs/cluster.md, "Mid-stream failover"). GenerateResume with a nil r is
// Generate. tokens are the ids whose text ev carries (every token exactly
// once, in order; a token whose text is held back goes with the event that
// finally carries it; the values are the engine's own, stored by the
// coordinator and given back in Resume: the runner marks a token that a
// constraint substituted for a sampled EOS as -1-id). A resumed generation
// prefills prompt + r.Tokens,
// continues as an uninterrupted run would (same seed, same step numbers)
// and emits only new text.
type ResumeEngine interface {
	Engine
	GenerateResume(ctx context.Context, job *job.Job, r *job.Resume, emit func(ev *job.Event, tokens []int) error) error
}

// Config configures a Worker.
type Config struct {
	Name    string
	Version string
	// Models are the model names this worker serves with Engine.
	Models []string
	Engine Engine
	// Slots is how many jobs run at once.
	Slots int
	// Gossip configures membership; Gossip.Join must name a member.
	Gossip cluster.Config
	// NATSURL overrides the NATS URLs learnt from coordinators' gossip metadata.
	NATSURL string
	// StartTimeout bounds the start handshake with the coordinator.
	StartTimeout time.Duration
	// MetaInterval is the most often load changes are gossiped.
	MetaInterval time.Duration
	// PingInterval is how often a running job checks that its client (and
	// coordinator) still waits; a job nobody waits for is stopped.
	PingInterval time.Duration
	// DrainTimeout bounds how long Drain waits for running jobs before it
	// hands them off to other workers (drain.go); 0: hand off at once.
	DrainTimeout time.Duration
	// Secret, if set, is the cluster secret (docs/security.md): gossip is
	// encrypted with it and the cluster's NATS is reached over mutual TLS
	// with the derived credentials (natsauth.go). Nil: an open cluster.
	Secret *cluster.Secret
	// Placed, if set, makes the worker serve the models the coordinators
	// place on it besides Models, and share its models with peers
	// (models.go). Models and Engine may then be empty.
	Placed *ModelsConfig
	// MemoryLimit, if positive, is the most memory in bytes this worker's
	// models may use (--memory-limit): it is gossiped (Meta.MemLimit) and
	// caps the memory it reports, so placement gives it no more; the
	// loader refuses bigger loads.
	MemoryLimit int64
	// KVBytes is the worker's --kv-bytes (0: derived): gossiped
	// (Meta.KVBytes) so that pipeline placement reserves it for each stage
	// placed here.
	KVBytes int64
	// Pipeline is the address of this worker's pipeline listener
	// (pipeline.Server.Addr), gossiped so that placement can make it a
	// stage of a pipelined model (stages.go); an unspecified host is
	// replaced by the gossip host. "": it takes no stages.
	Pipeline string
	Logger   *slog.Logger
}

// DefaultConfig returns a worker configuration with one slot.
func DefaultConfig() Config {
	return Config{
		Slots:        1,
		Gossip:       cluster.DefaultConfig(),
		StartTimeout: 2 * time.Second,
		MetaInterval: 500 * time.Millisecond,
		PingInterval: time.Second,
		DrainTimeout: 60 * time.Second,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Name == "" {
		return errors.New("worker: name must be set")
	}
	if len(c.Models) == 0 && c.Placed == nil { // placed models come later (models.go)
		return errors.New("worker: at least one model must be served")
	}
	if c.Engine == nil && len(c.Models) > 0 {
		return errors.New("worker: engine must be set")
	}
	if c.Slots < 1 {
		return fmt.Errorf("worker: slots %d must be at least 1", c.Slots)
	}
	if c.StartTimeout <= 0 {
		return fmt.Errorf("worker: start timeout %v must be positive", c.StartTimeout)
	}
	if c.PingInterval <= 0 {
		return fmt.Errorf("worker: ping interval %v must be positive", c.PingInterval)
	}
	if c.MetaInterval <= 0 {
		return fmt.Errorf("worker: meta interval %v must be positive", c.MetaInterval)
	}
	if c.Gossip.Secret != nil && !c.Gossip.Secret.Equal(c.Secret) {
		return errors.New("worker: gossip secret must be the cluster secret (set Config.Secret only)")
	}
	if c.DrainTimeout < 0 {
		return fmt.Errorf("worker: drain timeout %v must not be negative", c.DrainTimeout)
	}
	if c.MemoryLimit < 0 {
		return fmt.Errorf("worker: memory limit %d must not be negative", c.MemoryLimit)
	}
	return nil
}

// Worker runs jobs for the cluster.
type Worker struct {
	cfg  Config
	log  *slog.Logger
	ml   *cluster.Membership
	meta cluster.Meta

	sem     chan struct{} // one token per free slot
	running atomic.Int64
	served  atomic.Int64
	pulling atomic.Int64  // pull loops that found their queue
	changed chan struct{} // load changed; gossip it

	mu      sync.Mutex
	cancels map[string]context.CancelFunc // job id -> cancel of a running job

	drain drainState // graceful drain (drain.go)
	power power      // keeps a Mac awake while jobs run (power.go)
	route routeState // offered jobs, prefix summaries (prefix.go)

	placed placedState // models placed by the coordinators (models.go)

	closeOnce sync.Once
}

// New joins the cluster by gossip. Jobs are taken once Run is called.
func New(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	hw := cluster.DetectHardware()
	w := &Worker{
		cfg:     cfg,
		log:     logger.With("component", "worker", "node", cfg.Name),
		sem:     make(chan struct{}, cfg.Slots),
		changed: make(chan struct{}, 1),
		cancels: map[string]context.CancelFunc{},
		drain:   newDrainState(),
		meta: cluster.Meta{
			Role: cluster.RoleWorker, Version: cfg.Version,
			Chip: hw.Chip, Cores: hw.Cores, MemoryMB: hw.MemoryMB,
			GPUCores: hw.GPUCores, GPUWorkingMB: hw.GPUWorkingMB,
			Models: cfg.Models, Slots: cfg.Slots, Free: cfg.Slots,
			MemLimit: cfg.MemoryLimit,
			KVBytes:  cfg.KVBytes,
		},
	}
	if mb := cfg.MemoryLimit >> 20; cfg.MemoryLimit > 0 && (w.meta.MemoryMB == 0 || w.meta.MemoryMB > mb) {
		w.meta.MemoryMB = max(mb, 1)
	}
	for i := 0; i < cfg.Slots; i++ {
		w.sem <- struct{}{}
	}
	gc := cfg.Gossip
	gc.Name = cfg.Name
	gc.Meta = w.meta
	gc.Secret = cfg.Secret
	gc.Logger = logger
	ml, err := cluster.New(gc)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w.ml = ml
	if err := w.initPlaced(); err != nil { // model store, placed models (models.go)
		ml.Close()
		return nil, err
	}
	return w, nil
}

// GossipAddr is the bound gossip address.
func (w *Worker) GossipAddr() string { return w.ml.Addr() }

// Name is the worker's node name.
func (w *Worker) Name() string { return w.cfg.Name }

// Served is the number of jobs this worker has run (started generating).
func (w *Worker) Served() int64 { return w.served.Load() }

// Ready reports whether every pull loop has found its model's queue.
func (w *Worker) Ready() bool {
	return w.pulling.Load() == int64(w.cfg.Slots*len(w.servedModels()))
}

// Running is the number of jobs running now.
func (w *Worker) Running() int64 { return w.running.Load() }

// Run connects to NATS (URLs learnt by gossip), takes jobs until ctx ends
// or a Drain completes, then leaves the cluster. Jobs running when ctx ends
// are stopped and handed back to the coordinator (it resumes them on
// another worker when it can).
func (w *Worker) Run(ctx context.Context) error {
	defer close(w.drain.runDone) // after Close: a Drain returns once the worker left
	defer w.Close()
	w.drain.runStarted.Store(true)
	ctx, stopRun := w.drain.runContext(ctx) // ends when a drain completes, even before NATS is found
	defer stopRun()
	url, err := w.natsURL(ctx)
	if err != nil {
		if w.drain.draining.Load() {
			return nil // drained before it found NATS
		}
		return err
	}
	nopts, err := w.natsOptions(url)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return fmt.Errorf("worker: connect nats %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("worker: jetstream: %w", err)
	}
	sub, err := nc.Subscribe(cluster.SubjectCancelPrefix+"*", w.onCancel)
	if err != nil {
		return fmt.Errorf("worker: subscribe cancel: %w", err)
	}
	defer sub.Unsubscribe()
	dsub, err := nc.Subscribe(cluster.DrainSubject(w.cfg.Name), w.onDrain)
	if err != nil {
		return fmt.Errorf("worker: subscribe drain: %w", err)
	}
	defer dsub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("worker: flush: %w", err)
	}
	w.log.Info("connected", "nats", nc.ConnectedUrl())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Pull loops stop taking jobs when pctx ends (a drain began); the jobs
	// they run live on ctx.
	pctx := w.drain.pullContext(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.gossipLoad(ctx) }()
	if err := w.startRouting(ctx, nc, &wg); err != nil { // prefix-aware routing (prefix.go)
		cancel()
		wg.Wait()
		return err
	}
	for _, model := range w.cfg.Models {
		for i := 0; i < w.cfg.Slots; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); w.pullLoop(ctx, pctx, nc, js, model) }()
		}
	}
	w.runPlaced(ctx, pctx, nc, js, &wg) // models placed by the coordinators (models.go)
	select {
	case <-ctx.Done():
	case <-w.drain.drained:
	}
	cancel()
	wg.Wait()
	return nil
}

// natsURL waits until gossip shows a coordinator that advertises NATS.
func (w *Worker) natsURL(ctx context.Context) (string, error) {
	if w.cfg.NATSURL != "" {
		return w.cfg.NATSURL, nil
	}
	ch, unsub := w.ml.Subscribe()
	defer unsub()
	for {
		var urls []string
		for _, m := range w.ml.Members() {
			if m.Meta.Role == cluster.RoleCoordinator && m.Meta.NATS != "" {
				urls = append(urls, m.Meta.NATS)
			}
		}
		if len(urls) > 0 {
			return strings.Join(urls, ","), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-ch:
		case <-time.After(time.Second):
		}
	}
}

// pullLoop takes one job at a time for model whenever a slot is free: the
// pull request is only issued while this worker holds a free slot, so the
// queue hands work to workers with capacity (least loaded first in effect).
// It stops pulling when pctx ends (drain) and runs jobs on ctx.
func (w *Worker) pullLoop(ctx, pctx context.Context, nc *nats.Conn, js jetstream.JetStream, model string) {
	w.drain.pullers.Add(1)
	defer w.drain.pullers.Add(-1)
	var cons jetstream.Consumer
	for cons == nil {
		c, err := js.Consumer(pctx, cluster.StreamName(model), cluster.ConsumerName)
		if err == nil {
			cons = c
			w.pulling.Add(1)
			defer w.pulling.Add(-1) // placed models' loops stop on unassign (models.go)
			w.loadChanged()
			break
		}
		if pctx.Err() != nil {
			return
		}
		w.log.Debug("waiting for queue", "model", model, "err", err)
		select {
		case <-pctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	for {
		select {
		case <-pctx.Done():
			return
		case <-w.sem:
		}
		// Short pulls: a pull request held by a consumer leader that dies
		// is lost, so the next one must not wait long to reach the new one.
		fctx, fcancel := context.WithTimeout(pctx, 2*time.Second)
		msg, err := cons.Next(jetstream.FetchContext(fctx))
		fcancel()
		if w.yieldSlot(msg, err) { // an offered job took this slot (prefix.go)
			continue
		}
		if err != nil {
			w.sem <- struct{}{}
			if pctx.Err() != nil {
				return
			}
			if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				w.log.Debug("fetch", "model", model, "err", err)
				select {
				case <-pctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			continue
		}
		w.runJob(ctx, nc, msg)
		w.sem <- struct{}{}
	}
}

func (w *Worker) loadChanged() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// runJob acknowledges the job (removing it from the work queue), checks that
// its client still waits, runs the engine and streams frames back.
func (w *Worker) runJob(ctx context.Context, nc *nats.Conn, msg jetstream.Msg) {
	// The ack (removal from the work queue) waits for the start handshake:
	// a worker killed between taking a job and starting it leaves the job
	// queued (redelivered after the consumer's AckWait) instead of losing
	// it, since the coordinator only watches jobs that started somewhere.
	acked := false
	defer func() {
		if !acked {
			_ = msg.Ack()
		}
	}()
	reply := msg.Headers().Get(cluster.HeaderReply)
	id := msg.Headers().Get(cluster.HeaderJob)
	if reply == "" || id == "" {
		w.log.Warn("dropping job without reply subject or id")
		return
	}
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	w.cancels[id] = cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.cancels, id)
		w.mu.Unlock()
	}()

	w.running.Add(1)
	w.power.jobStarted(w.log)
	w.loadChanged()
	defer func() {
		w.running.Add(-1)
		w.power.jobEnded()
		w.loadChanged()
	}()

	// Start handshake: no responders means the client went away while queued.
	sctx, scancel := context.WithTimeout(jctx, w.cfg.StartTimeout)
	resp, err := nc.RequestWithContext(sctx, reply, cluster.AppendFrame(nil, cluster.FrameStart, 0, []byte(w.cfg.Name)))
	scancel()
	if err == nil && string(resp.Data) != "ok" {
		err = errors.New(string(resp.Data))
	}
	acked = true
	// Wait for the server to confirm the removal: the per-key queue bound
	// counts messages still in the stream, and under load an unconfirmed
	// ack can trail the client's next request and make it look queued.
	actx, acancel := context.WithTimeout(ctx, 2*time.Second)
	if aerr := msg.DoubleAck(actx); aerr != nil {
		w.log.Debug("ack job", "job", id, "err", aerr)
	}
	acancel()
	if err != nil {
		w.log.Debug("job abandoned before start", "job", id, "err", err)
		return
	}

	defer w.served.Add(1) // counts jobs that started, not abandoned ones

	pingCtx, stopPing := context.WithCancel(jctx)
	pingExited := make(chan struct{})
	go func() { defer close(pingExited); w.pingRequester(pingCtx, cancel, nc, reply) }()
	defer func() { stopPing(); <-pingExited }()

	var sendMu sync.Mutex // an engine may emit from several goroutines (n > 1)
	seq := uint64(0)
	send := func(kind byte, payload []byte) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		seq++
		frame := cluster.AppendFrame(make([]byte, 0, 9+len(payload)), kind, seq, payload)
		if kind == cluster.FrameEvent {
			return nc.Publish(reply, frame)
		}
		// The last frame is a request, retried until answered: core NATS
		// is at-most-once, and frames lost with a NATS server that died
		// would otherwise leave the coordinator waiting. An answered last
		// frame lets it check that nothing before it went missing (a gap
		// moves the job to a worker, docs/cluster.md).
		// (Sent once even when the worker is stopping: its 503 frame.)
		for attempt := 0; attempt < 5; attempt++ {
			_, err := nc.Request(reply, frame, w.cfg.StartTimeout)
			if err == nil || errors.Is(err, nats.ErrNoResponders) || ctx.Err() != nil {
				return err
			}
		}
		return nil
	}
	var jm cluster.Job
	if err := json.Unmarshal(msg.Data(), &jm); err != nil {
		send(cluster.FrameError, cluster.EncodeError(openai.ServerError("worker could not decode job: %v", err)))
		return
	}
	j := &jm.Job
	log := w.log.With("job", id, "request", j.ID)
	emitTokens := func(ev *job.Event, tokens []int) error {
		if err := jctx.Err(); err != nil {
			return err
		}
		ev.Worker = w.cfg.Name
		b, err := json.Marshal(cluster.Event{Event: *ev, Tokens: tokens})
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		return send(cluster.FrameEvent, b)
	}
	if re, ok := w.cfg.Engine.(ResumeEngine); ok {
		var r *job.Resume
		if jm.Resume != nil {
			r = &job.Resume{Tokens: jm.Resume}
			log.Info("resuming generation", "tokens", len(jm.Resume[0]))
		}
		err = re.GenerateResume(jctx, j, r, emitTokens)
	} else if jm.Resume != nil {
		err = openai.Unavailable("worker %s cannot resume a generation (its engine reports no token ids)", w.cfg.Name)
	} else {
		err = w.cfg.Engine.Generate(jctx, j, func(ev *job.Event) error { return emitTokens(ev, nil) })
	}
	switch {
	case err == nil:
		send(cluster.FrameEnd, nil)
	case (errors.Is(err, ErrEngineLost) || errors.Is(err, ErrEngineInterrupted)) && jctx.Err() == nil:
		// A pipeline stage of the model died, or a link between stages
		// broke: no fault of the job. The coordinator resumes the job
		// from the client's tokens (stages.go): on the re-connected
		// pipeline here, or (lost: the model stopped taking jobs here,
		// placedEngine.lost) on its new plan.
		log.Info("engine lost; handing job back", "err", err)
		send(cluster.FrameHandoff, []byte(w.cfg.Name))
	case jctx.Err() != nil && (w.drain.handoff.Load() || ctx.Err() != nil):
		// drain: stopped by a drain deadline or a shutdown; the
		// coordinator moves the job to another worker from the tokens
		// the client has (or fails it if it cannot resume).
		log.Info("handing job back", "err", err)
		send(cluster.FrameHandoff, []byte(w.cfg.Name))
	case jctx.Err() != nil && ctx.Err() == nil:
		log.Debug("job cancelled")
		send(cluster.FrameError, cluster.EncodeError(&openai.Error{Status: 499, Type: openai.TypeInvalidRequest, Message: "request cancelled"}))
	default:
		var oe *openai.Error
		if !errors.As(err, &oe) {
			if ctx.Err() != nil {
				oe = openai.Unavailable("worker %s is shutting down", w.cfg.Name)
			} else {
				oe = openai.ServerError("generation failed on %s: %v", w.cfg.Name, err)
			}
		}
		if oe.HTTPStatus() < 500 {
			// The client's mistake (prompt too long, bad argument): the
			// client gets the 4xx; this worker is fine.
			log.Info("job refused", "status", oe.HTTPStatus(), "err", err)
		} else {
			log.Warn("job failed", "err", err)
		}
		send(cluster.FrameError, cluster.EncodeError(oe))
	}
}

// pingRequester stops the job (cancel) when nobody waits for it any more:
// the client's coordinator answers "gone", or no coordinator answers at all
// because it died. It returns when ctx ends.
func (w *Worker) pingRequester(ctx context.Context, cancel context.CancelFunc, nc *nats.Conn, reply string) {
	t := time.NewTicker(w.cfg.PingInterval)
	defer t.Stop()
	ping := cluster.AppendFrame(nil, cluster.FramePing, 0, nil)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, pcancel := context.WithTimeout(ctx, w.cfg.PingInterval)
		resp, err := nc.RequestWithContext(pctx, reply, ping)
		pcancel()
		if errors.Is(err, nats.ErrNoResponders) || (err == nil && string(resp.Data) != "ok") {
			w.log.Info("stopping job nobody waits for", "reply", reply)
			cancel()
			return
		}
	}
}

func (w *Worker) onCancel(m *nats.Msg) {
	id := m.Subject[len(cluster.SubjectCancelPrefix):]
	w.mu.Lock()
	cancel := w.cancels[id]
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// gossipLoad publishes the worker's load in its gossip metadata, at most
// once per MetaInterval.
func (w *Worker) gossipLoad(ctx context.Context) {
	t := time.NewTicker(w.cfg.MetaInterval)
	defer t.Stop()
	dirty := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.changed:
			dirty = true
		case <-t.C:
			if !dirty {
				continue
			}
			dirty = false
			m := w.meta
			m.Leaving = w.drain.draining.Load() // drain: route nothing new here
			m.Ready = w.Ready()
			m.Running = int(w.running.Load())
			m.Models = w.servedModels() // plus placed models (models.go)
			m.Free = w.cfg.Slots*len(m.Models) - m.Running
			if m.Free < 0 {
				m.Free = 0
			}
			if err := w.ml.UpdateMeta(m); err != nil {
				w.log.Debug("gossip load", "err", err)
			}
		}
	}
}

// Close leaves the cluster. Safe to call more than once.
func (w *Worker) Close() error {
	var err error
	w.closeOnce.Do(func() { w.closePlaced(); err = w.ml.Close() })
	return err
}

// Kill stops gossip without leaving, as a crash would (tests).
func (w *Worker) Kill() { w.ml.Kill() }
