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
	// ConnectTimeout bounds the wait for the first ring (0: 60 s);
	// HealTimeout how long a broken ring is re-connected before the member
	// gives up (0: 30 s; ring.go).
	ConnectTimeout, HealTimeout time.Duration
	Logger                      *slog.Logger
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
	case c.ConnectTimeout < 0 || c.HealTimeout < 0:
		return fmt.Errorf("pipeline member: connect timeout %v and heal timeout %v must not be negative", c.ConnectTimeout, c.HealTimeout)
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

// Member is one worker's stage of a pipelined model: it links to the next
// stage (its connection to Plan.Stages[Self+1]; the last stage's goes to
// stage 0, closing the ring) and takes the previous one's. Stage 0 serves
// the model's jobs (Engine); every other stage runs what arrives. Members
// of a plan exchange frames only with members of the same model and epoch.
// A broken link is re-connected on the same plan (ring.go).
type Member struct {
	srv  *Server
	cfg  MemberConfig
	key  memberKey
	log  *slog.Logger
	last bool

	ctx    context.Context
	cancel context.CancelFunc
	stop   <-chan struct{} // Join's ctx: the member is leaving its plan, no more healing
	lost   chan struct{}   // closed with lostErr
	inSig  chan struct{}   // (1) a connection from the previous stage arrived

	mu      sync.Mutex
	ring    *ring         // the links up now; nil while (re)connecting
	gen     uint64        // the generation connected or up: older sequences are gone
	changed chan struct{} // closed and replaced when ring changes
	pendIn  *Conn         // the previous stage's newest connection, not in a ring yet
	lostErr error         // lost for good
	closing bool

	head *Head
	pool *engine.KVPool // this stage's KV pool (nil: per-sequence caches)

	passes       atomic.Int64
	computeNanos atomic.Int64

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Join adds a member for cfg's stage to the server: it dials the next stage
// (retrying until that worker's member has joined, at most ConnectTimeout)
// and accepts the previous stage's connection. It returns at once; a
// pipeline that does not come up fails the Head's jobs with ErrStageLost,
// and so does a break (then the member re-connects, ring.go). Once ctx
// ends the member no longer heals: a broken ring is then lost for good.
// On stage 0 it starts the Head, a runner over the pipeline.
func (s *Server) Join(ctx context.Context, cfg MemberConfig) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = s.log
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectWait
	}
	if cfg.HealTimeout == 0 {
		cfg.HealTimeout = healWait
	}
	k := memberKey{cfg.Plan.Model, cfg.Plan.Epoch, cfg.Self}
	m := &Member{
		srv: s, cfg: cfg, key: k, last: cfg.Self == len(cfg.Plan.Stages)-1,
		log:  cfg.Logger.With("component", "pipeline", "model", k.model, "epoch", k.epoch, "stage", k.stage),
		stop: ctx.Done(), lost: make(chan struct{}), inSig: make(chan struct{}, 1), changed: make(chan struct{}),
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
	if m.lostErr != nil || m.closing {
		m.mu.Unlock()
		return errors.New("the member is closed")
	}
	// A new connection while a ring is up: the previous stage broke and
	// re-dialled, that generation is over (ring.go).
	old, r := m.pendIn, m.ring
	m.pendIn = c
	m.mu.Unlock()
	if old != nil {
		old.Close()
	}
	if r != nil {
		r.brk(errors.New("the previous stage re-connected"))
	}
	select {
	case m.inSig <- struct{}{}:
	default:
	}
	return nil
}

// fail marks the member lost for good (once) and closes its connections,
// so that its neighbours see the break and pass it on along the ring.
func (m *Member) fail(err error) {
	m.mu.Lock()
	if m.lostErr != nil {
		m.mu.Unlock()
		return
	}
	m.lostErr = err
	r, in := m.ring, m.pendIn
	m.pendIn = nil
	m.mu.Unlock()
	close(m.lost)
	if r != nil {
		r.brk(err)
	}
	if in != nil {
		in.Close()
	}
	if err != nil && !errors.Is(err, errMemberClosed) {
		m.log.Warn("pipeline lost", "err", err)
	}
}

// Lost is closed when the member is lost for good: closed, its first ring
// never came up, a broken ring did not come up again within HealTimeout,
// or broke after Join's ctx ended. Err says why.
func (m *Member) Lost() <-chan struct{} { return m.lost }

// Err is why the member was lost (nil while it is not).
func (m *Member) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lostErr == nil {
		return nil
	}
	return fmt.Errorf("pipeline %s epoch %d stage %d: %w", m.key.model, m.key.epoch, m.cfg.Self, m.lostErr)
}

// lostError is the error of jobs that the pipeline could not finish,
// wrapping ErrStageLost: the member is lost, or the ring broke under them
// (cause, when known).
func (m *Member) lostError(cause error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lostErr != nil {
		cause = m.lostErr
	}
	if cause == nil {
		cause = errors.New("the ring broke and re-connected since")
	}
	return fmt.Errorf("%w: %s epoch %d stage %d: %v", ErrStageLost, m.key.model, m.key.epoch, m.cfg.Self, cause)
}

var errMemberClosed = errors.New("member closed")

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
		if err := m.embedSeq(seqs, s); err != nil { // embed.go
			return nil, err
		}
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
	out, err := m.stagePass(ctx, es, f) // embed.go
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
		m.mu.Lock()
		m.closing = true // refuse late connections
		m.mu.Unlock()
		m.cancel()
		m.fail(errMemberClosed)
		m.srv.remove(m.key, m)
		m.wg.Wait()
		m.mu.Lock()
		in := m.pendIn
		m.pendIn = nil
		m.mu.Unlock()
		if in != nil {
			in.Close()
		}
		if m.head != nil {
			m.closeErr = m.head.r.Close()
		}
		m.closePool()
	})
	return m.closeErr
}
