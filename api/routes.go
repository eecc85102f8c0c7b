package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// Response headers.
const (
	HeaderRequestID = "X-Request-Id"
	HeaderWorker    = "X-Macpool-Worker"
	// HeaderUnenforced lists, "; "-separated, what a non-strict schema
	// constraint of the request could not enforce (job.Event.Unenforced).
	HeaderUnenforced = "X-Macpool-Unenforced"
)

// setUnenforced sets HeaderUnenforced from an event that carries the list.
func setUnenforced(c *gin.Context, ev *job.Event) {
	if len(ev.Unenforced) > 0 && c.Writer.Header().Get(HeaderUnenforced) == "" {
		c.Header(HeaderUnenforced, strings.Join(ev.Unenforced, "; "))
	}
}

const ctxKeyID = "macpool.key_id" // gin context key: the caller's key id

func (s *Server) routes() *gin.Engine {
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.Use(s.base)
	e.NoRoute(s.adminGuard, func(c *gin.Context) {
		writeError(c, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest,
			Message: fmt.Sprintf("Invalid URL (%s %s)", c.Request.Method, c.Request.URL.Path)})
	})
	e.NoMethod(s.adminGuard, func(c *gin.Context) {
		writeError(c, &openai.Error{Status: http.StatusMethodNotAllowed, Type: openai.TypeInvalidRequest,
			Message: fmt.Sprintf("Method %s not allowed for %s (allowed: %s)", c.Request.Method, c.Request.URL.Path, c.Writer.Header().Get("Allow"))})
	})

	e.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	e.GET("/readyz", s.readyz)

	v1 := e.Group("/v1", s.auth)
	v1.POST("/chat/completions", s.chatCompletions)
	v1.POST("/completions", s.completions)
	v1.POST("/embeddings", s.embeddings)
	v1.GET("/models", s.models)
	v1.GET("/models/*model", s.model)
	s.agentRoutes(v1) // Anthropic Messages and OpenAI Responses (agents.go)

	s.adminRoutes(e)   // admin.go: Config.Admin (keys, drain, registry, status)
	s.mountHandlers(e) // mount.go: Config.Handlers (/metrics, the dashboard)
	return e
}

// base assigns the request id, recovers panics into a 500 OpenAI body and
// logs the request.
func (s *Server) base(c *gin.Context) {
	start := time.Now()
	// Always our own id: it becomes the job id, which the cluster uses as a
	// key and in NATS subjects, so a client must not choose it. A client's
	// X-Request-Id is only logged.
	id := s.newID()
	c.Header(HeaderRequestID, id)
	c.Set(HeaderRequestID, id)
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic serving request", "request_id", id, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if !c.Writer.Written() {
				writeError(c, openai.ServerError("internal error (request %s)", id))
			}
			c.Abort()
		}
		level := slog.LevelInfo
		if c.Writer.Status() >= 500 {
			level = slog.LevelWarn
		}
		if s.log.Enabled(c.Request.Context(), level) {
			s.log.Log(c.Request.Context(), level, "request",
				"request_id", id, "method", c.Request.Method, "path", c.Request.URL.Path,
				"status", c.Writer.Status(), "duration", time.Since(start),
				"worker", c.Writer.Header().Get(HeaderWorker), "key_id", c.GetString(ctxKeyID),
				"client_request_id", c.GetHeader(HeaderRequestID))
		}
	}()
	c.Next()
}

// newRequestID makes a 24-hex-digit request id (96 random bits).
func newRequestID() string {
	var b [24]byte
	const hex = "0123456789abcdef"
	x, y := rand.Uint64(), rand.Uint64()
	for i := range 12 {
		b[i*2], b[i*2+1] = hex[(x>>(i*4))&15], hex[(y>>(i*4))&15]
	}
	return string(b[:])
}

