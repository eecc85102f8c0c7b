package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/prefix"
	"github.com/macpool/macpool/runner"
)

// Head serves a pipelined model's jobs on its first stage's worker: a
// runner.Runner (plans, scheduler, sampling, constraints, prefix cache,
// resume: all as for a whole model) whose forward passes it runs over the
// pipeline (runner.Forwarder). A pass runs the first stage here, goes down
// the stages as a data frame and comes back from the last as a result: the
// greedy argmax or the sampled token of each sequence, or its logits where
// the runner needs them (logprobs, constraints). The runner has one
// scheduler lane per stage, so that as many passes are in flight as there
// are stages (docs/engine.md, "Pipeline execution").
type Head struct {
	m *Member
	r *runner.Runner

	compute sync.Mutex // the first stage runs one pass at a time
	batches atomic.Uint64

	// The schedule (schedule.go): lanes' passes merged into groups.
	gate    gate
	shape   *shaper
	maxRows int // rows a merged pass may have (Runner.MaxBatchTokens)
	groups  atomic.Uint64
	merged  atomic.Uint64 // groups of more than one lane's pass

	logitRows atomic.Uint64 // logits rows the last stage sent back

	mu      sync.Mutex
	waiting map[uint64]chan *Frame
	known   map[uint64]bool // sequences the other stages have heard of
}

func newHead(m *Member) (*Head, error) {
	h := &Head{m: m, waiting: map[uint64]chan *Frame{}, known: map[uint64]bool{}, shape: newShaper(m.cfg.Groups)}
	cfg := m.cfg.Runner
	h.maxRows = cfg.MaxBatchTokens
	if h.maxRows <= 0 {
		h.maxRows = runner.DefaultConfig().MaxBatchTokens
	}
	cfg.Model = m.cfg.Model
	cfg.Forward = h
	if cfg.Lanes == 0 {
		cfg.Lanes = len(m.cfg.Plan.Stages)
	}
	if cfg.ModelName == "" {
		cfg.ModelName = m.cfg.Plan.Model
	}
	r, err := runner.New(cfg, m.cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("pipeline head: %w", err)
	}
	h.r = r
	return h, nil
}

// Runner is the runner serving the jobs (its Stats count the passes).
func (h *Head) Runner() *runner.Runner { return h.r }

// Generate implements worker.Engine.
func (h *Head) Generate(ctx context.Context, j *job.Job, emit func(*job.Event) error) error {
	return h.GenerateResume(ctx, j, nil, func(ev *job.Event, _ []int) error { return emit(ev) })
}

