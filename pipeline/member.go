package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/sample"
	"github.com/macpool/macpool/runner"
)

// MemberConfig configures one worker's part in a pipelined model.
type MemberConfig struct {
	// Plan is the model's placement; every member gets the same one.
	Plan Plan
	// Self is this worker's index into Plan.Stages.
	Self int
	// Model is this stage, loaded (engine.NewStage / checkpoint.OpenStage
	// with Stage{First, Last} of Plan.Stages[Self]). The caller keeps
	// ownership: Close does not close it.
	Model *engine.Model
	// Runner is the runner configuration, as a whole-model runner gets it
	// (runner.Settings.Config). Stage 0 serves the model's jobs with it
	// (Model and Forward are set by Join); every stage takes its KV pool
	// settings from it (KVBlockSize must be the same on every stage).
	Runner runner.Config
	// Groups, on stage 0, fixes the micro-batches per ring turn: the
	// lanes' passes are merged into at most Groups passes (docs/engine.md,
	// "Pipeline execution"). 0: chosen by measurement.
	Groups int
	Logger *slog.Logger
}

// Validate checks the configuration.
func (c MemberConfig) Validate() error {
	switch {
	case c.Model == nil:
		return errors.New("pipeline member: the stage's model is required")
	case c.Self < 0 || c.Self >= len(c.Plan.Stages):
		return fmt.Errorf("pipeline member: self %d is not a stage of the %d-stage plan", c.Self, len(c.Plan.Stages))
	case c.Groups < 0:
		return fmt.Errorf("pipeline member: groups %d must not be negative", c.Groups)
	case len(c.Plan.Stages) < 2:
		return fmt.Errorf("pipeline member: plan %s has %d stages; a pipeline has at least 2", c.Plan.Model, len(c.Plan.Stages))
	}
	if err := c.Plan.Validate(c.Model.Config().NumHiddenLayers); err != nil {
		return err
	}
	sa := c.Plan.Stages[c.Self]
	if st := c.Model.Stage(); st.First != sa.First || st.Last != sa.Last {
		return fmt.Errorf("pipeline member: the model holds layers [%d, %d), stage %d of the plan [%d, %d)", st.First, st.Last, c.Self, sa.First, sa.Last)
	}
	for i, s := range c.Plan.Stages {
		if s.Addr == "" {
			return fmt.Errorf("pipeline member: stage %d (%s) has no address", i, s.Worker)
		}
	}
	return nil
}

// hello is the payload of a connection's first frame.
type hello struct {
	Model string `json:"model"`
	Epoch uint64 `json:"epoch"`
	From  int    `json:"from"`
	To    int    `json:"to"`
}

func readHello(ctx context.Context, c *Conn) (hello, error) {
	var f Frame
	var h hello
	if err := c.Recv(ctx, &f); err != nil {
		return h, err
	}
	if f.Kind != Hello {
		return h, fmt.Errorf("first frame is %v, want hello", f.Kind)
	}
	if err := json.Unmarshal(f.Payload, &h); err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	return h, nil
}

// connectWait bounds how long a member waits for its neighbours'
// connections; a pipeline that does not come up by then is lost.
const connectWait = 60 * time.Second

// Member is one worker's stage of a pipelined model: it links to the next
// stage (its connection to Plan.Stages[Self+1]; the last stage's goes to
// stage 0, closing the ring) and takes the previous one's. Stage 0 serves
// the model's jobs (Engine); every other stage runs what arrives. Members
// of a plan exchange frames only with members of the same model and epoch.
type Member struct {
	srv  *Server
	cfg  MemberConfig
	key  memberKey
	log  *slog.Logger
	last bool

	ctx    context.Context
	cancel context.CancelFunc
	in     chan *Conn // the previous stage's connection, once
	ready  chan struct{}
	lost   chan struct{}

	mu      sync.Mutex
	inConn  *Conn
	outConn *Conn
	lostErr error
	gotIn   bool

	head *Head
	pool *engine.KVPool // this stage's KV pool (nil: per-sequence caches)

	passes       atomic.Int64
	computeNanos atomic.Int64

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Join adds a member for cfg's stage to the server: it dials the next stage
// (retrying until that worker's member has joined, at most connectWait)
// and accepts the previous stage's connection. It returns at once; a
// pipeline that does not come up, or later breaks, fails the Head's jobs
// with ErrStageLost. On stage 0 it starts the Head, a runner over the
// pipeline.
func (s *Server) Join(ctx context.Context, cfg MemberConfig) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = s.log
	}
	k := memberKey{cfg.Plan.Model, cfg.Plan.Epoch, cfg.Self}
	m := &Member{
		srv: s, cfg: cfg, key: k, last: cfg.Self == len(cfg.Plan.Stages)-1,
		log: cfg.Logger.With("component", "pipeline", "model", k.model, "epoch", k.epoch, "stage", k.stage),
		in:  make(chan *Conn, 1), ready: make(chan struct{}), lost: make(chan struct{}),
	}
	m.ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := m.newPool(); err != nil {
		m.log.Info("no paged KV cache on the stage", "err", err)
	}
	if cfg.Self == 0 {
		h, err := newHead(m)
		if err != nil {
			m.cancel()
			m.closePool()
			return nil, err
		}
		m.head = h
	}
	if err := s.add(k, m); err != nil {
		m.cancel()
		if m.head != nil {
			m.head.r.Close()
		}
		m.closePool()
		return nil, err
	}
	m.wg.Add(1)
	go m.run()
	return m, nil
}

