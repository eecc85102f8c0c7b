package pipeline

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures both ends of a stage-to-stage connection.
type Config struct {
	// TLS is the node's mutual-TLS configuration (cluster.Secret.NodeTLS):
	// a certificate of the cluster CA, the CA as roots and client CAs, and
	// client certificates required. Required.
	TLS *tls.Config
	// MaxFrameBytes bounds a frame (the length prefix is checked before
	// anything is allocated). A 512-row chunk of a 8192-wide model is 16 MiB.
	MaxFrameBytes int
	// HandshakeTimeout bounds the TLS handshake of Dial and Accept.
	HandshakeTimeout time.Duration
	// Heartbeat is how often a pipeline member pings its next stage over
	// an idle link; PeerTimeout how long it reads nothing from its
	// previous stage (no frame, no ping, not one byte) before it takes the
	// link for dead and re-connects. A peer that died or a link that went
	// silent without closing (a black hole) is thus found within
	// PeerTimeout. Both zero: no heartbeat (a dead peer is found only when
	// TCP reports it).
	Heartbeat, PeerTimeout time.Duration
}

// DefaultConfig has no TLS (the caller sets it), 256 MiB frames, a 10 s
// handshake, a ping every second and a peer silent for 5 s taken for dead
// (five missed pings: a loaded machine may delay one or two, never five).
func DefaultConfig() Config {
	return Config{MaxFrameBytes: 256 << 20, HandshakeTimeout: 10 * time.Second, Heartbeat: time.Second, PeerTimeout: 5 * time.Second}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.TLS == nil:
		return errors.New("pipeline tls config is required (cluster.Secret.NodeTLS)")
	case len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil:
		return errors.New("pipeline tls config has no certificate: both ends must present one")
	case c.TLS.ClientAuth != tls.RequireAndVerifyClientCert:
		return fmt.Errorf("pipeline tls client auth %v must be RequireAndVerifyClientCert (mutual TLS)", c.TLS.ClientAuth)
	case c.TLS.RootCAs == nil || c.TLS.ClientCAs == nil:
		return errors.New("pipeline tls config must name the cluster CA as RootCAs and ClientCAs")
	case c.MaxFrameBytes < headerSize:
		return fmt.Errorf("pipeline max frame bytes %d must be at least %d", c.MaxFrameBytes, headerSize)
	case c.HandshakeTimeout <= 0:
		return fmt.Errorf("pipeline handshake timeout %v must be positive", c.HandshakeTimeout)
	case c.Heartbeat < 0 || c.PeerTimeout < 0:
		return fmt.Errorf("pipeline heartbeat %v and peer timeout %v must not be negative", c.Heartbeat, c.PeerTimeout)
	case (c.Heartbeat == 0) != (c.PeerTimeout == 0):
		return fmt.Errorf("pipeline heartbeat %v and peer timeout %v must both be set or both be zero", c.Heartbeat, c.PeerTimeout)
	case c.PeerTimeout < 2*c.Heartbeat:
		return fmt.Errorf("pipeline peer timeout %v must be at least twice the heartbeat %v (one late ping must not kill a link)", c.PeerTimeout, c.Heartbeat)
	}
	return nil
}

// Listener accepts stage connections.
type Listener struct {
	cfg  Config
	ln   net.Listener
	once sync.Once
	err  error
}

// Listen listens on addr ("host:port"; port 0 picks one).
func Listen(addr string, cfg Config) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pipeline listen %s: %w", addr, err)
	}
	return &Listener{cfg: cfg, ln: ln}, nil
}

// Addr is the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Accept waits for a peer and completes the mutual-TLS handshake. It
// returns when ctx ends (ctx.Err()) or the listener is closed
// (net.ErrClosed). A peer that fails the handshake (another cluster, no
// certificate) makes Accept return an error naming it; the listener stays
// open, so a serving loop logs it and accepts again.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	stop := context.AfterFunc(ctx, func() {
		if d, ok := l.ln.(interface{ SetDeadline(time.Time) error }); ok {
			d.SetDeadline(time.Unix(1, 0))
		}
	})
	raw, err := l.ln.Accept()
	if !stop() && ctx.Err() != nil {
		if raw != nil {
			raw.Close()
		}
		if d, ok := l.ln.(interface{ SetDeadline(time.Time) error }); ok {
			d.SetDeadline(time.Time{})
		}
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("pipeline accept: %w", err)
	}
	tc := tls.Server(raw, l.cfg.TLS)
	if err := handshake(ctx, tc, l.cfg.HandshakeTimeout); err != nil {
		raw.Close()
		return nil, fmt.Errorf("pipeline accept from %s: %w", raw.RemoteAddr(), err)
	}
	return newConn(tc, l.cfg), nil
}

// Close stops listening; idempotent. Accepted connections stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { l.err = l.ln.Close() })
	return l.err
}

// Dial connects to a stage's listener and completes the mutual-TLS
// handshake (the server is verified against the cluster CA and
// cluster.TLSServerName, as TLS names it in cfg.TLS.ServerName).
func Dial(ctx context.Context, addr string, cfg Config) (*Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pipeline dial %s: %w", addr, err)
	}
	tc := tls.Client(raw, cfg.TLS)
	if err := handshake(ctx, tc, cfg.HandshakeTimeout); err != nil {
		raw.Close()
		return nil, fmt.Errorf("pipeline dial %s: %w", addr, err)
	}
	return newConn(tc, cfg), nil
}

func handshake(ctx context.Context, tc *tls.Conn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("tls handshake: %w", err)
	}
	if len(tc.ConnectionState().PeerCertificates) == 0 {
		return errors.New("tls handshake: peer presented no certificate")
	}
	return nil
}

