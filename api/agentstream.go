package api

import (
	"context"
	"errors"
	"io"

	"github.com/gin-gonic/gin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// protocolWriter is how the Messages and Responses surfaces render one
// generation. Their streams differ from chat completions' (named events, no
// [DONE], their own error frames), so they share this loop instead of serve.
type protocolWriter interface {
	// open writes the frames that start the stream (before any event).
	open(w *sseWriter)
	// event renders one event: as frames, and into the aggregate that
	// finish and the non-streamed answer use.
	event(w *sseWriter, ev *job.Event) *openai.Error
	// finish writes the closing frames after the last event.
	finish(w *sseWriter, u *openai.Usage, worker string)
	// fail writes a mid-stream error as the stream's last frames.
	fail(w *sseWriter, e *openai.Error)
}

// discard is the sseWriter of a non-streamed request: event and finish
// aggregate as usual, the frames go nowhere.
func discardWriter() *sseWriter { return newSSEWriter(nil, 0) }

// collectProto receives a non-streamed job's events until the end, feeding
// pw with a writer whose frames are dropped. It returns the usage and the
// last worker, or the error to answer with; gone reports a client that went
// away (nothing can be written then).
func collectProto(ctx context.Context, c *gin.Context, st job.Stream, pw protocolWriter) (u *openai.Usage, worker string, oe *openai.Error, gone bool) {
	w := discardWriter()
	for {
		ev, err := st.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return u, worker, nil, false
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, "", nil, true
			}
			return nil, "", asError(err), false
		}
		if ev.Worker != "" {
			if worker == "" {
				c.Header(HeaderWorker, ev.Worker)
			}
			worker = ev.Worker
		}
		if ev.Err != nil {
			return nil, "", ev.Err, false
		}
		if ev.Usage != nil {
			u = ev.Usage
		}
		if e := pw.event(w, ev); e != nil {
			return nil, "", e, false
		}
		w.buf.Reset()
	}
}

// streamProto streams a job's events through pw; a failure before the
// first event is a plain HTTP error in the protocol's own shape (writeErr,
// see firstEvent).
func (s *Server) streamProto(ctx context.Context, c *gin.Context, st job.Stream, pw protocolWriter, writeErr func(*gin.Context, *openai.Error)) {
	ev, worker, ok := firstEvent(ctx, c, st, writeErr)
	if !ok {
		return
	}
	w := newSSEWriter(c.Writer, s.cfg.StreamWriteTimeout)
	resumable(c, w, st)
	w.start()
	defer w.end()
	pw.open(w)

	usage, worker, ok := s.relay(ctx, c, w, st, ev, worker,
		func(ev *job.Event, _ string) *openai.Error { return pw.event(w, ev) },
		func(e *openai.Error) { w.unnumbered(); pw.fail(w, e) })
	if !ok {
		return
	}
	if usage == nil {
		usage = &openai.Usage{}
	}
	pw.finish(w, usage, worker)
	w.flush()
}
