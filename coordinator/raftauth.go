package coordinator

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// newRaftTransport is raft.NewTCPTransport, over mutual TLS with the
// cluster CA when the cluster has a secret (docs/security.md): without it
// anyone who can reach the Raft port could append entries (API key hashes,
// placement) or read the replicated state.
func (c *Coordinator) newRaftTransport(bind string, adv net.Addr, logw io.Writer) (*raft.NetworkTransport, error) {
	const maxPool, timeout = 3, 2 * time.Second
	if c.cfg.Secret == nil {
		return raft.NewTCPTransport(bind, adv, maxPool, timeout, logw)
	}
	tc, err := c.cfg.Secret.NodeTLS(c.cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("raft tls: %w", err)
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if adv == nil {
		adv = ln.Addr()
	}
	if a, ok := adv.(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raft address %v is not advertisable", adv)
	}
	return raft.NewNetworkTransport(&tlsStream{Listener: tls.NewListener(ln, tc), adv: adv, tc: tc}, maxPool, timeout, logw), nil
}

// tlsStream is a raft.StreamLayer over mutual TLS. Accepted connections do
// their handshake on first use, in raft's per-connection goroutine, so a
// slow or foreign peer never blocks the accept loop; it fails the
// handshake and is dropped.
type tlsStream struct {
	net.Listener
	adv net.Addr
	tc  *tls.Config
}

// Addr is the advertised address (raft stores it in its configuration).
func (s *tlsStream) Addr() net.Addr { return s.adv }

// Dial implements raft.StreamLayer.
func (s *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	conn, err := tls.DialWithDialer(d, "tcp", string(addr), s.tc)
	if err != nil {
		var rerr *tls.RecordHeaderError
		if errors.As(err, &rerr) {
			return nil, fmt.Errorf("raft peer %s does not speak TLS (no cluster secret?): %w", addr, err)
		}
		return nil, err
	}
	return conn, nil
}
