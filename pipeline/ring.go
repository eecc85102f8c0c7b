package pipeline

// A member's links and how they heal (docs/cluster.md, "Pipelined models").
//
// A member holds two connections: out to the next stage (it dials it) and
// in from the previous one (accepted by the Server). Together they are one
// generation of the ring, a ring value. When either breaks (the peer
// closed or reset it, a send failed, or the peer went silent for
// Config.PeerTimeout: a dead peer or a black hole) the member closes both,
// so that its neighbours see the break and pass it on: every member of the
// ring drops that generation. A new connection from the previous stage
// also ends the current generation (that stage broke and re-dialled). Then
// each member dials its next stage again (backoff 20 ms doubling to 1 s)
// and takes the previous stage's new connection: the next generation, on
// the same plan and epoch.
//
// Every sequence the stages held in the broken generation is gone from the
// other stages (their caches are freed with it): the Head fails its jobs
// with ErrStageLost (the worker hands them back; the coordinator resumes
// them from their tokens), also those not in flight at the break (their
// next pass would reach stages that never heard of them). New and resumed
// jobs wait for the next generation.
//
// A ring that is not up again within HealTimeout (MemberConfig; 30 s) is
// given up: the member is lost for good (Lost), and the worker reports its
// stage failed so that the coordinator re-places the model. So is a broken
// ring once the member is leaving its plan (Join's ctx ended).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Re-connect timing.
const (
	// connectWait bounds how long a member waits for its first ring; a
	// pipeline that does not come up by then is lost.
	connectWait = 60 * time.Second
	// healWait bounds how long a member re-connects a broken ring before
	// it gives up (MemberConfig.HealTimeout's default).
	healWait = 30 * time.Second
	// dialBackoff is the first pause between two dials of the next stage;
	// it doubles up to dialBackoffMax.
	dialBackoff    = 20 * time.Millisecond
	dialBackoffMax = time.Second
)

// ring is one generation of a member's links.
type ring struct {
	gen     uint64
	in, out *Conn
	broken  chan struct{} // closed by brk
	once    sync.Once
	err     error // why it broke; set before broken is closed
}

func newRing(gen uint64, in, out *Conn) *ring {
	return &ring{gen: gen, in: in, out: out, broken: make(chan struct{})}
}

// brk ends the generation (once; the first cause is kept) and closes its
// connections, which fails whatever reads or writes them.
func (r *ring) brk(err error) {
	r.once.Do(func() {
		r.err = err
		close(r.broken)
	})
	r.in.Close()
	r.out.Close()
}

func (r *ring) isBroken() bool {
	select {
	case <-r.broken:
		return true
	default:
		return false
	}
}

// run connects the member and serves its rings, re-connecting broken ones,
// until it is closed or gives up.
func (m *Member) run() {
	defer m.wg.Done()
	timeout := m.cfg.ConnectTimeout
	for {
		t0 := time.Now()
		r, err := m.connect(timeout)
		if err != nil {
			m.fail(err)
			return
		}
		if r.gen > 0 {
			m.log.Info("pipeline re-connected", "generation", r.gen, "took", time.Since(t0).Round(time.Millisecond))
		}
		m.serveRing(r)
		m.down(r)
		if isDone(m.lost) {
			return
		}
		select {
		case <-m.ctx.Done():
			m.fail(errMemberClosed)
			return
		case <-m.stop:
			m.fail(fmt.Errorf("the member left its plan after the link broke: %v", r.err))
			return
		default:
		}
		m.log.Warn("pipeline link broke; re-connecting", "generation", r.gen, "err", r.err)
		timeout = m.cfg.HealTimeout
	}
}

// serveRing runs a ring until it breaks: the head's replies (stage 0) or
// the stage's frames; a link closed under it (a failed ping) breaks it too.
func (m *Member) serveRing(r *ring) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		select {
		case <-r.out.Done():
			r.brk(errors.New("the link to the next stage closed"))
		case <-r.broken:
		}
	}()
	var err error
	if m.head != nil {
		err = m.head.receive(r)
	} else {
		err = m.serve(r.in, r.out)
	}
	r.brk(err)
}