// GenerateResume implements worker.ResumeEngine. When the pipeline is lost
// during the job, the error wraps ErrStageLost (the job is resumed
// elsewhere from the tokens reported so far).
func (h *Head) GenerateResume(ctx context.Context, j *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error {
	err := h.r.GenerateResume(ctx, j, r, emit)
	if err != nil && !errors.Is(err, ErrStageLost) && h.isLost() && ctx.Err() == nil {
		return fmt.Errorf("%w: %w", h.m.lostError(), err)
	}
	return err
}

// RoutingSummary implements worker.PrefixSummarizer: the first stage's
// prefix cache, as a whole model's runner reports it.
func (h *Head) RoutingSummary(max int) prefix.Summary { return h.r.RoutingSummary(max) }

func (h *Head) isLost() bool {
	select {
	case <-h.m.lost:
		return true
	default:
		return false
	}
}

// up waits for the pipeline to be connected; ErrStageLost if it is lost.
func (h *Head) up(ctx context.Context) error {
	select {
	case <-h.m.ready:
	case <-h.m.lost:
		return h.m.lostError()
	case <-ctx.Done():
		return ctx.Err()
	}
	if h.isLost() {
		return h.m.lostError()
	}
	return nil
}

// send sends f and waits for the frame answering it.
func (h *Head) send(ctx context.Context, f *Frame) (*Frame, error) {
	ch := make(chan *Frame, 1)
	h.mu.Lock()
	h.waiting[f.Batch] = ch
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.waiting, f.Batch)
		h.mu.Unlock()
	}()
	if err := h.out().Send(h.m.ctx, f); err != nil {
		h.m.fail(fmt.Errorf("send to stage 1: %w", err))
		return nil, h.m.lostError()
	}
	select {
	case r := <-ch:
		if r.Kind == Failed {
			return nil, fmt.Errorf("pipeline %s: %s", h.m.key.model, r.Payload)
		}
		return r, nil
	case <-h.m.lost:
		return nil, h.m.lostError()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (h *Head) out() *Conn {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return h.m.outConn
}

// receive hands the last stage's frames to the passes waiting for them,
// until the connection ends.
func (h *Head) receive(in *Conn) error {
	for {
		f := new(Frame)
		if err := in.Recv(h.m.ctx, f); err != nil {
			return fmt.Errorf("from the last stage: %w", err)
		}
		switch f.Kind {
		case Result, Attached, Failed:
		default:
			return fmt.Errorf("unexpected %v frame from the last stage", f.Kind)
		}
		h.mu.Lock()
		ch := h.waiting[f.Batch]
		h.mu.Unlock()
		if ch == nil {
			// Its waiter gave up (a cancelled attach): the stages are
			// still in step, the answer is only late.
			h.m.log.Debug("pipeline answer nobody waits for", "kind", f.Kind, "batch", f.Batch)
			continue
		}
		ch <- f
	}
}

// Forward implements runner.Forwarder: the first stage's layers here, the
// rest down the pipeline. The passes of several lanes may run merged, as
// one (schedule.go).
func (h *Head) Forward(ctx context.Context, pass []runner.PassSeq) ([][]float32, []int, error) {
	if err := h.up(ctx); err != nil {
		return nil, nil, err
	}
	c := &call{pass: pass, done: make(chan struct{})}
	for _, p := range pass {
		c.rows += len(p.Tokens)
	}
	lanes := h.r.ActiveLanes()
	h.mu.Lock()
	key := shapeKey{seqs: len(h.known), lanes: lanes}
	h.mu.Unlock()
	m := h.shape.groups(key)
	g, leader := h.gate.join(c, h.maxRows, max(1, (lanes+m-1)/m))
	if !leader {
		<-c.done
		return c.logits, c.toks, c.err
	}
	h.gate.wait(g, m, lanes, groupHold)
	h.gate.start(g)
	h.run(ctx, g)
	h.gate.finish(g)
	steps, decode := 0, true
	for _, c := range g.calls {
		steps += len(c.pass)
		decode = decode && c.rows == len(c.pass)
	}
	h.shape.done(key, m, steps, decode, time.Now())
	h.groups.Add(1)
	if len(g.calls) > 1 {
		h.merged.Add(1)
	}
	for _, o := range g.calls[1:] {
		close(o.done)
	}
	return c.logits, c.toks, c.err
}

// run runs a group's passes as one pass and hands each call its share of
// the result.
func (h *Head) run(ctx context.Context, g *group) {
	pass := g.calls[0].pass
	if len(g.calls) > 1 {
		pass = nil
		for _, c := range g.calls {
			pass = append(pass, c.pass...)
		}
	}
	logits, toks, err := h.forward(ctx, pass)
	off := 0
	for _, c := range g.calls {
		n := len(c.pass)
		if err != nil {
			c.err = err
		} else {
			c.logits, c.toks = logits[off:off+n:off+n], toks[off:off+n:off+n]
		}
		off += n
	}
}

// forward runs one pass: the first stage here, the rest down the ring.
func (h *Head) forward(ctx context.Context, pass []runner.PassSeq) ([][]float32, []int, error) {
	seqs := make([]engine.Seq, len(pass))
	f := &Frame{Kind: Data, Batch: h.batches.Add(1), Seqs: make([]Seq, len(pass)), Cols: h.m.cfg.Model.Config().HiddenSize}
	var params samplerParams
	h.mu.Lock()
	for i, p := range pass {
		seqs[i] = p.Seq
		f.Seqs[i] = Seq{ID: p.ID, Pos: p.Cache.Len(), PromptEnd: p.PromptEnd, AllLogits: p.AllLogits, Greedy: p.Greedy,
			Sample: p.Sample != nil, Snapshot: p.Snapshot, Tokens: p.Tokens}
		if p.Sample != nil {
			sr := sampleReq{Params: *p.Sample}
			if p.Choice != nil {
				sr.Logprobs = ptr(len(p.Choice.Top))
			}
			params = append(params, sr)
		}
		f.Rows += len(p.Tokens)
		h.known[p.ID] = true
	}
	h.mu.Unlock()
	if len(params) > 0 {
		b, err := json.Marshal(params)
		if err != nil {
			return nil, nil, fmt.Errorf("sampler parameters: %w", err)
		}
		f.Payload = b
	}
	h.compute.Lock()
	t0 := time.Now()
	out, err := h.m.cfg.Model.ForwardStage(ctx, seqs, nil)
	h.m.busy(t0)
	h.compute.Unlock()
	if err != nil {
		return nil, nil, err
	}
	f.Hidden = out.Hidden
	res, err := h.send(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	if len(res.Seqs) != len(pass) {
		return nil, nil, fmt.Errorf("pipeline %s: result of %d sequences for a pass of %d", h.m.key.model, len(res.Seqs), len(pass))
	}
	logits := make([][]float32, len(pass))
	toks := make([]int, len(pass))
	row := 0
	for i, s := range res.Seqs {
		toks[i] = -1
		switch {
		case s.Logits:
			logits[i] = res.Hidden[row*res.Cols : (row+1)*res.Cols : (row+1)*res.Cols]
			row++
			h.logitRows.Add(1)
			if pass[i].Greedy {
				toks[i] = engine.Argmax(logits[i])
			}
		case len(s.Tokens) == 1:
			toks[i] = s.Tokens[0]
		default:
			return nil, nil, fmt.Errorf("pipeline %s: result for sequence %d has neither a token nor logits", h.m.key.model, s.ID)
		}
	}
	if err := fillChoices(res.Payload, pass, toks); err != nil {
		return nil, nil, fmt.Errorf("pipeline %s: %w", h.m.key.model, err)
	}
	return logits, toks, nil
}

func ptr[T any](v T) *T { return &v }

// Attach implements runner.Forwarder: the other stages attach what they
// have of the prefix; the answer is what the last of them holds, which no
// stage before it exceeds.
func (h *Head) Attach(ctx context.Context, id uint64, tokens []int) (int, error) {
	if err := h.up(ctx); err != nil {
		return 0, err
	}
	h.mu.Lock()
	h.known[id] = true
	h.mu.Unlock()
	f := &Frame{Kind: Attach, Batch: h.batches.Add(1), Seqs: []Seq{{ID: id, Pos: len(tokens) - 1, Tokens: tokens}}, Rows: len(tokens)}
	res, err := h.send(ctx, f)
	if err != nil {
		return 0, err
	}
	if len(res.Seqs) != 1 {
		return 0, fmt.Errorf("pipeline %s: attached answer of %d sequences", h.m.key.model, len(res.Seqs))
	}
	return res.Seqs[0].Pos, nil
}

// Forget implements runner.Forwarder: the other stages free the
// sequence's caches (the frame follows the sequence's last pass on the same
// connection).
func (h *Head) Forget(id uint64) {
	h.mu.Lock()
	known := h.known[id]
	delete(h.known, id)
	h.mu.Unlock()
	if !known || h.isLost() {
		return
	}
	if err := h.out().Send(h.m.ctx, &Frame{Kind: Forget, Seqs: []Seq{{ID: id}}}); err != nil {
		h.m.fail(fmt.Errorf("send to stage 1: %w", err))
	}
}

// Samples implements runner.Forwarder: the last stage draws sampled tokens.
func (h *Head) Samples() bool { return true }
