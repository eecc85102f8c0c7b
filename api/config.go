package api

import (
	"fmt"
	"net/http"
	"time"
)

// Config configures the HTTP server.
type Config struct {
	// Addr is the listen address of Run, e.g. ":8080".
	Addr string
	// MaxBodyBytes bounds a request body; larger ones get a 413.
	MaxBodyBytes int64
	// ReadHeaderTimeout bounds reading the request headers. There is
	// deliberately no ReadTimeout or WriteTimeout: net/http cancels a
	// request's context when its connection's read deadline passes, which
	// would cut long streams.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections.
	IdleTimeout time.Duration
	// ShutdownTimeout is how long Run waits for requests in flight after ctx
	// ends before it closes their connections (streams then see their
	// context cancelled and close their jobs).
	ShutdownTimeout time.Duration
	// ProbeTimeout bounds the Service.Ready call of /readyz.
	ProbeTimeout time.Duration
	// StreamWriteTimeout bounds each write of a streamed response: a
	// client that stops reading (its socket buffers full) for this long is
	// cut off and its generation cancelled, so it cannot hold a worker
	// slot or the coordinator's buffered events. 0 disables it.
	StreamWriteTimeout time.Duration
	// Auth checks API keys; nil serves everyone anonymously.
	Auth KeyChecker
	// ModelAliases maps model names that clients send (an agent's vendor
	// model, e.g. "claude-sonnet-4-5") to models the pool serves
	// (--model-alias). Responses name the model the client asked for.
	ModelAliases map[string]string
	// Responses keeps stored Responses API responses (store,
	// previous_response_id, GET/DELETE /v1/responses/{id}). The
	// coordinator's is cluster-wide; nil keeps them in this process
	// (NewMemoryResponseStore), which only suits a single coordinator.
	Responses ResponseStore

	// Admin serves macpool's own endpoints beside the OpenAI ones (keys,
	// drain, model registry, cluster status: api/admin); nil: not served.
	Admin Admin
	// Handlers are served on the same router for GET and HEAD, without
	// Auth, by http.ServeMux-style path: "/metrics" that path only,
	// "/dashboard/" the whole subtree, "/{$}" the root only. They must
	// not overlap the API's routes.
	Handlers map[string]http.Handler
}

// DefaultConfig is a server on :8080 without authentication.
func DefaultConfig() Config {
	return Config{
		Addr:               ":8080",
		MaxBodyBytes:       16 << 20,
		ReadHeaderTimeout:  10 * time.Second,
		IdleTimeout:        120 * time.Second,
		ShutdownTimeout:    30 * time.Second,
		ProbeTimeout:       2 * time.Second,
		StreamWriteTimeout: 60 * time.Second,
	}
}

// Validate checks the configuration; messages name the field.
func (c Config) Validate() error {
	switch {
	case c.Addr == "":
		return fmt.Errorf("api addr must not be empty")
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("api max body bytes %d must be at least 1024", c.MaxBodyBytes)
	case c.ReadHeaderTimeout <= 0:
		return fmt.Errorf("api read header timeout %v must be positive", c.ReadHeaderTimeout)
	case c.IdleTimeout <= 0:
		return fmt.Errorf("api idle timeout %v must be positive", c.IdleTimeout)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("api shutdown timeout %v must not be negative", c.ShutdownTimeout)
	case c.ProbeTimeout <= 0:
		return fmt.Errorf("api probe timeout %v must be positive", c.ProbeTimeout)
	case c.StreamWriteTimeout < 0:
		return fmt.Errorf("api stream write timeout %v must not be negative", c.StreamWriteTimeout)
	}
	for alias, model := range c.ModelAliases {
		if alias == "" || model == "" {
			return fmt.Errorf("api model alias %q=%q must name both the alias and the model", alias, model)
		}
		if _, chained := c.ModelAliases[model]; chained {
			return fmt.Errorf("api model alias %s=%s must point at a served model, not at alias %s", alias, model, model)
		}
	}
	return validateHandlers(c.Handlers)
}
