// Package api is macpool's OpenAI-compatible HTTP front: gin handlers for
// chat completions, completions and models, the SSE writer, API-key auth,
// and OpenAI-shaped errors for every failure. It hands validated requests to
// a Service (the coordinator) and turns the Service's event streams into SSE
// chunks or aggregated responses. It also serves macpool's own endpoints
// (keys, drain, model registry, cluster status; Config.Admin) and extra
// handlers such as /metrics and the dashboard (Config.Handlers), so that one
// router and one http.Server with Config's timeouts serve the coordinator's
// port.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// Server is the HTTP server. Handler serves requests; Run listens on
// Config.Addr until its context ends.
type Server struct {
	cfg    Config
	svc    Service
	log    *slog.Logger
	engine *gin.Engine
	now    func() time.Time // clock for "created"; tests pin it
	newID  func() string    // request ids; tests pin it

	mu     sync.Mutex
	srv    *http.Server
	closed bool
}

// New builds a Server. logger may be nil.
func New(cfg Config, svc Service, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if svc == nil {
		return nil, errors.New("api: service must not be nil")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	gin.SetMode(gin.ReleaseMode)
	s := &Server{cfg: cfg, svc: svc, log: logger.With("component", "api"), now: time.Now, newID: newRequestID}
	s.engine = s.routes()
	return s, nil
}

// Handler is the HTTP handler, for tests and for embedding in another server.
func (s *Server) Handler() http.Handler { return s.engine }

// Run listens on Config.Addr and serves until ctx ends, then shuts down
// gracefully (see Config.ShutdownTimeout). It returns nil after a shutdown
// caused by ctx or Close.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("api listen %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve is Run on a listener the caller opened; it takes ownership of ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.engine,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.mu.Lock()
	if s.closed || s.srv != nil {
		s.mu.Unlock()
		ln.Close()
		if s.closed {
			return nil
		}
		return errors.New("api: server already running")
	}
	s.srv = srv
	s.mu.Unlock()

	s.log.Info("listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil // Close
		}
		return fmt.Errorf("api serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Streams still running: closing their connections cancels their
		// request contexts, which closes their jobs.
		s.log.Warn("graceful shutdown timed out; closing connections", "timeout", s.cfg.ShutdownTimeout)
		srv.Close()
	}
	<-errc
	return nil
}

// Close stops the server at once, closing all connections. Safe to call more
// than once and before Run.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.srv != nil {
		return s.srv.Close()
	}
	return nil
}
