package api

// Resumable streams (docs/api.md, "Resuming a stream"). Every SSE frame of a
// stream the Service can resume carries "id: TOKEN:N" (sseWriter). A client
// that lost the stream sends the same request again, to any coordinator,
// with the header Last-Event-ID: the handler renders the stream under the
// original request id and created time (both in the token), the Service
// (Resumer) replays its events from the first, and the writer drops the
// frames the client already has. A client that goes away mid-stream
// detaches the stream instead of cancelling it (job.Resumable.Detach).

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// HeaderLastEventID is the SSE header a resuming client sends.
const HeaderLastEventID = "Last-Event-ID"

// Resumer is a Service whose streams can be resumed; the coordinator
// implements it.
type Resumer interface {
	// Resume returns the stream that lastEventID (job.EventID) belongs to,
	// from its first event, for the re-sent request j (j.ID and
	// j.Stream.Created as the token says). Errors are *openai.Error: 404
	// for an unknown or expired stream and for one that another API key
	// created, 400 for a request that differs from the stream's.
	Resume(ctx context.Context, lastEventID string, j *job.Job) (job.Stream, error)
}

// resumeKey is the request context key of a resumed request's *resumeReq.
type resumeKey struct{}

type resumeReq struct {
	lastEventID string
	token       job.StreamToken
	n           int // position of the last frame the client has
}

func resumeOf(ctx context.Context) *resumeReq {
	r, _ := ctx.Value(resumeKey{}).(*resumeReq)
	return r
}

// streamStart returns the request id and created time a handler renders
// its answer with. For a streamed request with Last-Event-ID they are the
// original request's (from the id, which is checked by the Service when
// the job is submitted); the request becomes a resumption. A malformed id
// is a 400 naming the header. Non-streamed requests ignore the header.
func (s *Server) streamStart(c *gin.Context, stream bool) (id string, created time.Time, e *openai.Error) {
	last := strings.TrimSpace(c.GetHeader(HeaderLastEventID))
	if !stream || last == "" {
		return reqID(c), s.now(), nil
	}
	tok, n, err := job.ParseEventID(last)
	if err != nil {
		return "", time.Time{}, &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Param: HeaderLastEventID,
			Code: "invalid_last_event_id", Message: "the Last-Event-ID header is not the id of an event this API sent (want TOKEN:N as the stream's id: lines carry it)"}
	}
	c.Set(HeaderRequestID, tok.RequestID)
	c.Header(HeaderRequestID, tok.RequestID)
	c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), resumeKey{}, &resumeReq{lastEventID: last, token: tok, n: n}))
	return tok.RequestID, time.Unix(tok.Created, 0), nil
}

// resumeSubmit is Submit for a resumed request (submitTracker): the
// Service's Resume instead of a new job.
func resumeSubmit(ctx context.Context, svc Service, j *job.Job) (job.Stream, bool, error) {
	r := resumeOf(ctx)
	if r == nil || j.Stream == nil {
		return nil, false, nil
	}
	rs, ok := svc.(Resumer)
	if !ok {
		return nil, true, unknownStream()
	}
	st, err := rs.Resume(ctx, r.lastEventID, j)
	return st, true, err
}

func unknownStream() *openai.Error {
	return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: HeaderLastEventID, Code: "stream_not_found",
		Message: "no stream with this Last-Event-ID (unknown, expired, or created with another API key); send the request without the header to start again"}
}

// ctxDetach marks a stream whose client went away after frames went out:
// release detaches it instead of closing it.
const ctxDetach = "macpool.detach"

// resumable sets up w for st: ids on every frame when st can be resumed,
// and, for a resumed request, the frames the client has are skipped.
func resumable(c *gin.Context, w *sseWriter, st job.Stream) {
	r, ok := st.(job.Resumable)
	if !ok {
		return
	}
	w.token = r.ResumeToken()
	if rr := resumeOf(c.Request.Context()); rr != nil {
		w.skip = rr.n + 1
	}
}

// release ends the handler's use of st: Close, or Detach for a resumable
// stream whose client went away mid-stream (the job goes on for a grace
// period so that the client can resume it) and for every resumed one (its
// client has frames already, even if this attempt wrote none; Detach of a
// finished stream is its Close).
func release(c *gin.Context, st job.Stream) {
	if r, ok := st.(job.Resumable); ok && (c.GetBool(ctxDetach) || resumeOf(c.Request.Context()) != nil) {
		r.Detach()
		return
	}
	st.Close()
}

// streamInfo is the job.StreamInfo of a request: set for streamed ones.
func streamInfo(stream bool, created time.Time) *job.StreamInfo {
	if !stream {
		return nil
	}
	return &job.StreamInfo{Created: created.Unix()}
}
