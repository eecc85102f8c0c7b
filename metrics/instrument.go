package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// Service is the request path that Instrument wraps: the method set of
// api.Service, declared here so that metrics does not depend on the HTTP
// layer. What Instrument returns is again a Service, so it can be handed to
// api.New in place of the coordinator.
type Service interface {
	Models(ctx context.Context) ([]openai.Model, error)
	Ready(ctx context.Context) error
	Submit(ctx context.Context, req *job.Job) (job.Stream, error)
}

// Instrument wraps a Service (the coordinator) so that every request is
// recorded without changes to the service: status and duration, time to
// first token, inter-token latency, generated and prompt tokens per worker,
// prefix-cache lookups (a request whose usage reports cached prompt tokens is
// a hit), errors by kind, and worker failovers (a 503 after the worker
// started streaming). Queue wait is not visible from here; the coordinator
// records it with ObserveQueueWait.
//
// The clock is time.Now; a nil r returns svc unchanged.
func (r *Registry) Instrument(svc Service) Service {
	if r == nil {
		return svc
	}
	return &instrumented{Service: svc, r: r, now: time.Now}
}

type instrumented struct {
	Service
	r   *Registry
	now func() time.Time
}

func (s *instrumented) Submit(ctx context.Context, job *job.Job) (job.Stream, error) {
	start := s.now()
	st, err := s.Service.Submit(ctx, job)
	if err != nil {
		e := asError(err)
		s.r.ObserveRequest(job.Model, job.Kind, e.HTTPStatus(), s.now().Sub(start))
		s.r.finished(job.Model, job.Kind, e.HTTPStatus(), e)
		s.r.Error(errorKind(e))
		return nil, err
	}
	return &instrumentedStream{Stream: st, s: s, job: job, start: start}, nil
}

// instrumentedStream follows the job.Stream contract: Recv from one
// goroutine, then Close once; mu only guards against a Close racing a Recv
// in a misbehaving caller.
type instrumentedStream struct {
	job.Stream
	s     *instrumented
	job   *job.Job
	start time.Time

	mu       sync.Mutex
	worker   string
	last     time.Time     // previous token event
	counted  int           // token events counted before usage arrived
	status   int           // 0 until the outcome is known
	err      *openai.Error // the error that set status, if any
	recorded bool
}

func (t *instrumentedStream) Recv(ctx context.Context) (*job.Event, error) {
	ev, err := t.Stream.Recv(ctx)
	now := t.s.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	r, model := t.s.r, t.job.Model
	switch {
	case errors.Is(err, io.EOF):
		if t.status == 0 {
			t.status = http.StatusOK
		}
		t.record(now)
	case err != nil:
		if t.status == 0 {
			if ctx.Err() != nil {
				t.status = 499 // client went away
			} else {
				e := asError(err)
				t.status, t.err = e.HTTPStatus(), e
				r.Error(errorKind(e))
			}
		}
	case ev != nil:
		if ev.Worker != "" {
			t.worker = ev.Worker
		}
		if ev.Err != nil {
			t.status, t.err = ev.Err.HTTPStatus(), ev.Err
			kind := errorKind(ev.Err)
			if t.status == http.StatusServiceUnavailable && t.counted > 0 {
				// Mid-stream, after the coordinator's failovers (which it
				// counts itself) gave up.
				kind = "worker_failed"
			}
			r.Error(kind)
			break
		}
		if ev.Text != "" || ev.Reasoning != "" || len(ev.ToolCalls) > 0 {
			if t.last.IsZero() {
				r.ObserveTTFT(model, now.Sub(t.start))
			} else {
				r.ObserveInterToken(model, now.Sub(t.last))
			}
			t.last = now
			// One event is about one token (the worker streams per
			// token, holding back incomplete UTF-8); usage corrects the
			// total at the end.
			t.counted++
			r.AddGeneratedTokens(t.worker, model, 1)
		}
		if u := ev.Usage; u != nil {
			r.AddGeneratedTokens(t.worker, model, u.CompletionTokens-t.counted)
			t.counted = u.CompletionTokens
			r.AddPromptTokens(t.worker, model, u.PromptTokens)
			if u.PromptTokens > 0 {
				cached := 0
				if u.PromptTokensDetails != nil {
					cached = u.PromptTokensDetails.CachedTokens
				}
				r.ObservePrefixCache(t.worker, model, cached > 0)
				r.AddCachedTokens(t.worker, model, cached)
			}
		}
	}
	return ev, err
}

func (t *instrumentedStream) Close() error {
	err := t.Stream.Close()
	t.mu.Lock()
	if t.status == 0 {
		t.status = 499 // closed before the end: the client went away
	}
	t.record(t.s.now())
	t.mu.Unlock()
	return err
}

// record counts the request once; t.mu is held.
func (t *instrumentedStream) record(now time.Time) {
	if t.recorded {
		return
	}
	t.recorded = true
	t.s.r.ObserveRequest(t.job.Model, t.job.Kind, t.status, now.Sub(t.start))
	t.s.r.finished(t.job.Model, t.job.Kind, t.status, t.err)
}

func asError(err error) *openai.Error {
	var e *openai.Error
	if errors.As(err, &e) {
		return e
	}
	return &openai.Error{Status: http.StatusInternalServerError, Type: openai.TypeServer, Message: err.Error()}
}

// ObserveRejected counts a request the HTTP layer refused before it reached
// the service (bad JSON, no key, unknown route, a body bound), which
// Instrument never sees: in the requests (model "unknown") and the errors.
func (r *Registry) ObserveRejected(kind string, e *openai.Error) {
	if r == nil {
		return
	}
	r.ObserveRequest(UnknownModel, kind, e.HTTPStatus(), 0)
	r.finished("", kind, e.HTTPStatus(), e)
	r.Error(errorKind(e))
}

// errorKind is a bounded label for an error: its code when the server set
// one (model_not_found, invalid_api_key, ...), else its type.
func errorKind(e *openai.Error) string {
	if e.Code != "" && len(e.Code) <= 40 {
		return e.Code
	}
	if e.Type != "" {
		return e.Type
	}
	return "internal"
}
