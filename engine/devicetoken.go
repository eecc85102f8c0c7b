package engine

import (
	"context"
	"errors"
	"fmt"
)

// DeviceTokenOps is optionally implemented by backends that can keep greedy
// token ids on the device (metal): the argmax of a step is written into a
// device buffer (a token slot) that the next step's embedding reads
// directly, so a decode loop can encode step N+1 while step N still runs
// and read the ids back only to stream them and to check for a stop
// (Model.DecodeGreedy). Backends without it keep the plain path.
type DeviceTokenOps interface {
	ArgmaxOps
	// TokenSlots is the number of token slots (at least 3: two steps in
	// flight and the one being read).
	TokenSlots() int
	// ArgmaxTokens encodes the argmax of every row of t (the lowest index
	// on ties, as Argmax) into token slot slot, row r into entry r, and
	// submits the work encoded so far without waiting for it.
	ArgmaxTokens(t Tensor, slot int)
	// WaitTokens waits for the work that the last ArgmaxTokens into slot
	// submitted (not for work submitted after it) and copies the ids into
	// dst (len = that call's rows).
	WaitTokens(slot int, dst []int) error
}

// deviceTokenRows bounds the rows of one token slot in a DeviceToken id.
const deviceTokenRows = 1 << 16

// DeviceToken is the token id that stands for entry row of token slot slot
// (a negative number): Embed of a DeviceTokenOps backend reads the id from
// the device instead. Only Model.DecodeGreedy puts such ids into a batch.
func DeviceToken(slot, row int) int { return -1 - (slot*deviceTokenRows + row) }

// DeviceTokenSlot decodes a DeviceToken id; ok is false for a plain id.
func DeviceTokenSlot(id int) (slot, row int, ok bool) {
	if id >= 0 {
		return 0, 0, false
	}
	v := -1 - id
	return v / deviceTokenRows, v % deviceTokenRows, true
}

// GreedySeq is one sequence of DecodeGreedy: its cache and the tokens fed
// first (the rest of its prompt, or the last token it generated).
type GreedySeq struct {
	Cache     *Cache
	Tokens    []int
	PromptEnd int // as Seq.PromptEnd
}