// newPool makes the stage's KV pool from the runner settings (stage 0's
// runner makes its own).
func (m *Member) newPool() error {
	if m.cfg.Self == 0 {
		return nil
	}
	rc := m.cfg.Runner
	kc := engine.DefaultKVPoolConfig()
	if rc.KVBlockSize > 0 {
		kc.BlockSize = rc.KVBlockSize
	}
	maxCtx := rc.MaxContext
	if maxCtx == 0 {
		maxCtx = m.cfg.Model.Config().ContextLength()
	}
	kc.MaxBlocks, kc.MaxBytes, kc.PrefixCache = rc.KVBlocks, rc.KVBytes, !rc.NoPrefixCache
	kc.MaxPositions = 2 * max(rc.MaxSeqs, 1) * max(maxCtx, 1)
	p, err := m.cfg.Model.NewKVPool(kc)
	if err != nil {
		return err
	}
	m.pool = p
	return nil
}

func (m *Member) closePool() {
	if m.pool != nil {
		m.pool.Close()
	}
}

// Engine is the Head serving the model's jobs on stage 0; nil on the other
// stages. It implements worker.ResumeEngine.
func (m *Member) Engine() *Head { return m.head }

// accept takes the previous stage's connection (Server.route).
func (m *Member) accept(c *Conn, h hello) error {
	prev := (m.cfg.Self + len(m.cfg.Plan.Stages) - 1) % len(m.cfg.Plan.Stages)
	if h.From != prev {
		return fmt.Errorf("connection from stage %d; stage %d takes stage %d's", h.From, m.cfg.Self, prev)
	}
	if want := m.cfg.Plan.Stages[prev].Worker; c.Peer() != want {
		return fmt.Errorf("connection from node %q; stage %d is worker %q", c.Peer(), prev, want)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gotIn || m.lostErr != nil {
		return errors.New("the member already has its previous stage's connection or is closed")
	}
	m.gotIn, m.inConn = true, c
	m.in <- c
	return nil
}

// fail marks the member lost (once) and closes its connections, so that
// its neighbours see the break and pass it on along the ring.
func (m *Member) fail(err error) {
	m.mu.Lock()
	if m.lostErr != nil {
		m.mu.Unlock()
		return
	}
	m.lostErr = err
	in, out := m.inConn, m.outConn
	m.mu.Unlock()
	close(m.lost)
	if in != nil {
		in.Close()
	}
	if out != nil {
		out.Close()
	}
	if err != nil && !errors.Is(err, errMemberClosed) {
		m.log.Warn("pipeline lost", "err", err)
	}
}

// lostError is the error of a lost member, wrapping ErrStageLost.
func (m *Member) lostError() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Errorf("%w: %s epoch %d stage %d: %v", ErrStageLost, m.key.model, m.key.epoch, m.cfg.Self, m.lostErr)
}

var errMemberClosed = errors.New("member closed")

// run connects the member and then serves: the head's replies (stage 0)
// or the stage's frames.
func (m *Member) run() {
	defer m.wg.Done()
	out, in, err := m.connect()
	if err != nil {
		m.fail(err)
		return
	}
	close(m.ready)
	if m.head != nil {
		m.fail(m.head.receive(in))
		return
	}
	m.fail(m.serve(in, out))
}

