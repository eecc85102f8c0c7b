package api

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// generation is what differs between chat and completions: how events become
// stream chunks and how they add up to one response.
type generation interface {
	// chunk adds the frames for one event to w (possibly none).
	chunk(w *sseWriter, ev *job.Event, worker string) *openai.Error
	// usageChunk adds the final usage frame.
	usageChunk(w *sseWriter, u *openai.Usage, worker string)
	// add aggregates one event for a non-streaming answer.
	add(ev *job.Event) *openai.Error
	// response is the aggregated answer.
	response(u *openai.Usage, worker string) any
}

// serve submits the job and answers the request with the stream or the
// aggregated response. The stream is closed exactly once before serve returns,
// also when the client goes away (its context ends and Recv returns).
func (s *Server) serve(c *gin.Context, job *job.Job, stream, includeUsage bool, g generation) {
	ctx := c.Request.Context()
	st, err := s.svc.Submit(ctx, job)
	if err != nil {
		writeError(c, asError(err))
		return
	}
	defer release(c, st) // resume.go: Close, or Detach when the client left mid-stream
	if stream {
		s.streamEvents(ctx, c, st, includeUsage, g)
		return
	}
	s.aggregate(ctx, c, st, g)
}

func (s *Server) aggregate(ctx context.Context, c *gin.Context, st job.Stream, g generation) {
	usage, worker, ok := collect(ctx, c, st, g.add)
	if !ok {
		return
	}
	writeJSON(c, http.StatusOK, g.response(usage, worker))
}

// collect receives a non-streamed job's events until the end, setting the
// worker header from the first event that names one and passing each event
// to add. Every error (a Recv failure, an error event, add's) is written as
// the response; ok is false then, or when the client went away. Shared by the
// generation and embedding handlers so both treat workers and errors alike.
func collect(ctx context.Context, c *gin.Context, st job.Stream, add func(*job.Event) *openai.Error) (usage *openai.Usage, worker string, ok bool) {
	for {
		ev, err := st.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return usage, worker, true
		}
		if err != nil {
			if ctx.Err() == nil {
				writeError(c, asError(err))
			} else {
				setOutcome(c, statusClientGone)
			}
			return nil, "", false
		}
		if ev.Worker != "" {
			if worker == "" {
				c.Header(HeaderWorker, ev.Worker)
			}
			worker = ev.Worker
		}
		setUnenforced(c, ev)
		if ev.Err != nil {
			writeError(c, ev.Err)
			return nil, "", false
		}
		if ev.Usage != nil {
			usage = ev.Usage
		}
		if e := add(ev); e != nil {
			writeError(c, e)
			return nil, "", false
		}
	}
}

func (s *Server) streamEvents(ctx context.Context, c *gin.Context, st job.Stream, includeUsage bool, g generation) {
	ev, worker, ok := firstEvent(ctx, c, st, writeError)
	if !ok {
		return
	}
	w := newSSEWriter(c.Writer, s.cfg.StreamWriteTimeout)
	resumable(c, w, st)
	w.start()
	defer w.end()

	usage, worker, ok := s.relay(ctx, c, w, st, ev, worker,
		func(ev *job.Event, worker string) *openai.Error { return g.chunk(w, ev, worker) },
		func(e *openai.Error) { setOutcome(c, e.HTTPStatus()); w.errorFrame(e) })
	if !ok {
		return
	}
	if includeUsage {
		if usage == nil {
			usage = &openai.Usage{}
		}
		g.usageChunk(w, usage, worker)
	}
	w.done()
	w.flush()
}

// relay writes a stream's events from ev on with emit until the stream
// ends (ok: the caller writes the protocol's ending), fails (written by
// fail, the stream then ends) or its client goes away (the job is
// detached, so a resume can pick it up; recorded as 499).
func (s *Server) relay(ctx context.Context, c *gin.Context, w *sseWriter, st job.Stream, ev *job.Event, worker string,
	emit func(ev *job.Event, worker string) *openai.Error, fail func(*openai.Error)) (usage *openai.Usage, last string, ok bool) {
	stop := func(e *openai.Error) (*openai.Usage, string, bool) {
		fail(e)
		w.flush()
		return nil, worker, false
	}
	gone := func() (*openai.Usage, string, bool) {
		setOutcome(c, statusClientGone) // ctx is cancelled too
		c.Set(ctxDetach, true)
		return nil, worker, false
	}
	for ev != nil {
		if ev.Worker != "" {
			worker = ev.Worker
		}
		if ev.Err != nil {
			s.log.Warn("generation failed mid-stream", "request_id", reqID(c), "worker", worker, "error", ev.Err.Message)
			return stop(ev.Err)
		}
		if ev.Usage != nil {
			usage = ev.Usage
		}
		if e := emit(ev, worker); e != nil {
			return stop(e)
		}
		if w.flush() != nil {
			return gone()
		}
		var err error
		ev, err = st.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return gone()
			}
			return stop(asError(err))
		}
	}
	return usage, worker, true
}

// firstEvent receives a stream's first event before anything is written, so
// that a failure before it (an error event, a Recv error) is still a plain
// HTTP error, written by writeErr in the route's protocol shape. It sets the
// worker and unenforced-schema headers from that event; ev is nil for a
// stream without events, ok false when the request is answered already.
func firstEvent(ctx context.Context, c *gin.Context, st job.Stream, writeErr func(*gin.Context, *openai.Error)) (ev *job.Event, worker string, ok bool) {
	ev, err := st.Recv(ctx)
	switch {
	case errors.Is(err, io.EOF):
		return nil, "", true
	case err != nil:
		if ctx.Err() == nil {
			writeErr(c, asError(err))
		} else {
			setOutcome(c, statusClientGone)
		}
		return nil, "", false
	}
	if ev.Worker != "" {
		worker = ev.Worker
		c.Header(HeaderWorker, worker)
	}
	if ev.Err != nil {
		writeErr(c, ev.Err)
		return nil, "", false
	}
	setUnenforced(c, ev)
	return ev, worker, true
}
