package main

// Observability and zero-config joining for the coordinator, worker and up
// commands: /metrics, the dashboard, and LAN discovery.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/discovery"
	"github.com/macpool/macpool/metrics"
)

// discoveryFlags configure LAN discovery: coordinators advertise
// _macpool._tcp, a worker without -join browses for it.
type discoveryFlags struct {
	cluster string
	secret  string
	off     bool
	wait    time.Duration
	iface   string
}

func (f *discoveryFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cluster, "cluster", "macpool", "cluster name advertised on the LAN (mDNS _macpool._tcp) and looked for by workers without -join")
	fs.StringVar(&f.secret, "cluster-secret", "", "cluster secret; only a hash of it is advertised, and workers join only clusters with the same secret (default: $MACPOOL_CLUSTER_SECRET)")
	fs.BoolVar(&f.off, "no-discovery", false, "neither advertise nor browse the LAN with mDNS")
	fs.DurationVar(&f.wait, "discover-timeout", 30*time.Second, "how long a worker without -join looks for a coordinator on the LAN")
	fs.StringVar(&f.iface, "discovery-interface", "", "network interface for mDNS (default: the system's multicast interface)")
}

func (f *discoveryFlags) config(logger *slog.Logger) discovery.Config {
	cfg := discovery.DefaultConfig()
	cfg.Cluster = f.cluster
	cfg.Secret = f.secret
	if cfg.Secret == "" {
		cfg.Secret = os.Getenv("MACPOOL_CLUSTER_SECRET")
	}
	cfg.Interface = f.iface
	cfg.Logger = logger
	return cfg
}

// discoverJoin fills cf.join with the gossip addresses of a coordinator
// found on the LAN, for a worker started without -join.
func (f *discoveryFlags) discoverJoin(ctx context.Context, cf *clusterFlags, logger *slog.Logger, stderr io.Writer) error {
	if f.off {
		return fmt.Errorf("%w: -join is required with -no-discovery", errUsage)
	}
	cfg := f.config(logger)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	addrs, err := discovery.Find(ctx, cfg, f.wait, stderr)
	if err != nil {
		return err
	}
	cf.join = strings.Join(addrs, ",")
	return nil
}

// advertise announces a coordinator on the LAN until ctx ends
// (discovery.Advertise), unless -no-discovery.
func (f *discoveryFlags) advertise(ctx context.Context, g *errgroup.Group, name, gossip, httpAddr string, logger *slog.Logger) {
	if f.off {
		return
	}
	cfg := f.config(logger)
	cfg.Instance, cfg.Gossip, cfg.HTTP = name, gossip, httpAddr
	g.Go(func() error {
		discovery.Advertise(ctx, cfg)
		return nil
	})
}

// observeCoordinator creates the metrics registry of a coordinator: request
// metrics through the instrumented service, queue depth, worker load and
// leader changes refreshed from the cluster status on every scrape. reg is
// the registry the coordinator was configured with (Config.Metrics).
func observeCoordinator(c *coordinator.Coordinator, reg *metrics.Registry) (*metrics.Registry, api.Service) {
	reg.OnScrape(func(ctx context.Context) {
		st := c.Status(ctx)
		reg.SetQueueDepths(st.Queued)
		var loads []metrics.WorkerLoad
		for _, n := range st.Nodes {
			if n.Role != cluster.RoleWorker {
				continue
			}
			for _, m := range n.Models {
				loads = append(loads, metrics.WorkerLoad{Worker: n.Name, Model: m, Running: n.Running, Slots: n.Slots})
			}
		}
		reg.SetWorkerLoads(loads)
		reg.ObserveLeader(st.Leader)
	})
	return reg, reg.Instrument(c)
}
