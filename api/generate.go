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

	var usage *openai.Usage
	for ev != nil {
		if ev.Worker != "" {
			worker = ev.Worker
		}
		if ev.Err != nil {
			s.log.Warn("generation failed mid-stream", "request_id", reqID(c), "worker", worker, "error", ev.Err.Message)
			setOutcome(c, ev.Err.HTTPStatus())
			w.errorFrame(ev.Err)
			w.flush()
			return
		}
		if ev.Usage != nil {
			usage = ev.Usage
		}
		if e := g.chunk(w, ev, worker); e != nil {
			setOutcome(c, e.HTTPStatus())
			w.errorFrame(e)
			w.flush()
			return
		}
		if w.flush() != nil {
			setOutcome(c, statusClientGone) // ctx is cancelled too
			c.Set(ctxDetach, true)
			return
		}
		var err error
		ev, err = st.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				setOutcome(c, statusClientGone)
				c.Set(ctxDetach, true)
				return
			}
			setOutcome(c, asError(err).HTTPStatus())
			w.errorFrame(asError(err))
			w.flush()
			return
		}
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
