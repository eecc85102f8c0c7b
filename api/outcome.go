package api

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// A request's outcome is not always its HTTP status: a stream answered 200
// can end with an error event, or with the client gone (499, as the metrics
// count it). The handlers record the outcome here; the access log writes
// it as its status (and the HTTP status beside it when they differ), so
// the log and /metrics agree. Requests refused before they reach the
// Service are reported to Config.OnRejected, so every 4xx is counted.

// gin context keys.
const (
	ctxKeyOutcome = "macpool.outcome" // int: the outcome status, if not the HTTP status
	ctxKeyError   = "macpool.error"   // *openai.Error: the error written
)

// statusClientGone is the outcome of a request whose client went away.
const statusClientGone = 499

func setOutcome(c *gin.Context, status int) { c.Set(ctxKeyOutcome, status) }

// submittedKey is the request context key of the flag that Submit was
// called (trackSubmit); every handler's Submit goes through it, whatever
// its surface (OpenAI, Messages, Responses).
type submittedKey struct{}

// trackSubmit gives the request a flag that submitTracker sets.
func trackSubmit(c *gin.Context) *bool {
	flag := new(bool)
	c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), submittedKey{}, flag))
	return flag
}

// submitTracker is the Service with Submit marking its request as having
// reached it (the Service's instrumentation counts those).
type submitTracker struct{ Service }

func (t submitTracker) Submit(ctx context.Context, j *job.Job) (job.Stream, error) {
	if flag, ok := ctx.Value(submittedKey{}).(*bool); ok {
		*flag = true
	}
	if st, resumed, err := resumeSubmit(ctx, t.Service, j); resumed { // resume.go
		return st, err
	}
	return t.Service.Submit(ctx, j)
}

// outcome is the request's status as the metrics see it.
func outcome(c *gin.Context) int {
	if v, ok := c.Get(ctxKeyOutcome); ok {
		return v.(int)
	}
	return c.Writer.Status()
}

// reportRejected tells Config.OnRejected of a request refused before it
// reached the Service.
func (s *Server) reportRejected(c *gin.Context, status int, submitted bool) {
	if s.cfg.OnRejected == nil || status < 400 || submitted {
		return
	}
	e, _ := c.Get(ctxKeyError)
	oe, ok := e.(*openai.Error)
	if !ok {
		oe = &openai.Error{Status: status, Message: "refused"}
	}
	s.cfg.OnRejected(c.Request.URL.Path, oe)
}
