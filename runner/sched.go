package runner

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/sample"
)

// lane is one scheduler loop and its channels. A runner has one lane, or
// Config.Lanes of them over a pipeline (every sequence stays on the lane it
// started on, so that while one lane's pass is on a later stage, another's
// runs on the first: docs/engine.md, "Pipeline execution").
type lane struct {
	steps chan *stepReq
	leave chan *seq
	seqs  int // sequences started on the lane (Runner.laneMu)
}

// start starts the scheduler lanes.
func (e *Runner) start() {
	n := max(e.cfg.Lanes, 1)
	e.fwd = e.cfg.Forward
	if e.fwd == nil {
		e.fwd = localForward{e.model}
		n = 1
	}
	for range n {
		l := &lane{steps: make(chan *stepReq), leave: make(chan *seq)}
		e.lanes = append(e.lanes, l)
		e.wg.Add(1)
		go e.loop(l)
	}
}

// newSeq is a sequence on cache, on the lane with the fewest sequences.
func (e *Runner) newSeq(cache *engine.Cache, promptEnd int) *seq {
	e.laneMu.Lock()
	l := e.lanes[0]
	for _, x := range e.lanes[1:] {
		if x.seqs < l.seqs {
			l = x
		}
	}
	l.seqs++
	e.laneMu.Unlock()
	return &seq{cache: cache, res: make(chan stepResult, 1), promptEnd: promptEnd, id: e.seqIDs.Add(1), lane: l}
}

// ActiveLanes is the number of scheduler lanes with sequences now (a
// pipeline Head merges the passes of that many lanes: package pipeline).
func (e *Runner) ActiveLanes() int {
	e.laneMu.Lock()
	defer e.laneMu.Unlock()
	n := 0
	for _, l := range e.lanes {
		if l.seqs > 0 {
			n++
		}
	}
	return n
}

// errClosed is returned to sequences still running when the Engine closes.
var errClosed = errors.New("serve: engine closed")

// seq is one generating sequence (one choice of one job) as the scheduler
// sees it. Its cache is touched by the scheduler goroutine only, from the
// sequence's first step until the scheduler has processed its leave (done);
// the owning goroutine frees it afterwards.
type seq struct {
	cache *engine.Cache
	res   chan stepResult // capacity 1
	id    uint64          // names the sequence to the Forwarder
	lane  *lane           // the scheduler lane that runs it
	// promptEnd is the prompt's length: positions from it on are generated
	// and computed as decode steps compute them even when prefilled (a
	// failover resume, a recompute after preemption): engine.Seq.PromptEnd.
	promptEnd int

	// Scheduler-goroutine state.
	order   uint64   // admission order (0: not admitted: waiting for blocks)
	started bool     // admitted at least once
	hist    []int    // after a preemption while idle: tokens to recompute first
	snapAt  int      // cache length at which to snapshot recurrent state (0: none)
	pending *stepReq // the step the scheduler holds, if any
}

// stepReq is one step of a sequence: tokens to run through its cache before
// answering with the logits of the last one. A prompt is one step; the
// scheduler feeds it in chunks.
type stepReq struct {
	ctx    context.Context
	s      *seq
	tokens []int          // to feed; after a preemption, the recomputed history first
	off    int            // tokens[:off] are in the cache
	cached int            // positions the prefix cache supplied at first admission
	first  bool           // the sequence's first step (its prompt)
	greedy bool           // only the argmax of the last logits is needed (engine.Seq.Greedy)
	sample *sample.Params // the Forwarder draws the token with these parameters (Forwarder.Samples)
	choice *sample.Choice // with sample: the Forwarder also fills its logprobs (PassSeq.Choice)
	hashes []uint64       // block hashes of tokens (twin detection), computed on demand
}

type stepResult struct {
	logits []float32      // nil when the step was greedy and the backend picked token
	token  int            // greedy steps: the argmax of the logits
	choice *sample.Choice // the Forwarder drew token and computed its logprobs (stepReq.choice)
	cached int
	err    error
}

// batchWait bounds how long the scheduler waits for the sequences of the
// last batch to come back with their next token before running without
// them (a sequence whose consumer is slow must not stall the others).
const batchWait = 20 * time.Millisecond