// Conn is one stage-to-stage connection. Send and Recv may run at the same
// time (one goroutine each); two Sends (or two Recvs) may not. A Send or
// Recv cut short by its ctx or an error leaves the stream mid-frame: the
// connection is then broken and every later call fails (Close it and dial
// again).
type Conn struct {
	tc   *tls.Conn
	max  int
	peer string

	wmu  sync.Mutex
	w    *bufio.Writer
	wbuf []byte

	rmu  sync.Mutex
	r    *bufio.Reader
	rbuf []byte
	// idle, when positive, bounds the wait for each read from the peer
	// (SetIdleTimeout); rcut is set once a Recv's ctx ended (its past
	// deadline must not be moved by idleReader).
	idle atomic.Int64
	rcut atomic.Bool

	mu     sync.Mutex
	broken error
	closed bool
	done   chan struct{} // closed by Close
}

func newConn(tc *tls.Conn, cfg Config) *Conn {
	peer := ""
	if cs := tc.ConnectionState().PeerCertificates; len(cs) > 0 {
		peer = cs[0].Subject.CommonName
	}
	c := &Conn{tc: tc, max: cfg.MaxFrameBytes, peer: peer, w: bufio.NewWriterSize(tc, 64<<10), done: make(chan struct{})}
	c.r = bufio.NewReaderSize(idleReader{c}, 64<<10)
	return c
}

// idleReader reads the TLS stream with the connection's idle timeout: each
// read of the socket must return within it. A frame of any size may thus
// take as long as it needs while its bytes flow; a peer that sends nothing
// (not even pings) fails the Recv.
type idleReader struct{ c *Conn }

func (r idleReader) Read(p []byte) (int, error) {
	c := r.c
	if d := time.Duration(c.idle.Load()); d > 0 && !c.rcut.Load() {
		c.tc.SetReadDeadline(time.Now().Add(d))
		if c.rcut.Load() { // the ctx's past deadline set meanwhile wins
			c.tc.SetReadDeadline(time.Unix(1, 0))
		}
	}
	return c.tc.Read(p)
}

// ErrPeerSilent is wrapped by Recv when the peer sent nothing for the idle
// timeout (SetIdleTimeout).
var ErrPeerSilent = errors.New("pipeline: peer silent")

// SetIdleTimeout makes every later Recv fail with ErrPeerSilent when the
// peer sends nothing for d (0: wait for ever). The sender keeps an idle
// link alive with Ping.
func (c *Conn) SetIdleTimeout(d time.Duration) { c.idle.Store(int64(d)) }

// Done is closed when the connection is closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Peer is the node name in the peer's certificate (its common name).
func (c *Conn) Peer() string { return c.peer }

// ErrBroken is wrapped by calls on a connection that an earlier failure
// left mid-frame.
var ErrBroken = errors.New("pipeline: connection broken")

func (c *Conn) fail(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken == nil {
		c.broken = err
	}
	return err
}

func (c *Conn) usable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return fmt.Errorf("%w: closed", ErrBroken)
	case c.broken != nil:
		return fmt.Errorf("%w: %v", ErrBroken, c.broken)
	}
	return nil
}

// Send writes one frame. A malformed or oversized frame is refused before
// anything is written (the connection stays usable).
func (c *Conn) Send(ctx context.Context, f *Frame) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	if n := headerSize + f.metaBytes() + f.Rows*f.Cols*f.Encoding.size(); n > c.max {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, c.max)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { c.tc.SetWriteDeadline(time.Unix(1, 0)) })
	var err error
	c.wbuf, err = writeFrame(c.w, f, c.wbuf)
	if err == nil {
		err = c.w.Flush()
	}
	if !stop() && ctx.Err() != nil {
		return c.fail(ctx.Err())
	}
	if err != nil {
		return c.fail(fmt.Errorf("pipeline send: %w", err))
	}
	return nil
}

// Recv reads the next frame into f, reusing its slices (the previous
// frame's Seqs, Tokens and Hidden are overwritten). It returns io.EOF when
// the peer closed the connection between frames, ctx.Err() when ctx ends.
func (c *Conn) Recv(ctx context.Context, f *Frame) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { c.rcut.Store(true); c.tc.SetReadDeadline(time.Unix(1, 0)) })
	var err error
	for {
		c.rbuf, err = readFrame(c.r, f, c.rbuf, c.max)
		if err != nil || f.Kind != Ping {
			break
		}
	}
	if !stop() && ctx.Err() != nil {
		return c.fail(ctx.Err())
	}
	if err != nil {
		if d := time.Duration(c.idle.Load()); d > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("%w: nothing from %s for %v", ErrPeerSilent, c.peer, d)
		}
		c.fail(err)
		if errors.Is(err, io.EOF) {
			return err
		}
		return fmt.Errorf("pipeline recv: %w", err)
	}
	return nil
}

// Ping sends a heartbeat frame, which the peer's Recv skips. While a frame
// is being sent it sends nothing: those bytes are traffic enough (and a
// ping must never wait behind a long frame and then time out on it).
func (c *Conn) Ping(ctx context.Context) error {
	if !c.wmu.TryLock() {
		return nil
	}
	defer c.wmu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { c.tc.SetWriteDeadline(time.Unix(1, 0)) })
	var err error
	c.wbuf, err = writeFrame(c.w, &Frame{Kind: Ping}, c.wbuf)
	if err == nil {
		err = c.w.Flush()
	}
	if !stop() && ctx.Err() != nil {
		return c.fail(fmt.Errorf("pipeline ping: %w", ctx.Err()))
	}
	if err != nil {
		return c.fail(fmt.Errorf("pipeline ping: %w", err))
	}
	return nil
}

// Close closes the connection; idempotent. A Send or Recv in progress
// fails.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.done)
	return c.tc.Close()
}
