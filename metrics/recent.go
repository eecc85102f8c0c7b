package metrics

import (
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/macpool/macpool/api/openai"
)

// The recent view of the requests (the dashboard's "recent errors", request
// and error rates, queue wait quantiles): Prometheus counters need a scraper
// and a query language to become rates, and they keep no messages, so the
// Registry also keeps what an operator looking at one coordinator wants to
// see now. It is fed by the same calls that count the requests (Instrument,
// ObserveRejected, ObserveQueueWait), so it agrees with /metrics.

// Bounds of the recent view.
const (
	// RecentOutcomes is how many failed requests Recent lists.
	RecentOutcomes = 50
	// RateWindow is the sliding window of the request and error counts.
	RateWindow = time.Minute
	// QueueWaitWindow is the window of the queue wait quantiles, and
	// queueWaitSamples the most waits kept for them (the newest).
	QueueWaitWindow  = 5 * time.Minute
	queueWaitSamples = 2048
	// maxOutcomeMessage bounds a listed error message (in bytes, cut at a
	// rune boundary): messages may quote client input.
	maxOutcomeMessage = 300
)

// Outcome is one failed request: answered 4xx or 5xx, or ended by its
// client (499).
type Outcome struct {
	Time    time.Time
	Status  int
	Model   string // as the client asked for it
	Kind    string // request kind (chat, completion, embedding, ...)
	Error   string // bounded error kind, as macpool_errors_total counts it; "cancelled" for 499
	Message string // the error message sent to the client (truncated)
}

// Traffic is the request rate, error rate and queue wait of the recent past.
type Traffic struct {
	// Requests finished in the last Window, of which Errors were answered
	// 4xx or 5xx and Cancelled were ended by their client (499).
	Window                      time.Duration
	Requests, Errors, Cancelled int
	// Queue wait (admission to a worker taking the job) of the jobs taken
	// in the last QueueWindow: how many, and their median and 95th
	// percentile (nearest rank; zero when QueueWaits is 0).
	QueueWindow                time.Duration
	QueueWaits                 int
	QueueWaitP50, QueueWaitP95 time.Duration
}

// recent is the Registry's recent view; its own lock, so that a status
// request never waits for a scrape.
type recent struct {
	mu       sync.Mutex
	outcomes []Outcome // ring of RecentOutcomes, next at head
	head     int
	seconds  [60]second // per-second counts of the last minute, by unix second mod 60
	waits    []wait     // ring of queueWaitSamples
	waitHead int
}

type second struct {
	unix                        int64
	requests, errors, cancelled int
}

type wait struct {
	at time.Time
	d  time.Duration
}

// finished records a request's outcome in the recent view; e is the error
// answered (nil: the status alone says it).
func (r *Registry) finished(model, kind string, status int, e *openai.Error) {
	if r == nil {
		return
	}
	now := r.now()
	v := &r.recent
	v.mu.Lock()
	defer v.mu.Unlock()
	s := &v.seconds[now.Unix()%int64(len(v.seconds))]
	if s.unix != now.Unix() {
		*s = second{unix: now.Unix()}
	}
	s.requests++
	switch {
	case status == statusClientGone:
		s.cancelled++
	case status >= 400:
		s.errors++
	default:
		return
	}
	o := Outcome{Time: now, Status: status, Model: model, Kind: kind}
	switch {
	case status == statusClientGone:
		o.Error, o.Message = "cancelled", "the client went away before the response ended"
	case e != nil:
		o.Error, o.Message = errorKind(e), truncate(e.Message, maxOutcomeMessage)
	default:
		o.Error, o.Message = "internal", http.StatusText(status)
	}
	if len(v.outcomes) < RecentOutcomes {
		v.outcomes = append(v.outcomes, o)
		return
	}
	v.outcomes[v.head] = o
	v.head = (v.head + 1) % RecentOutcomes
}

// statusClientGone is the status of a request whose client went away
// (nginx's 499), as the api package and Instrument record it.
const statusClientGone = 499

// observeWait keeps a queue wait for the quantiles.
func (r *Registry) observeWait(d time.Duration) {
	v := &r.recent
	w := wait{at: r.now(), d: d}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.waits) < queueWaitSamples {
		v.waits = append(v.waits, w)
		return
	}
	v.waits[v.waitHead] = w
	v.waitHead = (v.waitHead + 1) % queueWaitSamples
}

// RecentOutcomes returns the last failed requests (at most RecentOutcomes),
// newest first.
func (r *Registry) RecentOutcomes() []Outcome {
	if r == nil {
		return nil
	}
	v := &r.recent
	v.mu.Lock()
	out := make([]Outcome, 0, len(v.outcomes))
	out = append(out, v.outcomes[v.head:]...)
	out = append(out, v.outcomes[:v.head]...)
	v.mu.Unlock()
	slices.Reverse(out)
	return out
}

// Traffic returns the counts of the last RateWindow and the queue wait
// quantiles of the last QueueWaitWindow.
func (r *Registry) Traffic() Traffic {
	t := Traffic{Window: RateWindow, QueueWindow: QueueWaitWindow}
	if r == nil {
		return t
	}
	now := r.now()
	v := &r.recent
	v.mu.Lock()
	for _, s := range v.seconds {
		// The current second and the 59 before it.
		if age := now.Unix() - s.unix; age >= 0 && age < int64(len(v.seconds)) {
			t.Requests += s.requests
			t.Errors += s.errors
			t.Cancelled += s.cancelled
		}
	}
	var ds []time.Duration
	for _, w := range v.waits {
		if now.Sub(w.at) <= QueueWaitWindow {
			ds = append(ds, w.d)
		}
	}
	v.mu.Unlock()
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	t.QueueWaits = len(ds)
	t.QueueWaitP50, t.QueueWaitP95 = nearestRank(ds, 0.50), nearestRank(ds, 0.95)
	return t
}

// nearestRank is the q-quantile of sorted ds: the smallest value with at
// least q of the values at or below it.
func nearestRank(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q*float64(len(ds))+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// truncate cuts s to at most n bytes at a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