// auth checks "Authorization: Bearer KEY" (or Anthropic's "x-api-key: KEY")
// when a KeyChecker is configured. A request without a key is checked as
// key "": the checker decides whether anonymous callers are allowed (the
// coordinator allows them while no keys exist).
func (s *Server) auth(c *gin.Context) {
	if s.cfg.Auth == nil {
		return
	}
	key := bearerToken(c)
	if key == "" {
		key = strings.TrimSpace(c.GetHeader("X-Api-Key"))
	}
	writeError := protocolErrorWriter(c)
	id, err := s.cfg.Auth.Check(c.Request.Context(), key)
	if err != nil {
		var oe *openai.Error
		switch {
		case key == "":
			oe = openai.Unauthorized("You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
		case !errors.As(err, &oe):
			oe = openai.Unauthorized("Incorrect API key provided.")
		}
		writeError(c, oe)
		return
	}
	c.Set(ctxKeyID, id)
}

func (s *Server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.ProbeTimeout)
	defer cancel()
	if err := s.svc.Ready(ctx); err != nil {
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.HTTPStatus() < 500 {
			oe = openai.Unavailable("not ready: %v", err)
		}
		writeError(c, oe)
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready"})
}

func (s *Server) models(c *gin.Context) {
	list, err := s.svc.Models(c.Request.Context())
	if err != nil {
		writeError(c, asError(err))
		return
	}
	writeJSON(c, http.StatusOK, openai.ModelList{Object: "list", Data: fillModels(list)})
}

func (s *Server) model(c *gin.Context) {
	name := strings.TrimPrefix(c.Param("model"), "/")
	list, err := s.svc.Models(c.Request.Context())
	if err != nil {
		writeError(c, asError(err))
		return
	}
	for _, m := range fillModels(list) {
		if m.ID == name {
			writeJSON(c, http.StatusOK, m)
			return
		}
	}
	writeError(c, openai.ModelNotFound(name))
}

func fillModels(list []openai.Model) []openai.Model {
	out := make([]openai.Model, len(list))
	for i, m := range list {
		if m.Object == "" {
			m.Object = "model"
		}
		if m.OwnedBy == "" {
			m.OwnedBy = "macpool"
		}
		out[i] = m
	}
	return out
}

// readBody reads the request body within Config.MaxBodyBytes.
func (s *Server) readBody(c *gin.Context) ([]byte, *openai.Error) {
	limit := s.cfg.MaxBodyBytes
	tooLarge := func() *openai.Error {
		return &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Code: "request_too_large",
			Message: fmt.Sprintf("request body is larger than the limit of %d bytes", limit)}
	}
	if c.Request.ContentLength > limit {
		return nil, tooLarge()
	}
	var body []byte
	var err error
	if n := c.Request.ContentLength; n > 0 {
		body = make([]byte, n)
		_, err = io.ReadFull(c.Request.Body, body)
		if err == nil {
			// Content-Length is honoured by net/http; nothing can follow.
			return body, nil
		}
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge()
		}
		return nil, openai.InvalidRequest("", "could not read request body: %v", err)
	}
	return body, nil
}

// keyID is the caller's key id set by auth.
func keyID(c *gin.Context) string { return c.GetString(ctxKeyID) }

func reqID(c *gin.Context) string { return c.GetString(HeaderRequestID) }

// asError turns any error into an OpenAI error.
func asError(err error) *openai.Error {
	var oe *openai.Error
	switch {
	case errors.As(err, &oe):
		return oe
	case errors.Is(err, context.DeadlineExceeded):
		return &openai.Error{Status: http.StatusGatewayTimeout, Type: openai.TypeServer, Message: "request timed out"}
	case errors.Is(err, context.Canceled):
		return &openai.Error{Status: 499, Type: openai.TypeInvalidRequest, Message: "request cancelled"}
	}
	return openai.ServerError("%v", err)
}

// writeError sends an OpenAI error body with its status (and Retry-After).
func writeError(c *gin.Context, e *openai.Error) {
	if e.RetryAfter > 0 {
		secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
		c.Header("Retry-After", strconv.FormatInt(secs, 10))
	}
	c.Abort()
	writeJSON(c, e.HTTPStatus(), openai.ErrorResponse{Error: e})
}

// writeJSON sends v without HTML escaping ("<" stays "<"), as OpenAI does.
func writeJSON(c *gin.Context, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"message":"internal error encoding response","type":"server_error","param":null,"code":null}}` + "\n")
	}
	c.Data(status, "application/json; charset=utf-8", buf.Bytes())
}