// DecodeGreedy decodes the sequences greedily, in lockstep, until accept
// has returned false for each: accept(i, tok) receives every token of
// sequence i in order; false means i has ended with tok (tok is not fed
// to its cache). Afterwards each cache holds what the plain loop —
// ForwardGreedy of the last token until accept says stop — leaves in it:
// its tokens and every accepted token except the last, which is known but
// not yet fed (the final one accept refused is not fed either).
//
// On a backend with DeviceTokenOps the ids never leave the device between
// steps: step N+1 (embedding step N's ids from the device) is encoded and
// submitted before step N's ids are read back, so two steps are in flight
// and the CPU's work (encoding, accept) overlaps the GPU's. A step encoded
// for a sequence that then stops (overshoot: EOS, a stop string, the
// token limit) is rolled back: its cache positions are truncated (KV
// positions dropped, a recurrent state restored to the step before), its
// token is never passed to accept, so tokens, logits-derived ids and cache
// state equal the plain loop's. Other backends run the plain loop.
//
// ctx ends the loop between steps (accept has then seen every token of the
// steps run) and its error is returned.
func (m *Model) DecodeGreedy(ctx context.Context, seqs []GreedySeq, accept func(i, tok int) bool) error {
	if !m.whole() {
		return m.stageErr("decode")
	}
	dt, ok := m.be.(DeviceTokenOps)
	if !ok {
		return m.decodeGreedyPlain(ctx, seqs, accept)
	}
	if dt.TokenSlots() < 3 {
		return fmt.Errorf("decode: backend %s has %d token slots, need 3", m.be.Name(), dt.TokenSlots())
	}
	tokens := make([][]int, len(seqs))
	all := make([]int, len(seqs))
	for i, s := range seqs {
		tokens[i], all[i] = s.Tokens, i
	}
	slot := m.takeSlot(dt)
	in, err := m.launchGreedy(dt, seqs, all, tokens, slot)
	if err != nil {
		return err
	}
	// cur: the live sequences of the step in slot, with their rows there;
	// curN: the rows of that step (sequences stopped since included).
	cur, curN := rowsOf(in), len(in)
	for {
		// Encode the next step before reading this one's ids: every live
		// sequence feeds the id its current step leaves on the device.
		var next []stepRow
		nextN, nslot := 0, m.takeSlot(dt)
		if ctx.Err() == nil {
			idx := make([]int, len(cur))
			for k, c := range cur {
				idx[k] = c.seq
				tokens[c.seq] = []int{DeviceToken(slot, c.row)}
			}
			nin, lerr := m.launchGreedy(dt, seqs, idx, tokens, nslot)
			if lerr != nil {
				err = lerr
			} else {
				next, nextN = rowsOf(nin), len(nin)
			}
		}
		ids := make([]int, curN)
		if werr := m.waitTokens(dt, slot, ids); werr != nil {
			// The device failed: nothing it returned is trusted. The
			// launched steps are rolled back as far as the caches allow.
			if next != nil {
				m.drain(dt, nslot, nextN)
				m.rollbackStep(seqs, next)
			}
			m.rollbackStep(seqs, cur)
			return fmt.Errorf("decode: %w", werr)
		}
		var stay []stepRow
		for k, c := range cur {
			// next, when launched, has cur's sequences in cur's order.
			if accept(c.seq, ids[c.row]) {
				if next != nil {
					seqs[c.seq].Cache.fedToken(ids[c.row]) // the id its next step fed
					stay = append(stay, next[k])
				}
			} else if next != nil {
				if rerr := m.rollbackStep(seqs, next[k:k+1]); rerr != nil && err == nil {
					err = rerr
				}
			}
		}
		if next == nil {
			if err == nil {
				err = ctx.Err()
			}
			return err
		}
		slot = nslot
		if len(stay) == 0 || err != nil {
			// Everything stopped: the overshoot step still runs; wait for
			// it so that nothing of this loop is in flight on return.
			m.drain(dt, slot, nextN)
			return err
		}
		cur, curN = stay, nextN
	}
}

// waitTokens is dt.WaitTokens under the model's lock: the backend is used
// by one goroutine at a time (a Forward of another may be encoding).
func (m *Model) waitTokens(dt DeviceTokenOps, slot int, dst []int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return dt.WaitTokens(slot, dst)
}

// takeSlot is the next device token slot, round robin: a slot is reused
// TokenSlots launches later, after the step written into it was read (at
// most two steps are in flight).
func (m *Model) takeSlot(dt DeviceTokenOps) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.tokSlot
	m.tokSlot = (m.tokSlot + 1) % dt.TokenSlots()
	return s
}

// stepRow is a sequence of DecodeGreedy and its row in a step's token slot.
type stepRow struct{ seq, row int }

func rowsOf(in []int) []stepRow {
	out := make([]stepRow, len(in))
	for r, i := range in {
		out[r] = stepRow{i, r}
	}
	return out
}

// drain waits for the step in slot and forgets its ids.
func (m *Model) drain(dt DeviceTokenOps, slot, n int) {
	_ = m.waitTokens(dt, slot, make([]int, n)) // its error concerns rolled-back work
}