// connect dials the next stage and waits for the previous stage's
// connection.
func (m *Member) connect() (out, in *Conn, err error) {
	ctx, cancel := context.WithTimeout(m.ctx, connectWait)
	defer cancel()
	next := (m.cfg.Self + 1) % len(m.cfg.Plan.Stages)
	addr := m.cfg.Plan.Stages[next].Addr
	h, _ := json.Marshal(hello{Model: m.key.model, Epoch: m.key.epoch, From: m.cfg.Self, To: next})
	wait := 20 * time.Millisecond
	for {
		c, err := Dial(ctx, addr, m.srv.cfg.Transport)
		if err == nil {
			if want := m.cfg.Plan.Stages[next].Worker; c.Peer() != want {
				c.Close()
				return nil, nil, fmt.Errorf("stage %d at %s is node %q, the plan says %q", next, addr, c.Peer(), want)
			}
			if err = c.Send(ctx, &Frame{Kind: Hello, Payload: h}); err == nil {
				out = c
				break
			}
			c.Close()
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("connect to stage %d at %s: %w (last: %v)", next, addr, ctx.Err(), err)
		case <-time.After(wait):
			wait = min(2*wait, time.Second)
		}
	}
	m.mu.Lock()
	if m.lostErr != nil {
		m.mu.Unlock()
		out.Close()
		return nil, nil, m.lostErr
	}
	m.outConn = out
	m.mu.Unlock()
	select {
	case in = <-m.in:
		return out, in, nil
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("no connection from the previous stage: %w", ctx.Err())
	}
}

// stageSeq is a sequence as a stage other than the first keeps it.
type stageSeq struct {
	cache   *engine.Cache
	hist    []int // the tokens in the cache (the sampler's prompt + generated)
	sampler *sample.Sampler
}

// serve runs the frames of a stage other than the first until the
// connection ends.
func (m *Member) serve(in, out *Conn) error {
	seqs := map[uint64]*stageSeq{}
	defer func() {
		for _, s := range seqs {
			s.cache.Free()
		}
	}()
	ctx := m.ctx
	var f Frame
	var res Frame
	for {
		f = Frame{Hidden: f.Hidden[:0]}
		if err := in.Recv(ctx, &f); err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the previous stage closed the connection")
			}
			return err
		}
		var err error
		switch f.Kind {
		case Data:
			var reply *Frame
			if reply, err = m.forward(ctx, seqs, &f, &res); err == nil {
				err = out.Send(ctx, reply)
			} else {
				err = out.Send(ctx, failed(f.Batch, m.cfg.Self, err))
			}
		case Attach:
			if len(f.Seqs) != 1 {
				err = fmt.Errorf("attach frame with %d sequences", len(f.Seqs))
				break
			}
			if e := m.attach(seqs, &f.Seqs[0]); e != nil {
				err = out.Send(ctx, failed(f.Batch, m.cfg.Self, e))
				break
			}
			if m.last {
				f.Kind, f.Seqs[0].Tokens, f.Rows = Attached, nil, 0
			}
			err = out.Send(ctx, &f)
		case Forget:
			for _, s := range f.Seqs {
				if st := seqs[s.ID]; st != nil {
					st.cache.Free()
					delete(seqs, s.ID)
				}
			}
			if !m.last {
				err = out.Send(ctx, &f)
			}
		case Failed:
			err = out.Send(ctx, &f) // on to the head
		default:
			err = fmt.Errorf("unexpected %v frame", f.Kind)
		}
		if err != nil {
			return err
		}
	}
}

func failed(batch uint64, stage int, err error) *Frame {
	return &Frame{Kind: Failed, Batch: batch, Payload: fmt.Appendf(nil, "stage %d: %v", stage, err)}
}

func (m *Member) newCache() (*engine.Cache, error) {
	if m.pool != nil {
		return m.pool.NewCache()
	}
	return m.cfg.Model.NewCache()
}

// seq finds or makes sequence id and cuts it back to pos positions (the
// head preempted or re-attached it).
func (m *Member) seq(seqs map[uint64]*stageSeq, id uint64, pos int) (*stageSeq, error) {
	st := seqs[id]
	if st == nil {
		c, err := m.newCache()
		if err != nil {
			return nil, err
		}
		st = &stageSeq{cache: c}
		seqs[id] = st
	}
	if n := st.cache.Len(); n != pos {
		if n < pos {
			return nil, fmt.Errorf("sequence %d holds %d positions, the head %d: stages out of step", id, n, pos)
		}
		if err := st.cache.Truncate(pos); err != nil {
			return nil, fmt.Errorf("sequence %d: %w", id, err)
		}
		st.hist = st.hist[:pos]
	}
	return st, nil
}

