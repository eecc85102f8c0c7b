package worker

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/macpool/macpool/cluster"
)

// natsOptions are the worker's connect options for the NATS urls: the
// embedded servers of a cluster with a secret (tls:// URLs) need mutual TLS
// with the cluster CA and the derived credentials (docs/security.md).
func (w *Worker) natsOptions(urls string) ([]nats.Option, error) {
	opts, err := cluster.NATSOptions(w.cfg.Secret, w.cfg.Name, urls)
	if err != nil {
		return nil, fmt.Errorf("worker: nats tls: %w", err)
	}
	if w.cfg.Secret != nil && opts == nil {
		w.log.Warn("nats is not the cluster's own (no tls:// URLs): connecting without the cluster's TLS", "nats", urls)
	}
	// nats.go adds up to 1 s of random delay to a TLS reconnect (100 ms
	// in plaintext): after a coordinator and its NATS server die, frames
	// and offers then wait that long for the survivors, which stalled
	// streams of a secured cluster for seconds. cluster.ReconnectJitter
	// keeps both short.
	return append([]nats.Option{nats.Name(w.cfg.Name), nats.MaxReconnects(-1), nats.ReconnectWait(200 * time.Millisecond),
		nats.ReconnectJitter(cluster.ReconnectJitter, cluster.ReconnectJitter)}, opts...), nil
}
