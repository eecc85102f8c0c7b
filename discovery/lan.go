package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Find looks for a coordinator of cfg.Cluster on the local network for up
// to wait and returns its gossip addresses, for a worker started without
// join addresses. It says on progress what it looks for and what it found.
// cfg must be valid (New's error is returned as is).
func Find(ctx context.Context, cfg Config, wait time.Duration, progress io.Writer) ([]string, error) {
	d, err := New(cfg)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fmt.Fprintf(progress, "no -join given: looking for cluster %q on the local network (mDNS, up to %v)...\n", cfg.Cluster, wait)
	dctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	addrs, err := d.Discover(dctx)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%w; start a coordinator on this network, or pass -join HOST:PORT", err)
		}
		return nil, err
	}
	fmt.Fprintf(progress, "found cluster %q: joining %s\n", cfg.Cluster, strings.Join(addrs, ","))
	return addrs, nil
}

// Advertise announces a coordinator (cfg.Instance, cfg.Gossip, cfg.HTTP) on
// the local network until ctx ends. Failing to advertise (no multicast
// interface, port 5353 unavailable) is logged, not returned: workers can
// still join by address. A gossip address bound to loopback (tests,
// one-machine setups) is not advertised: nothing on the LAN could join it,
// and tests must not multicast onto real networks. The instance name is
// the node name with dots replaced, as DNS-SD labels need.
func Advertise(ctx context.Context, cfg Config) {
	if host, _, err := net.SplitHostPort(cfg.Gossip); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			if cfg.Logger != nil {
				cfg.Logger.Debug("not advertising a loopback gossip address on the LAN", "gossip", cfg.Gossip)
			}
			return
		}
	}
	cfg.Instance = strings.ReplaceAll(cfg.Instance, ".", "-")
	d, err := New(cfg)
	if err != nil {
		if cfg.Logger != nil {
			cfg.Logger.Warn("LAN discovery disabled", "err", err)
		}
		return
	}
	if err := d.Run(ctx); err != nil && cfg.Logger != nil {
		cfg.Logger.Warn("LAN discovery stopped; workers must use -join", "err", err)
	}
}