// idleWait is how often the scheduler looks at waiting requests (cancelled
// ones leave) while none can run.
const idleWait = 20 * time.Millisecond

// sched is the scheduler goroutine's state.
type sched struct {
	pending  []*stepReq    // arrival order
	live     map[*seq]bool // sequences that submitted a step and have not left
	awaiting map[*seq]bool // served last pass, not yet back
	admitted uint64        // admission counter
	// Pipelined greedy decoding (pipelined.go): the backend keeps token
	// ids on the device; spec is the speculative step in flight.
	pipelined bool
	spec      *speculation
}

// item is one sequence's share of a forward pass.
type item struct {
	r *stepReq
	n int
}

// loop is the scheduler, iteration-level: every pass it takes one step of
// every running sequence (decode tokens first, oldest sequences first), then
// prompt chunks (at most PrefillChunk tokens each, MaxBatchTokens in all),
// admits waiting sequences whose blocks fit, and runs them all in one
// Forward. Sequences join and leave between any two passes. When the KV
// pool runs out of blocks mid-generation the newest sequence is preempted:
// its blocks are freed and its prompt + generated tokens recomputed later
// (through the prefix cache when its blocks are still cached). After a pass
// it waits (up to batchWait) for the sequences it answered to come back,
// so that decodes stay in lockstep. Owned by the Engine; stopped by Close.
func (e *Runner) loop(l *lane) {
	defer e.wg.Done()
	st := &sched{live: map[*seq]bool{}, awaiting: map[*seq]bool{}, pipelined: e.deviceTokens()}
	defer st.dropSpec()
	add := func(r *stepReq) {
		s := r.s
		delete(st.awaiting, s)
		st.live[s] = true
		if s.hist != nil {
			r.tokens = append(s.hist, r.tokens...)
			s.hist = nil
		}
		s.pending = r
		st.pending = append(st.pending, r)
	}
	leave := func(s *seq) {
		delete(st.awaiting, s)
		delete(st.live, s)
	}
	for {
		// Block until there is work.
		for len(st.pending) == 0 {
			select {
			case r := <-l.steps:
				add(r)
			case s := <-l.leave:
				leave(s)
			case <-e.quit:
				return
			}
		}
		// Gather: everything queued now, and the sequences of the last
		// batch for a short while.
		timer := time.NewTimer(batchWait)
	gather:
		for {
			if len(st.awaiting) == 0 {
				select {
				case r := <-l.steps:
					add(r)
					continue
				case s := <-l.leave:
					leave(s)
					continue
				default:
					break gather
				}
			}
			select {
			case r := <-l.steps:
				add(r)
			case s := <-l.leave:
				leave(s)
			case <-timer.C:
				break gather
			case <-e.quit:
				timer.Stop()
				e.failAll(st.pending)
				return
			}
		}
		timer.Stop()
		if e.resolveSpec(st) {
			continue
		}
		batch := e.schedule(st)
		if len(batch) == 0 {
			// Everything waits for blocks: wait for a change.
			select {
			case r := <-l.steps:
				add(r)
			case s := <-l.leave:
				leave(s)
			case <-time.After(idleWait):
			case <-e.quit:
				e.failAll(st.pending)
				return
			}
			continue
		}
		if st.pipelined && pipelinable(batch) && e.runPipelined(st, batch) {
			continue
		}
		pass := make([]PassSeq, len(batch))
		for i, it := range batch {
			s := it.r.s
			pass[i] = PassSeq{Seq: engine.Seq{Cache: s.cache, Tokens: it.r.tokens[it.r.off : it.r.off+it.n], Greedy: it.r.greedy, PromptEnd: s.promptEnd},
				ID: s.id, Snapshot: s.snapAt > 0 && s.cache.Len()+it.n == s.snapAt}
			if it.r.off+it.n == len(it.r.tokens) {
				pass[i].Sample = it.r.sample // only the step's last chunk draws
				if it.r.sample != nil {
					pass[i].Choice = it.r.choice
				}
			}
		}
		t0 := time.Now()
		logits, toks, err := e.fwd.Forward(context.Background(), pass)
		e.forwardNanos.Add(int64(time.Since(t0)))
		e.passes.Add(1)
		clear(st.awaiting)
		for i, it := range batch {
			r, s := it.r, it.r.s
			if err != nil {
				e.answer(st, r, stepResult{err: err})
				continue
			}
			r.off += it.n
			if s.snapAt > 0 && s.cache.Len() == s.snapAt {
				s.cache.SaveSnapshot()
				s.snapAt = 0
			}
			if r.off == len(r.tokens) {
				st.awaiting[s] = true
				e.answer(st, r, stepResult{logits: logits[i], token: toks[i], cached: r.cached, choice: pass[i].Choice})
			}
		}
	}
}

