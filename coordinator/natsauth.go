package coordinator

import (
	"fmt"
	neturl "net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/macpool/macpool/cluster"
)

// natsTLSTimeout bounds a TLS handshake (and, a little longer, the
// authentication) on the embedded server. nats-server's 2 s default is
// tight for a loaded laptop doing ECDSA handshakes.
const natsTLSTimeout = 5.0 // seconds

// secureServer makes the embedded server of a cluster with a secret
// (Config.Secret; docs/security.md) accept client connections and routes
// only with mutual TLS against the cluster CA and the derived credentials.
// Clients must do the TLS handshake first, so a stranger learns nothing
// (not even the server's INFO). Routes carry the credentials in their URLs,
// which are only built here (gossip carries them without). Call it after
// opts.Routes is set; without a secret it does nothing.
func (c *Coordinator) secureServer(opts *server.Options) error {
	s := c.cfg.Secret
	if s == nil {
		return nil
	}
	tc, err := s.NodeTLS(c.cfg.Name)
	if err != nil {
		return fmt.Errorf("coordinator: nats tls: %w", err)
	}
	pass := s.NATSPassword()
	opts.Username, opts.Password = cluster.NATSUser, pass
	opts.AuthTimeout = natsTLSTimeout + 1
	opts.TLSConfig = tc
	opts.TLSVerify = true
	opts.TLSTimeout = natsTLSTimeout
	opts.TLSHandshakeFirst = true
	if opts.Cluster.Port != 0 {
		opts.Cluster.Username, opts.Cluster.Password = cluster.NATSUser, pass
		opts.Cluster.AuthTimeout = natsTLSTimeout + 1
		opts.Cluster.TLSConfig = tc.Clone()
		opts.Cluster.TLSTimeout = natsTLSTimeout
		routes := make([]*neturl.URL, len(opts.Routes))
		for i, r := range opts.Routes {
			u := *r
			u.User = neturl.UserPassword(cluster.NATSUser, pass)
			routes[i] = &u
		}
		opts.Routes = routes
	}
	return nil
}

// natsOptions are the connect options for the NATS urls (the embedded
// servers' tls:// URLs need the cluster's TLS and credentials; see
// cluster.NATSOptions).
func (c *Coordinator) natsOptions(urls string) ([]nats.Option, error) {
	opts, err := cluster.NATSOptions(c.cfg.Secret, c.cfg.Name, urls)
	if err != nil {
		return nil, fmt.Errorf("coordinator: nats tls: %w", err)
	}
	if c.cfg.Secret != nil && opts == nil {
		c.log.Warn("nats is not the cluster's own (external, no tls:// URLs): connecting without the cluster's TLS", "nats", urls)
	}
	// nats.go adds up to 1 s of random delay to a TLS reconnect (100 ms
	// in plaintext): after a coordinator and its NATS server die, frames
	// and offers then wait that long for the survivors, which stalled
	// streams of a secured cluster for seconds. cluster.ReconnectJitter
	// keeps both short.
	return append([]nats.Option{nats.Name(c.cfg.Name), nats.MaxReconnects(-1), nats.ReconnectWait(200 * time.Millisecond),
		nats.ReconnectJitter(cluster.ReconnectJitter, cluster.ReconnectJitter)}, opts...), nil
}
