package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// ErrStageLost is wrapped by the errors of jobs that a pipeline could not
// finish because a member died, closed or its connection broke. The job is
// not lost: the worker treats it as a worker-side failure and the job is
// resumed elsewhere from its tokens (job.Resume), as after a worker's death.
var ErrStageLost = errors.New("pipeline: stage lost")

// ServerConfig configures a worker's pipeline Server.
type ServerConfig struct {
	// Addr is the listen address ("host:port"; port 0 picks one).
	Addr string
	// Transport is the stage connections' configuration (TLS from the
	// cluster certificates: cluster.Secret.NodeTLS).
	Transport Config
	Logger    *slog.Logger
}

// Validate checks the configuration.
func (c ServerConfig) Validate() error {
	if c.Addr == "" {
		return errors.New("pipeline server: listen address is required")
	}
	return c.Transport.Validate()
}

// Server is a worker's pipeline listener: one per worker process. It
// accepts the mutual-TLS connections of other workers' stages and hands
// each to the member it names by (model, epoch, stage) in its first frame
// (a hello). Members are added with Join.
type Server struct {
	cfg ServerConfig
	log *slog.Logger
	ln  *Listener

	mu      sync.Mutex
	members map[memberKey]*Member
	joined  chan struct{} // closed and replaced whenever a member joins
	conns   map[*Conn]bool
	closed  bool

	quit      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

type memberKey struct {
	model string
	epoch uint64
	stage int
}

// NewServer listens on cfg.Addr. Run serves the listener; Close stops it.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ln, err := Listen(cfg.Addr, cfg.Transport)
	if err != nil {
		return nil, err
	}
	return &Server{
		cfg: cfg, log: cfg.Logger.With("component", "pipeline"), ln: ln,
		members: map[memberKey]*Member{}, joined: make(chan struct{}), conns: map[*Conn]bool{},
		quit: make(chan struct{}),
	}, nil
}

// Addr is the bound host:port, the address other workers dial (advertised
// in gossip, written into Plan.Stages[i].Addr).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run accepts stage connections until ctx ends or Close; it returns nil
// then. A peer that fails the handshake is logged and refused.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		c, err := s.ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				s.wg.Wait()
				return nil
			}
			s.log.Warn("pipeline connection refused", "err", err)
			continue
		}
		if !s.track(c) {
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.route(ctx, c)
		}()
	}
}

// track records an accepted connection until a member takes it, so that
// Close closes it; false once the server is closed.
func (s *Server) track(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = true
	return true
}

func (s *Server) untrack(c *Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// helloWait bounds how long a connection naming a member that has not
// joined yet waits for it (the members of a new plan start at about the
// same time, and the previous stage may dial first).
const helloWait = 30 * time.Second

// route reads the connection's hello and gives it to its member.
func (s *Server) route(ctx context.Context, c *Conn) {
	hctx, cancel := context.WithTimeout(ctx, s.cfg.Transport.HandshakeTimeout)
	h, err := readHello(hctx, c)
	cancel()
	if err != nil {
		s.log.Warn("pipeline connection without a hello", "peer", c.Peer(), "err", err)
		s.untrack(c)
		c.Close()
		return
	}
	key := memberKey{h.Model, h.Epoch, h.To}
	deadline := time.NewTimer(helloWait)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		m, joined := s.members[key], s.joined
		s.mu.Unlock()
		if m != nil {
			s.untrack(c)
			if err := m.accept(c, h); err != nil {
				s.log.Warn("pipeline connection refused", "peer", c.Peer(), "model", h.Model, "epoch", h.Epoch, "stage", h.To, "err", err)
				c.Close()
			}
			return
		}
		select {
		case <-joined:
		case <-deadline.C:
			s.log.Warn("pipeline connection for no member", "peer", c.Peer(), "model", h.Model, "epoch", h.Epoch, "stage", h.To)
			s.untrack(c)
			c.Close()
			return
		case <-ctx.Done():
			s.untrack(c)
			c.Close()
			return
		}
	}
}

func (s *Server) add(k memberKey, m *Member) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("pipeline server closed")
	}
	if s.members[k] != nil {
		return fmt.Errorf("pipeline %s epoch %d: stage %d already joined", k.model, k.epoch, k.stage)
	}
	s.members[k] = m
	close(s.joined)
	s.joined = make(chan struct{})
	return nil
}

func (s *Server) remove(k memberKey, m *Member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.members[k] == m {
		delete(s.members, k)
	}
}

// Close stops the listener, closes every member and the connections not
// yet handed to one; idempotent. Run returns.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.quit)
		err = s.ln.Close()
		s.mu.Lock()
		s.closed = true
		ms := make([]*Member, 0, len(s.members))
		for _, m := range s.members {
			ms = append(ms, m)
		}
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		for _, m := range ms {
			m.Close()
		}
	})
	return err
}
