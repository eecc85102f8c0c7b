// Package metrics holds macpool's Prometheus metrics: one Registry per
// process, with a method for each thing the coordinator and workers record
// (requests, queue, latency, tokens, prefix cache, failovers, errors), and the
// /metrics handler that exposes them.
//
// Every method is safe on a nil *Registry (it does nothing), so components
// can take an optional *Registry in their Config and record unconditionally.
//
// Label values must come from a bounded set: model names the cluster knows,
// worker node names, request kinds, HTTP statuses, error kinds. ObserveRequest
// folds the model of a 404 (unknown model, i.e. client input) into "_unknown".
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where Handler is mounted.
const Path = "/metrics"

// UnknownModel is the model label of requests for models the cluster does
// not serve (their names are client input, so they are not kept).
const UnknownModel = "_unknown"

// PrefixRoutes is the counter of prefix-routing outcomes the coordinator
// exports (label outcome: offered, taken, busy, fallback).
const PrefixRoutes = "macpool_prefix_routes_total"

// Histogram buckets, in seconds.
var (
	// Queue wait: from admission to a worker taking the job.
	QueueWaitBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	// Time to first token: queue wait + prefill.
	TTFTBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60}
	// Inter-token latency: one decode step as the client sees it.
	InterTokenBuckets = []float64{.001, .0025, .005, .01, .02, .04, .06, .08, .1, .15, .2, .3, .5, 1, 2}
	// Whole request, first byte in to last byte out.
	RequestBuckets = []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320}
)

// Registry holds the product's metrics.
type Registry struct {
	reg *prometheus.Registry

	mu     sync.Mutex
	hooks  []func(context.Context)
	leader string

	// recent is the recent view (recent.go); now its clock.
	recent recent
	now    func() time.Time

	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	queueDepth      *prometheus.GaugeVec
	queueWait       *prometheus.HistogramVec
	ttft            *prometheus.HistogramVec
	interToken      *prometheus.HistogramVec
	generated       *prometheus.CounterVec
	prompt          *prometheus.CounterVec
	prefixLookups   *prometheus.CounterVec
	prefixHits      *prometheus.CounterVec
	cachedTokens    *prometheus.CounterVec
	slots           *prometheus.GaugeVec
	running         *prometheus.GaugeVec
	failovers       *prometheus.CounterVec
	errors          *prometheus.CounterVec
}