// down retires a broken ring: sequences of its generation are lost.
func (m *Member) down(r *ring) {
	m.mu.Lock()
	if m.ring == r {
		m.ring = nil
	}
	m.gen = r.gen + 1
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

// generation is the ring generation being connected or up.
func (m *Member) generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// current is the ring up now (nil while connecting).
func (m *Member) current() *ring {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ring
}

// connect dials the next stage and waits for the previous stage's
// connection, within timeout; it returns the new ring, up.
func (m *Member) connect(timeout time.Duration) (*ring, error) {
	ctx, cancel := context.WithTimeout(m.ctx, timeout)
	defer cancel()
	next := (m.cfg.Self + 1) % len(m.cfg.Plan.Stages)
	var out *Conn
	ok := false
	defer func() {
		if !ok && out != nil {
			out.Close()
		}
	}()
	// Dials back off also when a dialled link closes at once (the next
	// stage refuses it: it is closed, or gave up), so that a member never
	// spins on handshakes.
	wait := dialBackoff
	var nextDial time.Time
	var lastErr error
	for {
		if out != nil && isDone(out.Done()) {
			out, nextDial = nil, time.Now().Add(wait) // a failed ping or the peer closed it
			wait = min(2*wait, dialBackoffMax)
			lastErr = errors.New("the next stage closed the link")
		}
		if out == nil && !time.Now().Before(nextDial) {
			c, err := m.dial(ctx, next)
			var pe *peerError
			if errors.As(err, &pe) {
				return nil, err
			}
			if err == nil {
				out = c
				m.wg.Add(2)
				go m.pinger(c)
				go m.watchPeer(c)
			} else {
				lastErr, nextDial = err, time.Now().Add(wait)
				wait = min(2*wait, dialBackoffMax)
			}
		}
		if out != nil {
			m.mu.Lock()
			in := m.pendIn
			m.pendIn = nil
			if in != nil && m.lostErr == nil {
				in.SetIdleTimeout(m.srv.cfg.Transport.PeerTimeout)
				r := newRing(m.gen, in, out)
				m.ring = r
				close(m.changed)
				m.changed = make(chan struct{})
				m.mu.Unlock()
				ok = true
				return r, nil
			}
			m.mu.Unlock()
			if in != nil {
				in.Close()
			}
		}
		var retry <-chan time.Time
		var outDone <-chan struct{}
		if out == nil {
			retry = time.After(time.Until(nextDial))
		} else {
			outDone = out.Done()
		}
		select {
		case <-ctx.Done():
			if m.ctx.Err() != nil {
				return nil, errMemberClosed
			}
			if out == nil {
				return nil, fmt.Errorf("connect to stage %d at %s: gave up after %v (last: %v)", next, m.cfg.Plan.Stages[next].Addr, timeout, lastErr)
			}
			return nil, fmt.Errorf("no connection from the previous stage within %v", timeout)
		case <-m.stop:
			return nil, errors.New("the member left its plan before its pipeline came up")
		case <-retry:
		case <-outDone:
		case <-m.inSig:
		}
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// peerError: the next stage's address answers with another node's
// certificate. Not retried: the plan is wrong.
type peerError struct{ msg string }

func (e *peerError) Error() string { return e.msg }

// dial makes one attempt at the connection to stage next, hello sent.
func (m *Member) dial(ctx context.Context, next int) (*Conn, error) {
	addr := m.cfg.Plan.Stages[next].Addr
	c, err := Dial(ctx, addr, m.srv.cfg.Transport)
	if err != nil {
		return nil, err
	}
	if want := m.cfg.Plan.Stages[next].Worker; c.Peer() != want {
		c.Close()
		return nil, &peerError{fmt.Sprintf("stage %d at %s is node %q, the plan says %q", next, addr, c.Peer(), want)}
	}
	h, _ := json.Marshal(hello{Model: m.key.model, Epoch: m.key.epoch, From: m.cfg.Self, To: next})
	if err := c.Send(ctx, &Frame{Kind: Hello, Payload: h}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// pinger keeps the link to the next stage alive while it is idle, so that
// the next stage can tell an idle link from a dead one; a ping that cannot
// be written within PeerTimeout closes the link (the ring breaks).
func (m *Member) pinger(c *Conn) {
	defer m.wg.Done()
	tc := m.srv.cfg.Transport
	if tc.Heartbeat <= 0 {
		return
	}
	t := time.NewTicker(tc.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-c.Done():
			return
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(m.ctx, tc.PeerTimeout)
		err := c.Ping(ctx)
		cancel()
		if err != nil {
			m.log.Info("pipeline ping failed", "err", err)
			c.Close()
			return
		}
	}
}

// watchPeer closes the link to the next stage as soon as that stage closes
// it (it broke its ring, or left), instead of at the next failed write:
// the next stage never sends on it, so a read returns only then.
func (m *Member) watchPeer(c *Conn) {
	defer m.wg.Done()
	var f Frame
	err := c.Recv(m.ctx, &f)
	if err == nil {
		err = fmt.Errorf("unexpected %v frame from the next stage", f.Kind)
	}
	if !isDone(c.Done()) && m.ctx.Err() == nil {
		m.log.Debug("pipeline link to the next stage ended", "err", err)
	}
	c.Close()
}
