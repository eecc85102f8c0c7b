package pipeline

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/macpool/macpool/cluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// nodeConfig is the pipeline config of node name of the cluster with secret s.
func nodeConfig(t testing.TB, s *cluster.Secret, name string) Config {
	t.Helper()
	tc, err := s.NodeTLS(name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.TLS = tc
	return cfg
}

func newSecret(t testing.TB) *cluster.Secret {
	t.Helper()
	s, err := cluster.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pair is a connected (dialer, acceptor) pair of nodes a and b of one cluster.
func pair(t testing.TB, s *cluster.Secret) (a, b *Conn) {
	t.Helper()
	ln, err := Listen("127.0.0.1:0", nodeConfig(t, s, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept(ctx)
		ch <- res{c, err}
	}()
	a, err = Dial(ctx, ln.Addr().String(), nodeConfig(t, s, "a"))
	r := <-ch
	if err != nil || r.err != nil {
		t.Fatalf("dial: %v; accept: %v", err, r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

// Frames cross a mutually authenticated connection both ways, float32 bit
// for bit, and each end knows the other's node name from its certificate.
func TestConnMutualTLS(t *testing.T) {
	a, b := pair(t, newSecret(t))
	if a.Peer() != "b" || b.Peer() != "a" {
		t.Errorf("peers: a sees %q, b sees %q; want b and a", a.Peer(), b.Peer())
	}
	ctx := context.Background()
	frames := []*Frame{testFrame(1, 4096, F32, 1, 1, 1, 1, 1, 1, 1, 1), testFrame(2, 2048, F32, 512), testFrame(3, 64, F16, 3, 4)}
	done := make(chan error, 1)
	go func() {
		for _, f := range frames {
			if err := a.Send(ctx, f); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var got Frame
	for _, want := range frames {
		if err := b.Recv(ctx, &got); err != nil {
			t.Fatal(err)
		}
		sameFrame(t, &got, want, want.Encoding == F32)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// And back.
	back := testFrame(4, 128, F32, 2)
	if err := b.Send(ctx, back); err != nil {
		t.Fatal(err)
	}
	if err := a.Recv(ctx, &got); err != nil {
		t.Fatal(err)
	}
	sameFrame(t, &got, back, true)

	// Closing one end: the other reads io.EOF between frames; Close twice is fine.
	a.Close()
	a.Close()
	if err := b.Recv(ctx, &got); !errors.Is(err, io.EOF) {
		t.Errorf("recv after the peer closed: got %v, want io.EOF", err)
	}
	if err := a.Send(ctx, back); !errors.Is(err, ErrBroken) {
		t.Errorf("send on a closed conn: got %v, want ErrBroken", err)
	}
}

// Only nodes of the same cluster connect: a node of another cluster and a
// client without a certificate are refused by the TLS handshake.
func TestConnRefusesStrangers(t *testing.T) {
	s := newSecret(t)
	ln, err := Listen("127.0.0.1:0", nodeConfig(t, s, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	accepted := make(chan error, 2)
	go func() {
		for range 2 {
			c, err := ln.Accept(ctx)
			if c != nil {
				c.Close()
			}
			accepted <- err
		}
	}()
	// A node of another cluster.
	if c, err := Dial(ctx, ln.Addr().String(), nodeConfig(t, newSecret(t), "x")); err == nil {
		c.Close()
		t.Error("dial from another cluster succeeded")
	}
	if err := <-accepted; err == nil {
		t.Error("accepted a node of another cluster")
	}
	// A client that trusts the CA but presents no certificate.
	own := nodeConfig(t, s, "y").TLS
	nc, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: own.RootCAs, ServerName: cluster.TLSServerName, MinVersion: tls.VersionTLS13})
	if err == nil {
		// TLS 1.3 clients learn of the refusal on their first read.
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = nc.Read(make([]byte, 1))
		nc.Close()
	}
	if err == nil {
		t.Error("client without a certificate was not refused")
	}
	if err := <-accepted; err == nil || !strings.Contains(err.Error(), "tls") {
		t.Errorf("accept of a client without a certificate: got %v, want a tls error", err)
	}
}

// Recv and Accept return when their ctx ends; a Recv cut short leaves the
// connection broken.
func TestConnContext(t *testing.T) {
	a, _ := pair(t, newSecret(t))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var f Frame
	if err := a.Recv(ctx, &f); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("recv with a deadline: got %v, want DeadlineExceeded", err)
	}
	if err := a.Recv(context.Background(), &f); !errors.Is(err, ErrBroken) {
		t.Errorf("recv after a cut-short recv: got %v, want ErrBroken", err)
	}

	ln, err := Listen("127.0.0.1:0", nodeConfig(t, newSecret(t), "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	actx, acancel := context.WithCancel(context.Background())
	acancel()
	if _, err := ln.Accept(actx); !errors.Is(err, context.Canceled) {
		t.Errorf("accept with a cancelled ctx: got %v, want Canceled", err)
	}
}

// An oversized frame is refused before anything is written; the
// connection stays usable.
func TestConnFrameLimit(t *testing.T) {
	s := newSecret(t)
	a, b := pair(t, s)
	a.max = 1 << 10
	ctx := context.Background()
	if err := a.Send(ctx, testFrame(1, 1024, F32, 1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("send of 4 KiB with a 1 KiB limit: got %v, want ErrFrameTooLarge", err)
	}
	small := testFrame(2, 16, F32, 2)
	if err := a.Send(ctx, small); err != nil {
		t.Fatal(err)
	}
	var got Frame
	if err := b.Recv(ctx, &got); err != nil {
		t.Fatal(err)
	}
	sameFrame(t, &got, small, true)
}

func TestConfigValidate(t *testing.T) {
	s := newSecret(t)
	good := nodeConfig(t, s, "n")
	for _, tc := range []struct {
		name string
		fn   func(c *Config)
		want string
	}{
		{"ok", func(c *Config) {}, ""},
		{"no tls", func(c *Config) { c.TLS = nil }, "tls config is required"},
		{"no cert", func(c *Config) { c.TLS = c.TLS.Clone(); c.TLS.Certificates = nil }, "no certificate"},
		{"no client auth", func(c *Config) { c.TLS = c.TLS.Clone(); c.TLS.ClientAuth = tls.NoClientCert }, "must be RequireAndVerifyClientCert"},
		{"no roots", func(c *Config) { c.TLS = c.TLS.Clone(); c.TLS.RootCAs = nil }, "cluster CA"},
		{"frame", func(c *Config) { c.MaxFrameBytes = 10 }, "max frame bytes 10 must be at least"},
		{"handshake", func(c *Config) { c.HandshakeTimeout = 0 }, "handshake timeout 0s must be positive"},
		{"no heartbeat", func(c *Config) { c.Heartbeat, c.PeerTimeout = 0, 0 }, ""},
		{"heartbeat alone", func(c *Config) { c.PeerTimeout = 0 }, "must both be set or both be zero"},
		{"peer timeout too short", func(c *Config) { c.Heartbeat, c.PeerTimeout = time.Second, 1500*time.Millisecond }, "at least twice the heartbeat"},
		{"negative heartbeat", func(c *Config) { c.Heartbeat = -time.Second }, "must not be negative"},
	} {
		c := good
		tc.fn(&c)
		err := c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestConnIdleTimeout: with an idle timeout, pings keep a Recv waiting
// (they are skipped, not returned), a frame after them arrives, and a peer
// that then sends nothing fails the Recv with ErrPeerSilent after about
// the timeout.
func TestConnIdleTimeout(t *testing.T) {
	a, b := pair(t, newSecret(t))
	const idle = 300 * time.Millisecond
	b.SetIdleTimeout(idle)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		for range 8 { // 8 × 100 ms of pings: longer than the timeout
			if err := a.Ping(ctx); err != nil {
				done <- err
				return
			}
			time.Sleep(100 * time.Millisecond) // the sender's pace, not synchronisation
		}
		done <- a.Send(ctx, &Frame{Kind: Forget, Batch: 42})
	}()
	var f Frame
	if err := b.Recv(ctx, &f); err != nil || f.Kind != Forget || f.Batch != 42 {
		t.Fatalf("recv across pings: %v, frame %v %d; want the forget frame", err, f.Kind, f.Batch)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	err := b.Recv(ctx, &f)
	if !errors.Is(err, ErrPeerSilent) {
		t.Fatalf("recv from a silent peer: %v, want ErrPeerSilent", err)
	}
	if d := time.Since(t0); d < idle || d > idle+5*time.Second {
		t.Errorf("silent peer found after %v, want about %v", d, idle)
	}
}