// New returns a Registry with all macpool metrics registered, plus the Go
// runtime and process collectors.
func New() *Registry {
	r := &Registry{reg: prometheus.NewRegistry(), now: time.Now}
	r.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "macpool_requests_total",
		Help: "API requests finished, by model, kind (chat, completion) and HTTP status.",
	}, []string{"model", "kind", "status"})
	r.requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "macpool_request_duration_seconds", Buckets: RequestBuckets,
		Help: "Time from request admission to the last event, by model and kind.",
	}, []string{"model", "kind"})
	r.queueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "macpool_queue_depth",
		Help: "Jobs waiting in a model's queue.",
	}, []string{"model"})
	r.queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "macpool_queue_wait_seconds", Buckets: QueueWaitBuckets,
		Help: "Time a job waited in the queue before a worker took it.",
	}, []string{"model"})
	r.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "macpool_time_to_first_token_seconds", Buckets: TTFTBuckets,
		Help: "Time from admission to the first generated token.",
	}, []string{"model"})
	r.interToken = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "macpool_inter_token_latency_seconds", Buckets: InterTokenBuckets,
		Help: "Time between consecutive token events of one request.",
	}, []string{"model"})
	r.generated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "macpool_generated_tokens_total",
		Help: "Tokens generated, by worker and model (rate() gives tokens/s).",
	}, []string{"worker", "model"})
	r.prompt = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "macpool_prompt_tokens_total",
		Help: "Prompt tokens processed, by worker and model.",
	}, []string{"worker", "model"})
	r.prefixLookups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "macpool_prefix_cache_lookups_total",
		Help: "Prefix-cache lookups, by worker and model (hit rate = hits / lookups).",
	}, []string{"worker", "model"})
	r.prefixHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "macpool_prefix_cache_hits_total",
		Help: "Prefix-cache lookups that reused cached tokens, by worker and model.",
	}, []string{"worker", "model"})
	r.cachedTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "macpool_prefix_cache_tokens_total",
		Help: "Prompt tokens served from the prefix cache, by worker and model.",
	}, []string{"worker", "model"})
	r.slots = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "macpool_worker_slots",
		Help: "Sequences a worker can generate at once.",
	}, []string{"worker", "model"})
	r.running = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "macpool_worker_running",
		Help: "Sequences a worker is generating now.",
	}, []string{"worker", "model"})
	r.failovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "macpool_failovers_total",
		Help: "Failovers: a job's worker failed, or the Raft leader changed; by kind.",
	}, []string{"kind"})
	r.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "macpool_errors_total",
		Help: "Errors by kind (e.g. worker_failed, queue_full, no_workers, internal).",
	}, []string{"kind"})
	r.reg.MustRegister(r.requests, r.requestDuration, r.queueDepth, r.queueWait, r.ttft, r.interToken,
		r.generated, r.prompt, r.prefixLookups, r.prefixHits, r.cachedTokens, r.slots, r.running, r.failovers, r.errors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Prometheus returns the underlying registry, to register more collectors
// or to gather in tests.
func (r *Registry) Prometheus() *prometheus.Registry {
	if r == nil {
		return nil
	}
	return r.reg
}

// OnScrape adds a function that runs before every scrape, to refresh
// gauges from a snapshot (queue depths, worker load) at the time Prometheus
// asks. It gets the scrape's context, bounded to ScrapeHookTimeout.
func (r *Registry) OnScrape(f func(ctx context.Context)) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.hooks = append(r.hooks, f)
	r.mu.Unlock()
}

// ScrapeHookTimeout bounds the OnScrape functions of one scrape.
const ScrapeHookTimeout = 2 * time.Second

// Handler serves the metrics in the Prometheus exposition formats.
func (r *Registry) Handler() http.Handler {
	if r == nil {
		return http.NotFoundHandler()
	}
	h := promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		hooks := append([]func(context.Context){}, r.hooks...)
		r.mu.Unlock()
		if len(hooks) > 0 {
			ctx, cancel := context.WithTimeout(req.Context(), ScrapeHookTimeout)
			for _, f := range hooks {
				f(ctx)
			}
			cancel()
		}
		h.ServeHTTP(w, req)
	})
}

// ObserveRequest records a finished API request: its HTTP status and how long
// it took from admission to the last event. The model of a 404 is recorded as
// UnknownModel.
func (r *Registry) ObserveRequest(model, kind string, status int, d time.Duration) {
	if r == nil {
		return
	}
	if status == http.StatusNotFound {
		model = UnknownModel
	}
	r.requests.WithLabelValues(model, kind, strconv.Itoa(status)).Inc()
	if status < 400 {
		r.requestDuration.WithLabelValues(model, kind).Observe(d.Seconds())
	}
}

// SetQueueDepth records how many jobs wait in model's queue.
func (r *Registry) SetQueueDepth(model string, n int) {
	if r == nil {
		return
	}
	r.queueDepth.WithLabelValues(model).Set(float64(n))
}

// SetQueueDepths replaces all queue depths with a snapshot (model -> jobs
// waiting); models absent from it are dropped.
func (r *Registry) SetQueueDepths(depths map[string]uint64) {
	if r == nil {
		return
	}
	r.mu.Lock() // Reset + Set as one step against a concurrent scrape hook
	defer r.mu.Unlock()
	r.queueDepth.Reset()
	for m, n := range depths {
		r.queueDepth.WithLabelValues(m).Set(float64(n))
	}
}

// ObserveQueueWait records how long a job waited before a worker took it.
func (r *Registry) ObserveQueueWait(model string, d time.Duration) {
	if r == nil {
		return
	}
	r.queueWait.WithLabelValues(model).Observe(d.Seconds())
	r.observeWait(d)
}

