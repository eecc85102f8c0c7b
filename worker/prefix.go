package worker

// Prefix-aware routing, worker side (docs/cluster.md, "Prefix-aware
// routing"): the worker publishes what its engine's prefix cache holds and
// takes jobs that a coordinator offers to it directly because it holds
// their longest prefix.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/prefix"
)

// PrefixSummarizer is implemented by engines with a prefix cache: the keys
// (package prefix) of up to max recently served prefixes, most recent
// first, and the KV room. The worker fills in Node and Model.
type PrefixSummarizer interface {
	RoutingSummary(max int) prefix.Summary
}

// Prefix summary publishing: the summary is read every prefixPoll and
// published when it changed, and at least every prefixRefresh so that
// coordinators (which forget a summary after 5 s) keep it.
const (
	prefixPoll    = 100 * time.Millisecond
	prefixRefresh = time.Second
	// PrefixKeys is how many keys a summary carries (~1.4 KB of JSON).
	PrefixKeys = 64
)

// routeState is the worker's side of routing: jobs taken by offer and the
// slots they borrowed from pull loops.
//
// Slot accounting: w.sem holds one token per slot not in use by a pull
// loop. An offered job takes a token from w.sem if one is there; otherwise
// (every free slot's loop is waiting in a fetch, holding its token) it
// runs on debt, and the next pull loop whose fetch returns pays the debt
// with its token (handing a job it got back to the queue with a Nak)
// instead of pulling again. An offered job that ends returns a token, or
// cancels one unit of debt if the debt is still unpaid. Tokens are thus
// conserved, and at most Slots jobs run once debts are paid.
type routeState struct {
	mu      sync.Mutex
	offered int  // offered jobs accepted and not yet ended
	debt    int  // offered jobs running on a slot no pull loop has handed over yet
	closed  bool // Run is ending: no more offers
	jobs    sync.WaitGroup
}

// startRouting subscribes to offers for every model and starts publishing
// prefix summaries (if the engine keeps any). Both stop when ctx ends; wg
// waits for them and for the offered jobs.
func (w *Worker) startRouting(ctx context.Context, nc *nats.Conn, wg *sync.WaitGroup) error {
	var subs []*nats.Subscription
	for _, model := range w.cfg.Models {
		sub, err := nc.Subscribe(cluster.OfferSubject(model, w.cfg.Name), func(m *nats.Msg) { w.onOffer(ctx, nc, m) })
		if err != nil {
			for _, s := range subs {
				s.Unsubscribe()
			}
			return fmt.Errorf("worker: subscribe offers for %s: %w", model, err)
		}
		subs = append(subs, sub)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if ps, ok := w.cfg.Engine.(PrefixSummarizer); ok {
			w.publishPrefixes(ctx, nc, ps)
		} else {
			<-ctx.Done()
		}
		for _, s := range subs {
			s.Unsubscribe()
		}
		w.route.mu.Lock()
		w.route.closed = true
		w.route.mu.Unlock()
		w.route.jobs.Wait()
	}()
	return nil
}

// onOffer runs an offered job if the worker has a free slot, else answers
// busy (the coordinator then queues the job). The answer comes before the
// job's start handshake, which works as for a pulled job: a coordinator
// that gave up on the offer and queued the job answers the second start
// of the same job "gone".
func (w *Worker) onOffer(ctx context.Context, nc *nats.Conn, m *nats.Msg) {
	if ctx.Err() != nil || !w.takeOfferSlot() {
		// A job that just ended frees its slot only after its last frame
		// was answered, i.e. after its client may have sent the next turn:
		// wait a moment (off the subscription's goroutine) before saying busy.
		if !w.offerWaitStart() {
			m.Respond([]byte(cluster.OfferBusy))
			return
		}
		go func() {
			defer w.route.jobs.Done() // the waiter's count
			deadline := time.Now().Add(offerSlotWait)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				time.Sleep(offerSlotPoll) // polling for a slot, bounded by offerSlotWait
				if w.takeOfferSlot() {
					w.runOffered(ctx, nc, m)
					return
				}
			}
			m.Respond([]byte(cluster.OfferBusy))
		}()
		return
	}
	w.runOffered(ctx, nc, m)
}

// Waiting for a slot on an offer: at most offerSlotWait, polling every
// offerSlotPoll.
const (
	offerSlotWait = 25 * time.Millisecond
	offerSlotPoll = 2 * time.Millisecond
)

// offerWaitStart counts a goroutine waiting for a slot in route.jobs, unless
// Run is ending.
func (w *Worker) offerWaitStart() bool {
	r := &w.route
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.jobs.Add(1)
	return true
}

// runOffered answers a taken offer and runs its job in a goroutine; the
// slot was taken with takeOfferSlot.
func (w *Worker) runOffered(ctx context.Context, nc *nats.Conn, m *nats.Msg) {
	if err := m.Respond([]byte(cluster.OfferTaken)); err != nil {
		w.releaseOfferSlot()
		w.route.jobs.Done()
		return
	}
	go func() {
		defer w.route.jobs.Done()
		defer w.releaseOfferSlot()
		w.runJob(ctx, nc, offeredMsg{m})
	}()
}

