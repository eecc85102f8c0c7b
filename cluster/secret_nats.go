package cluster

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// The embedded NATS servers of a cluster with a secret accept only mutual
// TLS (TLS first: a server sends nothing before the handshake) and the
// derived user and password, and coordinators advertise their client URLs
// with the tls:// scheme. An external NATS (coordinator --nats URLs) is not
// ours: its URLs keep their scheme and nodes connect to it as configured.

// ReconnectJitter is the random delay nodes add to a NATS reconnect, TLS or
// not (nats.go's defaults: 100 ms, and 1 s with TLS).
const ReconnectJitter = 50 * time.Millisecond

// SecureNATSURL turns a nats:// URL of an embedded server of a cluster
// with a secret into the tls:// URL that coordinators advertise.
func SecureNATSURL(url string) string {
	if rest, ok := strings.CutPrefix(url, "nats://"); ok {
		return "tls://" + rest
	}
	return url
}

// NATSOptions returns the connect options of node name for the
// comma-separated NATS urls: with a secret and URLs of embedded servers
// (all tls://), mutual TLS with the cluster CA and the derived credentials;
// otherwise none (an open cluster, or an external NATS).
func NATSOptions(s *Secret, name, urls string) ([]nats.Option, error) {
	if s == nil || !allTLS(urls) {
		return nil, nil
	}
	tc, err := s.NodeTLS(name)
	if err != nil {
		return nil, err
	}
	return []nats.Option{
		nats.Secure(tc),
		nats.TLSHandshakeFirst(),
		nats.UserInfo(NATSUser, s.NATSPassword()),
	}, nil
}

func allTLS(urls string) bool {
	n := 0
	for _, u := range strings.Split(urls, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if !strings.HasPrefix(u, "tls://") {
			return false
		}
		n++
	}
	return n > 0
}