// launchGreedy encodes one greedy step of sequences idx (entries -1 are
// skipped, keeping rows aligned with the slot of the step before; their
// rows are not part of the batch) with tokens[i] as their new tokens, the
// argmax into token slot slot, and submits it. The caches' lengths include
// the step at once (the next step's positions follow it); a device token
// fed is recorded in a paged cache's token list once known (fedToken).
func (m *Model) launchGreedy(dt DeviceTokenOps, seqs []GreedySeq, idx []int, tokens [][]int, slot int) ([]int, error) {
	vocab := m.arch.VocabSize()
	b := &Batch{}
	var in []int
	seen := map[*Cache]bool{}
	for _, i := range idx {
		if i < 0 {
			continue
		}
		s := seqs[i]
		c := s.Cache
		switch {
		case c == nil || c.freed:
			return nil, fmt.Errorf("decode: sequence %d has no cache (nil or freed)", i)
		case c.m != m:
			return nil, fmt.Errorf("decode: sequence %d: cache belongs to another model", i)
		case seen[c]:
			return nil, fmt.Errorf("decode: sequence %d: cache used twice in one batch", i)
		case len(tokens[i]) == 0:
			return nil, fmt.Errorf("decode: sequence %d has no tokens", i)
		}
		seen[c] = true
		for _, id := range tokens[i] {
			if _, _, dev := DeviceTokenSlot(id); !dev && id >= vocab {
				return nil, fmt.Errorf("decode: sequence %d: token id %d out of range [0,%d)", i, id, vocab)
			}
		}
		row, pos, n := len(b.Tokens), c.n, len(tokens[i])
		b.Seqs = append(b.Seqs, BatchSeq{Layers: c.layers, Row: row, N: n, Pos: pos, GEMMRows: gemmRows(s.PromptEnd, pos, n)})
		b.Tokens = append(b.Tokens, tokens[i]...)
		for j := range n {
			b.Positions = append(b.Positions, pos+j)
		}
		b.Outputs = append(b.Outputs, row+n-1)
		in = append(in, i)
	}
	for k, i := range in {
		if err := seqs[i].Cache.Reserve(len(tokens[i])); err != nil {
			for _, j := range in[:k] {
				if c := seqs[j].Cache; c.paged != nil {
					c.paged.trimBlocks(c.n)
				}
			}
			return nil, fmt.Errorf("decode: sequence %d: %w", i, err)
		}
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, errClosed
	}
	res, err := m.arch.Forward(b)
	if err == nil {
		dt.ArgmaxTokens(res, slot)
		m.be.Release(res)
	}
	m.mu.Unlock()
	if err != nil {
		for k, i := range in {
			c := seqs[i].Cache
			for _, l := range b.Seqs[k].Layers {
				l.Truncate(c.n) // undo partial writes; best effort
			}
			if c.paged != nil {
				c.paged.trimBlocks(c.n)
			}
		}
		return nil, fmt.Errorf("decode: %w", err)
	}
	for _, i := range in {
		c := seqs[i].Cache
		c.n += len(tokens[i])
		if c.paged != nil {
			var known []int
			for _, id := range tokens[i] {
				if _, _, dev := DeviceTokenSlot(id); !dev {
					known = append(known, id)
				}
			}
			c.paged.appended(known)
		}
	}
	return in, nil
}

// fedToken records the id a device token turned out to be in a paged
// cache's token list (prefix-cache hashes, preemption history).
func (c *Cache) fedToken(tok int) {
	if c.paged != nil {
		c.paged.appended([]int{tok})
	}
}

// rollbackStep drops the last position of each sequence in rows: a step
// encoded for it that must not count (overshoot, or a failed device). The
// position dropped lies in no shared block (a block is shared once full
// and registered, which needs the token recorded), so nothing is copied;
// a recurrent state goes back one step (its double buffer).
func (m *Model) rollbackStep(seqs []GreedySeq, rows []stepRow) error {
	var first error
	for _, r := range rows {
		c := seqs[r.seq].Cache
		if err := c.Truncate(c.n - 1); err != nil && first == nil {
			first = fmt.Errorf("decode: roll back sequence %d: %w", r.seq, err)
		}
	}
	return first
}

