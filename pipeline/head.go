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
	// known are the sequences the other stages have heard of, with the
	// ring generation they heard in: after a break they are gone there.
	known map[uint64]uint64
}

func newHead(m *Member) (*Head, error) {
	h := &Head{m: m, waiting: map[uint64]chan *Frame{}, known: map[uint64]uint64{}, shape: newShaper(m.cfg.Groups)}
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
// or its ring breaks during the job, the error wraps ErrStageLost (the job
// is resumed from the tokens reported so far: here once the ring is up
// again, or elsewhere; Lost tells the two apart).
func (h *Head) GenerateResume(ctx context.Context, j *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error {
	gen := h.m.generation()
	err := h.r.GenerateResume(ctx, j, r, emit)
	if err != nil && !errors.Is(err, ErrStageLost) && ctx.Err() == nil && (h.isLost() || h.m.generation() != gen) {
		return fmt.Errorf("%w: %w", h.m.lostError(nil), err)
	}
	return err
}

// Lost reports whether the pipeline is lost for good (Member.Lost): its
// jobs must go elsewhere. A job that failed with ErrStageLost while this
// is false may run here again once the ring is re-connected.
func (h *Head) Lost() bool { return h.isLost() }

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

// up waits for the pipeline's ring to be connected (a broken one is
// re-connected within HealTimeout); ErrStageLost if it is lost, or at once
// when a sequence of pass was on a ring that broke (the job is handed back
// now, not after the wait, and resumed from its tokens).
func (h *Head) up(ctx context.Context, pass []runner.PassSeq) (*ring, error) {
	for {
		h.m.mu.Lock()
		r, changed, lost, gen := h.m.ring, h.m.changed, h.m.lostErr != nil, h.m.gen
		h.m.mu.Unlock()
		if lost {
			return nil, h.m.lostError(nil)
		}
		if r != nil && r.isBroken() {
			gen = r.gen + 1 // its sequences are gone, down or not yet
		}
		h.mu.Lock()
		err := h.stale(gen, pass, false)
		h.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if r != nil && !r.isBroken() {
			return r, nil
		}
		select {
		case <-changed:
		case <-h.m.lost:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// stale is ErrStageLost when one of ids (with its cache length) belongs
// to a ring generation other than gen: the other stages dropped it with a
// broken ring, so its next pass cannot run there. A sequence they never
// heard of must start at position 0 (or attach first). With mark, the
// sequences are recorded as known in gen. Under h.mu.
func (h *Head) stale(gen uint64, pass []runner.PassSeq, mark bool) error {
	for _, p := range pass {
		g, ok := h.known[p.ID]
		if (ok && g != gen) || (!ok && p.Cache.Len() > 0) {
			return h.m.lostError(fmt.Errorf("sequence %d was on a ring generation that broke", p.ID))
		}
	}
	if mark {
		for _, p := range pass {
			h.known[p.ID] = gen
		}
	}
	return nil
}

// send sends f on r and waits for the frame answering it.
func (h *Head) send(ctx context.Context, r *ring, f *Frame) (*Frame, error) {
	ch := make(chan *Frame, 1)
	h.mu.Lock()
	h.waiting[f.Batch] = ch
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.waiting, f.Batch)
		h.mu.Unlock()
	}()
	if err := r.out.Send(h.m.ctx, f); err != nil {
		r.brk(fmt.Errorf("send to stage 1: %w", err))
		return nil, h.m.lostError(r.err)
	}
	select {
	case res := <-ch:
		if res.Kind == Failed {
			return nil, fmt.Errorf("pipeline %s: %s", h.m.key.model, res.Payload)
		}
		return res, nil
	case <-r.broken:
		return nil, h.m.lostError(r.err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// receive hands the last stage's frames on ring r to the passes waiting
// for them, until the connection ends.
func (h *Head) receive(r *ring) error {
	for {
		f := new(Frame)
		if err := r.in.Recv(h.m.ctx, f); err != nil {
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
	r, err := h.up(ctx, pass)
	if err != nil {
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
	h.run(ctx, r, g)
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

// run runs a group's passes as one pass on ring r and hands each call its
// share of the result. A call with a sequence of a broken ring generation
// fails alone (the others' sequences may be new on r).
func (h *Head) run(ctx context.Context, r *ring, g *group) {
	calls := g.calls
	if len(calls) > 1 {
		calls = nil
		h.mu.Lock()
		for _, c := range g.calls {
			if c.err = h.stale(r.gen, c.pass, false); c.err == nil {
				calls = append(calls, c)
			}
		}
		h.mu.Unlock()
		if len(calls) == 0 {
			return
		}
	}
	pass := calls[0].pass
	if len(calls) > 1 {
		pass = nil
		for _, c := range calls {
			pass = append(pass, c.pass...)
		}
	}
	logits, toks, err := h.forward(ctx, r, pass)
	off := 0
	for _, c := range calls {
		n := len(c.pass)
		if err != nil {
			c.err = err
		} else {
			c.logits, c.toks = logits[off:off+n:off+n], toks[off:off+n:off+n]
		}
		off += n
	}
}

// forward runs one pass on ring r: the first stage here, the rest down
// the ring.
func (h *Head) forward(ctx context.Context, r *ring, pass []runner.PassSeq) ([][]float32, []int, error) {
	seqs := make([]engine.Seq, len(pass))
	f := &Frame{Kind: Data, Batch: h.batches.Add(1), Seqs: make([]Seq, len(pass)), Cols: h.m.cfg.Model.Config().HiddenSize}
	var params samplerParams
	h.mu.Lock()
	if err := h.stale(r.gen, pass, true); err != nil {
		h.mu.Unlock()
		return nil, nil, err
	}
	for i, p := range pass {
		seqs[i] = p.Seq
		f.Seqs[i] = Seq{ID: p.ID, Pos: p.Cache.Len(), PromptEnd: p.PromptEnd, AllLogits: p.AllLogits, Greedy: p.Greedy,
			Sample: p.Sample != nil, Snapshot: p.Snapshot, Embed: p.Embed, Tokens: p.Tokens}
		if p.Sample != nil {
			sr := sampleReq{Params: *p.Sample}
			if p.Choice != nil {
				sr.Logprobs = ptr(len(p.Choice.Top))
			}
			params = append(params, sr)
		}
		f.Rows += len(p.Tokens)
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
	res, err := h.send(ctx, r, f)
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
	r, err := h.up(ctx, nil)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	if g, ok := h.known[id]; ok && g != r.gen {
		h.mu.Unlock()
		return 0, h.m.lostError(fmt.Errorf("sequence %d was on a ring generation that broke", id))
	}
	h.known[id] = r.gen
	h.mu.Unlock()
	f := &Frame{Kind: Attach, Batch: h.batches.Add(1), Seqs: []Seq{{ID: id, Pos: len(tokens) - 1, Tokens: tokens}}, Rows: len(tokens)}
	res, err := h.send(ctx, r, f)
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
	gen, known := h.known[id]
	delete(h.known, id)
	h.mu.Unlock()
	r := h.m.current()
	if !known || r == nil || r.gen != gen || r.isBroken() {
		return // the other stages dropped it with its ring
	}
	if err := r.out.Send(h.m.ctx, &Frame{Kind: Forget, Seqs: []Seq{{ID: id}}}); err != nil {
		r.brk(fmt.Errorf("send to stage 1: %w", err))
	}
}

// Samples implements runner.Forwarder: the last stage draws sampled tokens.
func (h *Head) Samples() bool { return true }