// answer sends a step's result and forgets the step.
func (e *Runner) answer(st *sched, r *stepReq, res stepResult) {
	r.s.pending = nil
	if i := slices.Index(st.pending, r); i >= 0 {
		st.pending = slices.Delete(st.pending, i, i+1)
	}
	r.s.res <- res
}

// schedule picks this pass's work and reserves its KV blocks: admitted
// sequences' decode steps, then their prompt chunks, oldest first; then
// waiting sequences in arrival order while their blocks fit (one that does
// not fit blocks those behind it). Cancelled waiting steps are answered
// with their context's error. Blocks that run out are taken from the
// newest admitted sequence (preemption).
func (e *Runner) schedule(st *sched) []item {
	for _, r := range slices.Clone(st.pending) {
		if err := r.ctx.Err(); err != nil {
			e.answer(st, r, stepResult{err: err})
		}
	}
	var decode, prefill, waiting []*stepReq
	for _, r := range st.pending {
		switch {
		case r.s.order == 0:
			waiting = append(waiting, r)
		case len(r.tokens)-r.off == 1:
			decode = append(decode, r)
		default:
			prefill = append(prefill, r)
		}
	}
	byOrder := func(a, b *stepReq) int { return int(a.s.order) - int(b.s.order) }
	slices.SortStableFunc(decode, byOrder)
	slices.SortStableFunc(prefill, byOrder)

	var batch []item
	budget := e.cfg.MaxBatchTokens
	take := func(r *stepReq) {
		s := r.s
		if s.order == 0 || s.pending != r {
			return // preempted (or answered) earlier in this pass
		}
		n := min(len(r.tokens)-r.off, e.cfg.PrefillChunk, budget)
		if n <= 0 {
			return
		}
		pos := s.cache.Len()
		n = e.alignChunk(s, pos, n, len(r.tokens)-r.off)
		if s.snapAt > pos && s.snapAt < pos+n {
			n = s.snapAt - pos // end the chunk where the snapshot is taken
		}
		for {
			err := s.cache.Reserve(n)
			if err == nil {
				break
			}
			v := e.victim(st)
			if v == nil || v == s {
				e.preempt(st, s)
				if v == nil && len(e.lanes) == 1 {
					e.answer(st, r, stepResult{err: err})
				}
				// With several lanes the blocks may be another lane's:
				// s waits for them (admit refuses what can never fit).
				return
			}
			if i := slices.IndexFunc(batch, func(it item) bool { return it.r.s == v }); i >= 0 {
				budget += batch[i].n
				batch = slices.Delete(batch, i, i+1)
			}
			e.preempt(st, v)
		}
		batch = append(batch, item{r, n})
		budget -= n
	}
	for _, r := range decode {
		take(r)
	}
	for _, r := range prefill {
		if budget <= 0 {
			break
		}
		take(r)
	}
	// Prompts sharing most of their blocks with a prompt being prefilled
	// wait for it and take its blocks from the prefix cache (n > 1 choices,
	// identical requests arriving together).
	var twins []*stepReq
	share := e.pool != nil && !e.cfg.NoPrefixCache
	if share {
		for _, r := range prefill {
			if r.first {
				twins = append(twins, r)
			}
		}
	}
	for _, r := range waiting {
		if budget <= 0 {
			break
		}
		if e.waitForTwin(r, twins) {
			continue
		}
		ok, err := e.admit(st, r)
		if err != nil {
			e.answer(st, r, stepResult{err: err})
			continue
		}
		if !ok {
			break
		}
		take(r)
		if r.first && share { // also the first of twins admitted together in this step
			twins = append(twins, r)
		}
	}
	return batch
}