// attach attaches the longest cached prefix of s.Tokens, at most s.Pos
// positions, and lowers s.Pos to what it attached.
func (m *Member) attach(seqs map[uint64]*stageSeq, s *Seq) error {
	st, err := m.seq(seqs, s.ID, 0)
	if err != nil {
		return err
	}
	n := 0
	if s.Pos > 0 && s.Pos < len(s.Tokens) {
		if n, err = st.cache.Attach(s.Tokens[:s.Pos+1]); err != nil {
			return err
		}
	}
	st.hist = append(st.hist[:0], s.Tokens[:n]...)
	s.Pos = n
	return nil
}

// samplerParams is a data frame's payload: the parameters of its sampled
// sequences, in frame order.
type samplerParams []sampleReq

// forward runs a data frame through the stage: the next data frame, or on
// the last stage the result for the head.
func (m *Member) forward(ctx context.Context, seqs map[uint64]*stageSeq, f, res *Frame) (*Frame, error) {
	es := make([]engine.Seq, len(f.Seqs))
	sts := make([]*stageSeq, len(f.Seqs))
	var params samplerParams
	if m.last && len(f.Payload) > 0 {
		if err := json.Unmarshal(f.Payload, &params); err != nil {
			return nil, fmt.Errorf("sampler parameters: %w", err)
		}
	}
	for i, s := range f.Seqs {
		st, err := m.seq(seqs, s.ID, s.Pos)
		if err != nil {
			return nil, err
		}
		if err := st.cache.Reserve(len(s.Tokens)); err != nil {
			return nil, fmt.Errorf("sequence %d: %w", s.ID, err)
		}
		sts[i] = st
		es[i] = engine.Seq{Cache: st.cache, Tokens: s.Tokens, PromptEnd: s.PromptEnd, AllLogits: s.AllLogits, Greedy: s.Greedy && !s.Sample}
	}
	t0 := time.Now()
	out, err := m.cfg.Model.ForwardStage(ctx, es, f.Hidden)
	m.busy(t0)
	if err != nil {
		return nil, err
	}
	for i, s := range f.Seqs {
		sts[i].hist = append(sts[i].hist, s.Tokens...)
		if s.Snapshot {
			sts[i].cache.SaveSnapshot()
		}
	}
	if !m.last {
		f.Hidden = out.Hidden
		return f, nil
	}
	*res = Frame{Kind: Result, Batch: f.Batch, Seqs: res.Seqs[:0], Hidden: res.Hidden[:0]}
	drawn, lps, err := draw(f.Seqs, sts, params, out.Logits) // logprobs.go
	if err != nil {
		return nil, err
	}
	for i, s := range f.Seqs {
		r := Seq{ID: s.ID}
		switch {
		case s.Sample:
			r.Tokens = []int{drawn[i]}
		case s.Greedy && out.Tokens[i] >= 0:
			r.Tokens = []int{out.Tokens[i]}
		default:
			r.Logits = true
			res.Cols = len(out.Logits[i])
			res.Hidden = append(res.Hidden, out.Logits[i]...)
			res.Rows++
		}
		res.Seqs = append(res.Seqs, r)
	}
	if len(lps) > 0 {
		if res.Payload, err = json.Marshal(lps); err != nil {
			return nil, fmt.Errorf("logprobs: %w", err)
		}
	}
	return res, nil
}

// MemberStats are a member's counters.
type MemberStats struct {
	// Passes is the forward passes the stage ran; Compute the time they
	// took (its layers only: busy time, beside the wall time the share
	// of it the stage worked).
	Passes  int64
	Compute time.Duration
}

// Stats returns the member's counters.
func (m *Member) Stats() MemberStats {
	return MemberStats{Passes: m.passes.Load(), Compute: time.Duration(m.computeNanos.Load())}
}

func (m *Member) busy(t0 time.Time) {
	m.passes.Add(1)
	m.computeNanos.Add(int64(time.Since(t0)))
}

// Close leaves the pipeline: the member's connections close (its
// neighbours, and so the whole ring, see the break: the Head's jobs fail
// with ErrStageLost), its goroutines stop and its caches are freed. The
// model stays open (the caller's). Idempotent. A member of an old epoch is
// closed when the plan changes.
func (m *Member) Close() error {
	m.closeOnce.Do(func() {
		m.fail(errMemberClosed)
		m.cancel()
		m.srv.remove(m.key, m)
		m.wg.Wait()
		m.mu.Lock()
		if !m.gotIn {
			m.gotIn = true // refuse late connections
		}
		m.mu.Unlock()
		select {
		case c := <-m.in:
			c.Close()
		default:
		}
		if m.head != nil {
			m.closeErr = m.head.r.Close()
		}
		m.closePool()
	})
	return m.closeErr
}