// decodeGreedyPlain is DecodeGreedy without device tokens: one
// ForwardGreedy per step, the ids read back before the next is encoded.
func (m *Model) decodeGreedyPlain(ctx context.Context, seqs []GreedySeq, accept func(i, tok int) bool) error {
	live := make([]int, len(seqs))
	next := make([][]int, len(seqs))
	for i, s := range seqs {
		live[i], next[i] = i, s.Tokens
	}
	for len(live) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch := make([]Seq, len(live))
		for k, i := range live {
			batch[k] = Seq{Cache: seqs[i].Cache, Tokens: next[i], Greedy: true, PromptEnd: seqs[i].PromptEnd}
		}
		_, toks, err := m.ForwardGreedy(ctx, batch)
		if err != nil {
			return err
		}
		var stay []int
		for k, i := range live {
			if toks[k] < 0 {
				return errors.New("decode: no greedy token")
			}
			if accept(i, toks[k]) {
				stay = append(stay, i)
				next[i] = []int{toks[k]}
			}
		}
		live = stay
	}
	return nil
}

// GreedyStep is one greedy decode step launched on a DeviceTokenOps backend
// (LaunchGreedy): encoded and submitted, its ids on the device until Wait.
// The caches' lengths include it from the launch on. A step that feeds a
// token of an earlier step (Next) must have that token recorded with
// Confirm once it is known, or be rolled back with Drop. One goroutine
// uses a step, as it uses the caches.
type GreedyStep struct {
	m      *Model
	dt     DeviceTokenOps
	slot   int
	seqs   []GreedySeq
	in     []int // indices into seqs, in row order
	row    map[int]int
	toks   []int
	err    error
	waited bool
}

// LaunchGreedy encodes one greedy decode step of seqs (each with its new
// tokens: host ids, or Next of an earlier step) and submits it without
// waiting. ErrNoDeviceTokens if the backend cannot keep ids on the device.
func (m *Model) LaunchGreedy(seqs []GreedySeq) (*GreedyStep, error) {
	dt, ok := m.be.(DeviceTokenOps)
	if !ok {
		return nil, ErrNoDeviceTokens
	}
	if !m.whole() {
		return nil, m.stageErr("decode")
	}
	slot := m.takeSlot(dt)
	idx := make([]int, len(seqs))
	tokens := make([][]int, len(seqs))
	for i, s := range seqs {
		idx[i], tokens[i] = i, s.Tokens
	}
	in, err := m.launchGreedy(dt, seqs, idx, tokens, slot)
	if err != nil {
		return nil, err
	}
	st := &GreedyStep{m: m, dt: dt, slot: slot, seqs: append([]GreedySeq(nil), seqs...), in: in, row: make(map[int]int, len(in))}
	for r, i := range in {
		st.row[i] = r
	}
	return st, nil
}

// ErrNoDeviceTokens: the backend does not implement DeviceTokenOps.
var ErrNoDeviceTokens = errors.New("engine: backend keeps no token ids on the device")

// Next is the token id that feeds sequence i's greedy token of this step to
// a later step without reading it back.
func (st *GreedyStep) Next(i int) int { return DeviceToken(st.slot, st.row[i]) }

// Wait waits for this step (not for steps launched after it) and returns
// the greedy id of every sequence, in the order given to LaunchGreedy.
func (st *GreedyStep) Wait() ([]int, error) {
	if !st.waited {
		st.waited = true
		st.toks = make([]int, len(st.in))
		st.err = st.m.waitTokens(st.dt, st.slot, st.toks)
	}
	return st.toks, st.err
}

// Confirm records, for sequence i of a step that fed a device token, the
// id that token turned out to be (Wait of the step that made it).
func (st *GreedyStep) Confirm(i, tok int) { st.seqs[i].Cache.fedToken(tok) }

// Drop rolls sequence i's position of this step back (a step encoded
// before its sequence stopped): the cache is as if it had never been
// launched for i. Only the latest step of a sequence can be dropped.
func (st *GreedyStep) Drop(i int) error {
	return st.m.rollbackStep(st.seqs, []stepRow{{seq: i}})
}