// takeOfferSlot reserves a slot for an offered job: there must be one that
// neither a running job nor another offered job holds. On success
// route.jobs has been incremented.
func (w *Worker) takeOfferSlot() bool {
	r := &w.route
	r.mu.Lock()
	defer r.mu.Unlock()
	// running counts jobs inside runJob, offered ones included once they
	// got there; offered counts them from acceptance on.
	if r.closed || w.drain.draining.Load() || w.cfg.Slots-max(int(w.running.Load()), r.offered) <= 0 {
		return false
	}
	select {
	case <-w.sem:
	default:
		r.debt++
	}
	r.offered++
	r.jobs.Add(1)
	return true
}

func (w *Worker) releaseOfferSlot() {
	r := &w.route
	r.mu.Lock()
	defer r.mu.Unlock()
	r.offered--
	if r.debt > 0 {
		r.debt--
		return
	}
	select {
	case w.sem <- struct{}{}:
	default: // cannot happen while tokens are conserved
		w.log.Error("slot token overflow after an offered job")
	}
}

// yieldSlot is called by a pull loop when its fetch returned (msg, err)
// while it holds a slot token. If an offered job runs on debt, the loop
// hands its token over (and a job it got back to the queue) and must not
// return the token: it reports true.
func (w *Worker) yieldSlot(msg jetstream.Msg, err error) bool {
	r := &w.route
	r.mu.Lock()
	if r.debt == 0 {
		r.mu.Unlock()
		return false
	}
	r.debt--
	r.mu.Unlock()
	if err == nil && msg != nil {
		if nerr := msg.Nak(); nerr != nil {
			w.log.Debug("nak job for an offered one", "err", nerr)
		}
	}
	return true
}

// publishPrefixes publishes the engine's prefix summary for every model
// until ctx ends.
func (w *Worker) publishPrefixes(ctx context.Context, nc *nats.Conn, ps PrefixSummarizer) {
	t := time.NewTicker(prefixPoll)
	defer t.Stop()
	last := map[string][]byte{}
	var sent time.Time
	for {
		refresh := time.Since(sent) >= prefixRefresh
		for _, model := range w.cfg.Models {
			s := ps.RoutingSummary(PrefixKeys)
			s.Node, s.Model = w.cfg.Name, model
			b, err := json.Marshal(s)
			if err != nil {
				w.log.Debug("encode prefix summary", "err", err)
				continue
			}
			if !refresh && bytes.Equal(b, last[model]) {
				continue
			}
			if err := nc.Publish(cluster.PrefixSubject(model, w.cfg.Name), b); err != nil {
				w.log.Debug("publish prefix summary", "err", err)
				continue
			}
			last[model] = b
		}
		if refresh {
			sent = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// offeredMsg presents an offered job (a core NATS request) to runJob like
// a queue message; there is nothing to acknowledge.
type offeredMsg struct{ m *nats.Msg }

var _ jetstream.Msg = offeredMsg{}

var errNotQueued = errors.New("offered job: not a queue message")

func (o offeredMsg) Metadata() (*jetstream.MsgMetadata, error) { return nil, errNotQueued }
func (o offeredMsg) Data() []byte                              { return o.m.Data }
func (o offeredMsg) Headers() nats.Header                      { return o.m.Header }
func (o offeredMsg) Subject() string                           { return o.m.Subject }
func (o offeredMsg) Reply() string                             { return "" }
func (o offeredMsg) Ack() error                                { return nil }
func (o offeredMsg) DoubleAck(context.Context) error           { return nil }
func (o offeredMsg) Nak() error                                { return nil }
func (o offeredMsg) NakWithDelay(time.Duration) error          { return nil }
func (o offeredMsg) InProgress() error                         { return nil }
func (o offeredMsg) Term() error                               { return nil }
func (o offeredMsg) TermWithReason(string) error               { return nil }

// WithPrefixKeys wraps an engine without a prefix cache of its own (the
// test engine, fakes) so that it records the prefix keys of the jobs it
// runs and reports them as a PrefixSummarizer, the way the runner does.
// A ResumeEngine stays one.
func WithPrefixKeys(e Engine) Engine {
	k := &keyed{Engine: e, keys: prefix.NewRecent(1024)}
	if re, ok := e.(ResumeEngine); ok {
		return &keyedResume{keyed: k, re: re}
	}
	return k
}

type keyed struct {
	Engine
	keys *prefix.Recent
}

func (k *keyed) Generate(ctx context.Context, job *job.Job, emit func(*job.Event) error) error {
	k.keys.Add(prefix.Of(job))
	return k.Engine.Generate(ctx, job, emit)
}

func (k *keyed) RoutingSummary(max int) prefix.Summary {
	return prefix.Summary{Keys: k.keys.Latest(max)}
}

type keyedResume struct {
	*keyed
	re ResumeEngine
}

func (k *keyedResume) GenerateResume(ctx context.Context, job *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error {
	k.keys.Add(prefix.Of(job))
	return k.re.GenerateResume(ctx, job, r, emit)
}