// alignChunk ends a prompt chunk of n tokens at pos of a hybrid model at a
// multiple of engine.Model.PrefillAlign (the delta rule's chunk) or at the
// prompt's end, so that the chunking changes no bits of the sequence
// (engine.DeltaNetChunk, docs/engine.md, "Batch invariance"): it shortens the chunk,
// or, when that leaves nothing, lengthens it to the next multiple (then the
// pass exceeds PrefillChunk or MaxBatchTokens by less than one multiple).
// rest is the tokens of the step not yet fed. Generated tokens (a resume,
// a recompute) are fed one per row and cut anywhere.
func (e *Runner) alignChunk(s *seq, pos, n, rest int) int {
	return alignedChunk(e.model.PrefillAlign(), pos, n, rest, s.promptEnd)
}

// alignedChunk is alignChunk for alignment a and a prompt ending at
// promptEnd (0: unknown, no alignment).
func alignedChunk(a, pos, n, rest, promptEnd int) int {
	end := pos + n
	if a <= 1 || promptEnd <= 0 || end >= promptEnd || end%a == 0 {
		return n
	}
	if down := end / a * a; down > pos {
		return down - pos
	}
	return min((pos/a+1)*a, promptEnd, pos+rest) - pos
}

// minTwinBlocks is the fewest shared blocks worth waiting for.
const minTwinBlocks = 4

// waitForTwin says whether waiting prompt r shares at least minTwinBlocks
// and half of its full blocks with a prompt being prefilled.
func (e *Runner) waitForTwin(r *stepReq, twins []*stepReq) bool {
	if !r.first || len(twins) == 0 {
		return false
	}
	bs := e.pool.BlockSize()
	if r.hashes == nil {
		r.hashes = engine.BlockHashes(r.tokens, bs)
	}
	for _, t := range twins {
		if t.hashes == nil {
			t.hashes = engine.BlockHashes(t.tokens, bs)
		}
		n := 0
		for n < len(r.hashes) && n < len(t.hashes) && r.hashes[n] == t.hashes[n] {
			n++
		}
		// Worth it only if the twin has not passed those blocks already
		// (then the prefix cache has them and admission attaches them).
		if n >= minTwinBlocks && 2*n >= len(r.hashes) && t.s.cache.Len() < n*bs {
			return true
		}
	}
	return false
}

// admit starts a waiting sequence: it attaches the longest cached prefix
// and admits the sequence if the blocks for the rest of its tokens are
// available now. A sequence that can never fit gets an error.
func (e *Runner) admit(st *sched, r *stepReq) (bool, error) {
	s := r.s
	p := e.pool
	if p != nil {
		if need := p.BlocksFor(len(r.tokens) + 1); need > p.Blocks() {
			return false, openai.Unavailable("sequence of %d tokens needs %d KV blocks; the pool has %d", len(r.tokens), need, p.Blocks())
		}
		attach := r.tokens
		if p.NeedsSnapshots() && s.promptEnd > 0 && len(attach) > s.promptEnd+1 {
			// hybrid: a resume attaches prompt positions only; the
			// state past them would not be its own decode steps' bits.
			attach = attach[:s.promptEnd+1]
		}
		n, err := s.cache.Attach(attach)
		if err != nil {
			return false, err
		}
		fits := func() bool { return p.BlocksFor(len(r.tokens))-s.cache.Blocks() <= p.Available() }
		if !fits() {
			if n > 0 {
				s.cache.Truncate(0)
			}
			return false, nil
		}
		if n > 0 && e.cfg.Forward != nil {
			// Admitted here: the other stages attach too (what they hold
			// may be less, and then the rest must still fit). A sequence
			// not admitted after all leaves them nothing held.
			if n, err = e.attachOthers(r.ctx, s, attach, n); err != nil {
				e.fwd.Forget(s.id)
				return false, err
			}
			if !fits() {
				s.cache.Truncate(0)
				e.fwd.Forget(s.id)
				return false, nil
			}
		}
		r.off = n
		if r.first && !s.started {
			r.cached = n
		}
		if r.first && p.NeedsSnapshots() {
			// Hybrid models resume only at snapshots: take one at the
			// last multiple of SnapshotStride before the prompt's last
			// token (a resume's generated tokens excluded), where the
			// recurrent state does not depend on the prompt's chunking.
			end := len(r.tokens) - 1
			if s.promptEnd > 0 {
				end = min(end, s.promptEnd)
			}
			if stride := p.SnapshotStride(); end/stride*stride > n {
				s.snapAt = end / stride * stride
			}
		}
	}
	st.admitted++
	s.order, s.started = st.admitted, true
	return true, nil
}