// ObserveTTFT records the time from admission to a request's first token.
func (r *Registry) ObserveTTFT(model string, d time.Duration) {
	if r == nil {
		return
	}
	r.ttft.WithLabelValues(model).Observe(d.Seconds())
}

// ObserveInterToken records the gap between two token events of a request.
func (r *Registry) ObserveInterToken(model string, d time.Duration) {
	if r == nil {
		return
	}
	r.interToken.WithLabelValues(model).Observe(d.Seconds())
}

// AddGeneratedTokens counts n tokens generated by worker for model.
func (r *Registry) AddGeneratedTokens(worker, model string, n int) {
	if r == nil || n <= 0 {
		return
	}
	r.generated.WithLabelValues(worker, model).Add(float64(n))
}

// AddPromptTokens counts n prompt tokens processed by worker for model.
func (r *Registry) AddPromptTokens(worker, model string, n int) {
	if r == nil || n <= 0 {
		return
	}
	r.prompt.WithLabelValues(worker, model).Add(float64(n))
}

// ObservePrefixCache records one prefix-cache lookup and whether it hit.
func (r *Registry) ObservePrefixCache(worker, model string, hit bool) {
	if r == nil {
		return
	}
	r.prefixLookups.WithLabelValues(worker, model).Inc()
	if hit {
		r.prefixHits.WithLabelValues(worker, model).Inc()
	} else {
		r.prefixHits.WithLabelValues(worker, model).Add(0) // export the series at 0
	}
}

// AddCachedTokens counts n prompt tokens of worker's model served from the
// prefix cache.
func (r *Registry) AddCachedTokens(worker, model string, n int) {
	if r == nil || n <= 0 {
		return
	}
	r.cachedTokens.WithLabelValues(worker, model).Add(float64(n))
}

// SetWorkerLoad records a worker's slots and running sequences.
func (r *Registry) SetWorkerLoad(worker, model string, running, slots int) {
	if r == nil {
		return
	}
	r.running.WithLabelValues(worker, model).Set(float64(running))
	r.slots.WithLabelValues(worker, model).Set(float64(slots))
}

// WorkerLoad is one worker's load for one model, for SetWorkerLoads.
type WorkerLoad struct {
	Worker, Model  string
	Running, Slots int
}

// SetWorkerLoads replaces the load gauges with a snapshot of the live
// workers; departed workers are dropped.
func (r *Registry) SetWorkerLoads(loads []WorkerLoad) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running.Reset()
	r.slots.Reset()
	for _, l := range loads {
		r.running.WithLabelValues(l.Worker, l.Model).Set(float64(l.Running))
		r.slots.WithLabelValues(l.Worker, l.Model).Set(float64(l.Slots))
	}
}

// ObserveLeader records the current Raft leader; a change from one known
// leader to another counts as a failover of kind "leader".
func (r *Registry) ObserveLeader(leader string) {
	if r == nil || leader == "" {
		return
	}
	r.mu.Lock()
	prev := r.leader
	r.leader = leader
	r.mu.Unlock()
	if prev != "" && prev != leader {
		r.Failover("leader")
	}
}

// ForgetWorker drops a worker's series once it has left the cluster, so
// departed nodes do not linger in the exposition.
func (r *Registry) ForgetWorker(worker string) {
	if r == nil {
		return
	}
	l := prometheus.Labels{"worker": worker}
	for _, v := range []*prometheus.GaugeVec{r.running, r.slots} {
		v.DeletePartialMatch(l)
	}
}

// Failover counts one failover of the given kind ("worker": a job's worker
// failed or left; "leader": the Raft leader changed).
func (r *Registry) Failover(kind string) {
	if r == nil {
		return
	}
	r.failovers.WithLabelValues(kind).Inc()
}

// Error counts one error of the given kind.
func (r *Registry) Error(kind string) {
	if r == nil {
		return
	}
	r.errors.WithLabelValues(kind).Inc()
}
