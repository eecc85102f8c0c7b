package api

import (
	"github.com/gin-gonic/gin"

	"github.com/macpool/macpool/api/openai"
)

// A request's outcome is not always its HTTP status: a stream answered 200
// can end with an error event, or with the client gone (499, as the metrics
// count it). The handlers record the outcome here; the access log writes
// it as its status (and the HTTP status beside it when they differ), so
// the log and /metrics agree. Requests refused before they reach the
// Service are reported to Config.OnRejected, so every 4xx is counted.

// gin context keys.
const (
	ctxKeyOutcome   = "macpool.outcome"   // int: the outcome status, if not the HTTP status
	ctxKeySubmitted = "macpool.submitted" // bool: the request reached Service.Submit
	ctxKeyError     = "macpool.error"     // *openai.Error: the error written
)

// statusClientGone is the outcome of a request whose client went away.
const statusClientGone = 499

func setOutcome(c *gin.Context, status int) { c.Set(ctxKeyOutcome, status) }

func markSubmitted(c *gin.Context) { c.Set(ctxKeySubmitted, true) }

// outcome is the request's status as the metrics see it.
func outcome(c *gin.Context) int {
	if v, ok := c.Get(ctxKeyOutcome); ok {
		return v.(int)
	}
	return c.Writer.Status()
}

// reportRejected tells Config.OnRejected of a request refused before it
// reached the Service.
func (s *Server) reportRejected(c *gin.Context, status int) {
	if s.cfg.OnRejected == nil || status < 400 || c.GetBool(ctxKeySubmitted) {
		return
	}
	e, _ := c.Get(ctxKeyError)
	oe, ok := e.(*openai.Error)
	if !ok {
		oe = &openai.Error{Status: status, Message: "refused"}
	}
	s.cfg.OnRejected(c.Request.URL.Path, oe)
}