// victim is the newest admitted sequence holding blocks, or nil.
func (e *Runner) victim(st *sched) *seq {
	var v *seq
	for s := range st.live {
		if s.order != 0 && s.cache.Blocks() > 0 && (v == nil || s.order > v.order) {
			v = s
		}
	}
	return v
}

// preempt frees s's blocks; its tokens are recomputed when it is admitted
// again (its full blocks stay in the prefix cache until evicted).
func (e *Runner) preempt(st *sched, s *seq) {
	// The other stages of a pipeline free theirs too (the recompute starts
	// from position 0 there as well), so that their pools, sized as this
	// one, have the blocks this one gives to another sequence: first, so
	// that no pass using those blocks reaches them before.
	e.fwd.Forget(s.id)
	hist := s.cache.Tokens()
	if err := s.cache.Truncate(0); err != nil {
		e.log.Error("preempt: truncate", "err", err)
	}
	s.order, s.snapAt = 0, 0
	e.preemptions.Add(1)
	if r := s.pending; r != nil {
		r.tokens = append(hist, r.tokens[r.off:]...)
		r.off = 0
		return
	}
	s.hist = hist
}

func (e *Runner) failAll(rs []*stepReq) {
	for _, r := range rs {
		r.s.res <- stepResult{err: errClosed}
	}
}

// step runs tokens through s's cache and returns the logits of the last
// one (and, for the first step, how many prompt positions came from the
// prefix cache). Once submitted, the scheduler answers it: with the result,
// or with ctx's error if ctx ends before the step runs.
func (e *Runner) step(ctx context.Context, s *seq, tokens []int, first bool) stepResult {
	return e.stepGreedy(ctx, s, tokens, first, false)
}

// stepGreedy is step; with greedy, the result carries the argmax of the
// logits in token, and (on a backend that computes it on the device,
// engine.ArgmaxOps) no logits.
func (e *Runner) stepGreedy(ctx context.Context, s *seq, tokens []int, first, greedy bool) stepResult {
	return e.stepWith(ctx, &stepReq{ctx: ctx, s: s, tokens: tokens, first: first, greedy: greedy})
}

// stepWith submits r and waits for its result.
func (e *Runner) stepWith(ctx context.Context, r *stepReq) stepResult {
	s := r.s
	select {
	case s.lane.steps <- r:
	case <-ctx.Done():
		return stepResult{err: ctx.Err()}
	case <-e.quit:
		return stepResult{err: errClosed}
	}
	// The loop answers every step it took (the channel is unbuffered, so
	// a sent step was taken), also when it quits.
	return <-s.res
}

// done tells the scheduler that s submits no more steps.
func (e *Runner) done(s *seq) {
	select {
	case s.lane.leave <- s:
	case <-e.quit:
	}
	e.laneMu.Lock()
	s.lane.seqs--
	e.laneMu.Unlock()
	e.fwd.Forget(s.id)
}

// attachOthers makes the Forwarder's other stages hold the same prefix as
// s's cache, which attached n positions of tokens: they attach what they
// have of it, and while that is less, s's cache attaches again up to that
// (with recurrent layers a shorter prefix may attach shorter still), until
// every stage holds the same positions. It returns them.
func (e *Runner) attachOthers(ctx context.Context, s *seq, tokens []int, n int) (int, error) {
	if e.cfg.Forward == nil {
		return n, nil
	}
	for n > 0 {
		m, err := e.fwd.Attach(ctx, s.id, tokens[:n+1])
		if err != nil {
			s.cache.Truncate(0)
			return 0, err
		}
		if m >= n {
			return n, nil
		}
		if err := s.cache.Truncate(0); err != nil {
			return 0, err
		}
		if n, err = s.cache.Attach(tokens[:m+1]); err != nil {
			return 0, err
		}
	}
	return 0, nil
}
