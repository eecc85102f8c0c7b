package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/macpool/macpool/api/openai"
)

// Hostile clients. A body is read into memory before it is parsed, so a
// client that announces a large body and sends it slowly (or never
// finishes) holds memory and a goroutine for as long as it keeps the
// connection open: 100 clients that sent 8 MB of a 16 MB body each took a
// coordinator past 1 GB. Three bounds keep that in check:
//   - the body is read under a deadline (Config.BodyReadTimeout; 408 past it);
//   - the buffer grows with the bytes received, not with the Content-Length;
//   - the bytes all requests hold while reading their bodies are bounded
//     per server (Config.MaxBodyBytesInFlight; 429 past it), except small
//     bodies (Config.SmallBodyBytes), so ordinary requests are still served
//     while slow clients hold the budget.

// errBodyBudget: the request's body would take the server past
// Config.MaxBodyBytesInFlight.
var errBodyBudget = errors.New("request body bytes in flight exceed the server's bound")

// bodyRetryAfter is advertised with the 429 of an exhausted body budget.
const bodyRetryAfter = time.Second

// readBody reads the request body within Config.MaxBodyBytes, the body
// deadline and the in-flight bound.
func (s *Server) readBody(c *gin.Context) ([]byte, *openai.Error) {
	limit := s.cfg.MaxBodyBytes
	tooLarge := func() *openai.Error {
		return &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Code: "request_too_large",
			Message: fmt.Sprintf("request body is larger than the limit of %d bytes", limit)}
	}
	busy := func() *openai.Error {
		return openai.RateLimited(bodyRetryAfter, "too many request bytes in flight on this server; retry shortly")
	}
	n := c.Request.ContentLength
	if n > limit {
		return nil, tooLarge()
	}
	var held int64 // bytes counted against the budget, released on return
	defer func() { s.bodyBytes.Add(-held) }()
	reserve := func(k int64) bool {
		if s.bodyBytes.Add(k) > s.cfg.MaxBodyBytesInFlight {
			s.bodyBytes.Add(-k)
			return false
		}
		held += k
		return true
	}
	if n > s.cfg.SmallBodyBytes && !reserve(n) {
		return nil, busy()
	}
	if s.cfg.BodyReadTimeout > 0 {
		rc := http.NewResponseController(c.Writer)
		if err := rc.SetReadDeadline(time.Now().Add(s.cfg.BodyReadTimeout)); err == nil {
			// Cleared once the body is in: net/http's read after the body
			// (which notices a client going away) would otherwise hit the
			// deadline and cancel a long stream's context.
			defer rc.SetReadDeadline(time.Time{})
		}
	}
	var r io.Reader = http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	if n < 0 { // chunked: counted as it arrives
		r = &budgetReader{r: r, free: s.cfg.SmallBodyBytes, reserve: reserve}
	}
	var buf bytes.Buffer
	if n > 0 {
		buf.Grow(int(min(n, 64<<10)))
	}
	_, err := buf.ReadFrom(r)
	if err == nil && n > 0 && int64(buf.Len()) != n {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, tooLarge()
		case errors.Is(err, errBodyBudget):
			c.Header("Connection", "close") // the rest of the body is not read
			return nil, busy()
		case errors.Is(err, os.ErrDeadlineExceeded):
			c.Header("Connection", "close")
			return nil, &openai.Error{Status: http.StatusRequestTimeout, Type: openai.TypeInvalidRequest, Code: "request_timeout",
				Message: fmt.Sprintf("request body not received within %v", s.cfg.BodyReadTimeout)}
		}
		return nil, openai.InvalidRequest("", "could not read request body: %v", err)
	}
	return buf.Bytes(), nil
}

// budgetReader counts a chunked body against the in-flight bound as it
// arrives, after its first free bytes.
type budgetReader struct {
	r       io.Reader
	free    int64
	reserve func(int64) bool
}

func (b *budgetReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	k := int64(n)
	if b.free > 0 {
		f := min(b.free, k)
		b.free -= f
		k -= f
	}
	if k > 0 && !b.reserve(k) {
		return n, errBodyBudget
	}
	return n, err
}
