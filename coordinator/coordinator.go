// Package coordinator is the control and admission plane of a macpool
// cluster. A coordinator
//   - takes requests from the HTTP layer (it implements api.Service,
//     api.KeyChecker and api.Admin without importing api: the method sets
//     are checked in cmd/macpool),
//     admits them into a per-model NATS JetStream work queue, and relays the
//     frames the worker streams back;
//   - runs the cluster's NATS: an embedded server on every coordinator,
//     clustered by routes learnt from gossip with replicated JetStream
//     queues (Config.NATSCluster), an embedded standalone server on the
//     first coordinator, or an external one;
//   - replicates durable state (model registry, placement, API key hashes)
//     with hashicorp/raft over a bbolt store.
//
// Requests wait in NATS, not in coordinator memory: a worker pulls a job only
// when it has a free slot, so queued work survives a coordinator restart and
// goes to whichever worker frees up first.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/metrics"
)

// NATSEmbedded selects an embedded NATS server (Config.NATS).
const NATSEmbedded = "embedded"

// Config configures a Coordinator.
type Config struct {
	Name    string
	Version string
	// DataDir holds the Raft log and snapshots (raft/) and the embedded
	// NATS JetStream store (nats/).
	DataDir string
	// Gossip configures membership (BindAddr, Join, timings).
	Gossip cluster.Config
	// NATS is NATSEmbedded or comma-separated nats:// URLs of an external server.
	NATS string
	// NATSListen is the client listen address of the embedded server (port 0: any).
	NATSListen string
	// NATSCluster is the route listen address (host:port, port 0: any) of the
	// embedded server. Set, every coordinator runs its own server, routed to
	// the others found by gossip, with clustered JetStream: the queues are
	// replicated on up to three coordinators and survive the loss of one.
	// The JetStream meta group needs two such coordinators before the first
	// queue can be created. Empty: a standalone JetStream server (one
	// coordinator, e.g. macpool up; coordinators that join later use it).
	NATSCluster string
	// RaftAddr is the Raft transport address; "" binds the gossip host, any port.
	RaftAddr string
	// Bootstrap makes this coordinator start a new Raft cluster if it has no
	// state. Joining coordinators leave it false and are added by the leader.
	Bootstrap bool
	// Raft timings (hashicorp/raft semantics).
	RaftHeartbeatTimeout   time.Duration
	RaftElectionTimeout    time.Duration
	RaftLeaderLeaseTimeout time.Duration
	// QueueLimit bounds the jobs queued per model; more get 429.
	QueueLimit int
	// KeyQueueLimit bounds the jobs queued per model and API key (fairness).
	KeyQueueLimit int
	// KeyMaxStreams bounds the requests (queued or running, all models)
	// one API key id may have open at once; more get 429 at once
	// (keys_limit.go). 0: no bound. Anonymous callers are not bounded.
	KeyMaxStreams int
	// AdminToken, if set, is a bearer credential for the admin endpoints
	// (keys, drain; keys.go) besides API keys stored with admin rights.
	AdminToken string
	// RequireKeys closes the API and the admin endpoints while no API key
	// is stored (instead of serving everyone): set when the HTTP API
	// listens beyond loopback, where anyone on the network could use it
	// (keys.go; cmd/macpool creates and prints the first admin key).
	RequireKeys bool
	// StallTimeout moves a running job to another worker (or fails it)
	// when its worker, still alive, sent no frame for this long; 0: never.
	// It must exceed the longest prefill (no frames are sent meanwhile).
	StallTimeout time.Duration
	// RetryAfter is advertised with 429 answers.
	RetryAfter time.Duration
	// HTTPAddr is advertised in gossip for macpool status.
	HTTPAddr string
	// Placement is the memory model for placing managed models (models.go).
	Placement PlacementConfig
	// PlacementGrace is how long after this coordinator became the Raft
	// leader it withdraws no worker from a model's placement: right after
	// a restart or an election its gossip view may not show all workers
	// yet, and withdrawing would make them unload what they serve.
	PlacementGrace time.Duration
	// NoPrefixRouting turns off offering jobs to the worker that holds
	// their longest prefix (routing.go); every job goes to the queue.
	NoPrefixRouting bool
	// Metrics, if set, records the queue wait of every job (nil-safe);
	// Status reports its recent view (failed requests, rates, queue wait),
	// so the service handed to the HTTP layer should be instrumented with
	// the same registry (Registry.Instrument, as cmd/macpool does).
	Metrics *metrics.Registry
	// Secret, if set, is the cluster secret (docs/security.md): gossip is
	// encrypted with it, the embedded NATS servers require mutual TLS and
	// the derived credentials from clients and routes (natsauth.go), and
	// Raft runs over mutual TLS. Nil: everything open (one machine, tests).
	Secret *cluster.Secret
	Logger *slog.Logger
}

// DefaultConfig returns a coordinator with an embedded standalone NATS.
func DefaultConfig() Config {
	return Config{
		NATS:                   NATSEmbedded,
		NATSListen:             "127.0.0.1:4222",
		Gossip:                 cluster.DefaultConfig(),
		RaftHeartbeatTimeout:   time.Second,
		RaftElectionTimeout:    time.Second,
		RaftLeaderLeaseTimeout: 500 * time.Millisecond,
		QueueLimit:             256,
		KeyQueueLimit:          64,
		StallTimeout:           2 * time.Minute,
		RetryAfter:             time.Second,
		Placement:              DefaultPlacementConfig(),
		PlacementGrace:         30 * time.Second,
	}
}

// FastRaft shortens Raft timings for tests on loopback.
func (c *Config) FastRaft() {
	c.RaftHeartbeatTimeout = 150 * time.Millisecond
	c.RaftElectionTimeout = 150 * time.Millisecond
	c.RaftLeaderLeaseTimeout = 100 * time.Millisecond
	c.PlacementGrace = 3 * time.Second
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("coordinator: name must be set")
	case c.DataDir == "":
		return errors.New("coordinator: data dir must be set")
	case c.NATS == "":
		return errors.New("coordinator: nats must be \"embedded\" or nats:// URLs")
	case c.RaftHeartbeatTimeout < 5*time.Millisecond:
		return fmt.Errorf("coordinator: raft heartbeat timeout %v must be at least 5ms", c.RaftHeartbeatTimeout)
	case c.RaftElectionTimeout < c.RaftHeartbeatTimeout:
		return fmt.Errorf("coordinator: raft election timeout %v must be at least heartbeat timeout %v", c.RaftElectionTimeout, c.RaftHeartbeatTimeout)
	case c.RaftLeaderLeaseTimeout > c.RaftHeartbeatTimeout:
		return fmt.Errorf("coordinator: raft leader lease %v must not exceed heartbeat timeout %v", c.RaftLeaderLeaseTimeout, c.RaftHeartbeatTimeout)
	case c.QueueLimit < 1:
		return fmt.Errorf("coordinator: queue limit %d must be at least 1", c.QueueLimit)
	case c.KeyQueueLimit < 1 || c.KeyQueueLimit > c.QueueLimit:
		return fmt.Errorf("coordinator: per-key queue limit %d must be in [1, queue limit %d]", c.KeyQueueLimit, c.QueueLimit)
	case c.KeyMaxStreams < 0:
		return fmt.Errorf("coordinator: per-key max streams %d must not be negative", c.KeyMaxStreams)
	case c.PlacementGrace < 0:
		return fmt.Errorf("coordinator: placement grace %v must not be negative", c.PlacementGrace)
	case c.StallTimeout < 0:
		return fmt.Errorf("coordinator: stall timeout %v must not be negative", c.StallTimeout)
	case c.RetryAfter <= 0:
		return fmt.Errorf("coordinator: retry-after %v must be positive", c.RetryAfter)
	}
	if c.Gossip.Secret != nil && !c.Gossip.Secret.Equal(c.Secret) {
		return errors.New("coordinator: gossip secret must be the cluster secret (set Config.Secret only)")
	}
	if c.NATS == NATSEmbedded {
		if _, _, err := net.SplitHostPort(c.NATSListen); err != nil {
			return fmt.Errorf("coordinator: nats listen %q must be host:port: %w", c.NATSListen, err)
		}
		if c.NATSCluster != "" {
			if _, _, err := net.SplitHostPort(c.NATSCluster); err != nil {
				return fmt.Errorf("coordinator: nats cluster listen %q must be host:port: %w", c.NATSCluster, err)
			}
		}
	} else if c.NATSCluster != "" {
		return fmt.Errorf("coordinator: nats cluster listen %q needs the embedded nats, not %q", c.NATSCluster, c.NATS)
	} else if !strings.Contains(c.NATS, "://") {
		return fmt.Errorf("coordinator: nats %q must be \"embedded\" or nats:// URLs", c.NATS)
	}
	return nil
}

// Coordinator admits requests and keeps the cluster state.
type Coordinator struct {
	cfg  Config
	log  *slog.Logger
	ml   *cluster.Membership
	meta cluster.Meta

	ns *server.Server // embedded NATS, or nil
	nc *nats.Conn
	js jetstream.JetStream

	raft      *raft.Raft
	raftTrans *raft.NetworkTransport
	store     *boltStore
	fsm       *fsm

	replySub *nats.Subscription
	streams  sync.Map // job id -> *stream
	ensured  sync.Map // model -> int: stream and consumer exist with this many replicas
	ensureMu sync.Mutex

	keyStreams keyStreams    // open streams per API key (keys_limit.go)
	models     modelState    // model install progress, placement tombstones (models.go)
	routes     router        // workers' prefix summaries (routing.go)
	reports    workerReports // the same summaries for Status (status.go)
	keyUse     keyUse        // last use of API keys (keys.go)
	// leadSince is when this node last became the Raft leader (unix ns;
	// restart.go: placement grace).
	leadSince atomic.Int64
	// startIndex is the last Raft log index found at start; current
	// latches once the FSM has applied it and the leader's commit index
	// (restart.go).
	startIndex uint64
	current    atomic.Bool

	loops sync.WaitGroup
	// requeues are failover publishes in flight (service.go); closing
	// stops new ones before shutdown waits for them.
	requeueMu sync.Mutex
	closing   bool
	requeues  sync.WaitGroup
	stop      context.CancelFunc
	stopCtx   context.Context
	closeOnce sync.Once
	closeErr  error
}

// New starts gossip, NATS and Raft; on error everything started is stopped.
// Requests are accepted as soon as New returns; Run runs the background loops.
func New(cfg Config) (_ *Coordinator, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("coordinator: data dir: %w", err)
	}
	hw := cluster.DetectHardware()
	c := &Coordinator{
		cfg: cfg,
		log: logger.With("component", "coordinator", "node", cfg.Name),
		fsm: newFSM(),
		meta: cluster.Meta{
			Role: cluster.RoleCoordinator, Version: cfg.Version,
			Chip: hw.Chip, Cores: hw.Cores, MemoryMB: hw.MemoryMB, HTTP: cfg.HTTPAddr,
		},
	}
	c.stopCtx, c.stop = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	// Gossip first: a joining coordinator learns the NATS routes from it.
	gc := cfg.Gossip
	gc.Name = cfg.Name
	gc.Meta = c.meta
	gc.Secret = cfg.Secret
	gc.Logger = logger
	if gc.PeersFile == "" {
		// Remembered across restarts: a coordinator restarted with its
		// original flags (no -join) finds the workers again.
		gc.PeersFile = filepath.Join(cfg.DataDir, "gossip-peers.json")
	}
	if c.ml, err = cluster.New(gc); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	if err = c.startNATS(); err != nil {
		return nil, err
	}
	if err = c.startRaft(); err != nil {
		return nil, err
	}
	c.startIndex = c.raft.LastIndex() // restart.go: state current once applied
	if c.replySub, err = c.nc.Subscribe(cluster.ReplyFilter(cfg.Name), c.onFrame); err != nil {
		return nil, fmt.Errorf("coordinator: subscribe replies: %w", err)
	}
	c.replySub.SetPendingLimits(-1, -1)
	if err = c.nc.Flush(); err != nil {
		return nil, fmt.Errorf("coordinator: nats flush: %w", err)
	}
	if err = c.ml.UpdateMeta(c.meta); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	c.log.Info("coordinator started", "gossip", c.ml.Addr(), "nats", c.meta.NATS, "raft", c.meta.Raft)
	return c, nil
}

func splitPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	var port int
	if _, err := fmt.Sscanf(p, "%d", &port); err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, port, nil
}

// startNATS starts the embedded server, joins the NATS of the cluster it
// gossips with, or connects to an external server, then opens the
// coordinator's client connection.
//
// Embedded modes (docs/cluster.md):
//   - NATSCluster set: this coordinator runs its own server, routed to the
//     route URLs the other coordinators gossip (every server learns the
//     rest of the routes from the first one it reaches), with clustered
//     JetStream (server name = node name, cluster "macpool").
//   - standalone, first coordinator (Bootstrap or no Join): runs the only
//     server with JetStream in DataDir/nats;
//   - standalone, joining coordinator: connects to the NATS URLs the others
//     advertise in gossip.
func (c *Coordinator) startNATS() error {
	url := c.cfg.NATS
	switch {
	case url == NATSEmbedded && c.cfg.NATSCluster == "" && !c.cfg.Bootstrap && len(c.cfg.Gossip.Join) > 0:
		u, err := c.clusterNATS(10 * time.Second)
		if err != nil {
			return err
		}
		url = u
	case url == NATSEmbedded:
		var routes []*neturl.URL
		if c.cfg.NATSCluster != "" && len(c.cfg.Gossip.Join) > 0 {
			var err error
			if routes, err = c.clusterRoutes(10 * time.Second); err != nil {
				return err
			}
		}
		u, err := c.startServer(routes)
		if err != nil {
			return err
		}
		url = u
	}
	c.meta.NATS = url
	nopts, err := c.natsOptions(url)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return fmt.Errorf("coordinator: connect nats %s: %w", url, err)
	}
	c.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("coordinator: jetstream: %w", err)
	}
	c.js = js
	return nil
}

// natsClusterName is the NATS cluster name of the coordinators' embedded servers.
const natsClusterName = "macpool"

// startServer runs the embedded NATS server (clustered when NATSCluster is
// set, with routes as the seed) and returns its client URL.
func (c *Coordinator) startServer(routes []*neturl.URL) (string, error) {
	host, port, err := splitPort(c.cfg.NATSListen)
	if err != nil {
		return "", fmt.Errorf("coordinator: nats listen: %w", err)
	}
	opts := &server.Options{
		ServerName: c.cfg.Name, // JetStream peers are named by it: unique, stable over restarts
		Host:       host,
		Port:       anyPort(port),
		JetStream:  true,
		StoreDir:   filepath.Join(c.cfg.DataDir, "nats"),
		// Queues are file streams; the memory limit only bounds what
		// JetStream may reserve for memory streams (none).
		JetStreamMaxMemory: 64 << 20,
		// A job carries its request body: the API admits bodies of 16 MiB,
		// so the queue must take messages beyond NATS's 1 MiB default.
		MaxPayload: MaxJobBytes,
		NoSigs:     true,
		NoLog:      os.Getenv("MACPOOL_NATS_LOG") == "",
	}
	if c.cfg.NATSCluster != "" {
		chost, cport, err := splitPort(c.cfg.NATSCluster)
		if err != nil {
			return "", fmt.Errorf("coordinator: nats cluster listen: %w", err)
		}
		if cport == 0 {
			// The server's own route URL goes into its route list (below),
			// so the port must be known before it starts.
			if cport, err = freePort(chost); err != nil {
				return "", fmt.Errorf("coordinator: nats cluster listen: %w", err)
			}
		}
		opts.Cluster = server.ClusterOpts{Name: natsClusterName, Host: chost, Port: cport}
		adv := net.JoinHostPort(advertiseHost(chost, c.ml.Addr()), fmt.Sprint(cport))
		if adv != net.JoinHostPort(chost, fmt.Sprint(cport)) {
			opts.Cluster.Advertise = adv
		}
		// Clustered JetStream refuses to start without configured routes,
		// and its meta group waits for max(2, routes) servers. The server's
		// own URL (ignored as a route to self) makes the first coordinator
		// startable; it gets a meta leader once a second one routes to it.
		self := &neturl.URL{Scheme: "nats", Host: adv}
		c.meta.Routes = self.String()
		opts.Routes = append(append([]*neturl.URL(nil), routes...), self)
	}
	if err := c.secureServer(opts); err != nil {
		return "", err
	}
	tuneJetStreamRaft()
	ns, err := server.NewServer(opts)
	if err != nil {
		return "", fmt.Errorf("coordinator: nats server: %w", err)
	}
	if !opts.NoLog {
		ns.ConfigureLogger()
	}
	ns.Start()
	c.ns = ns
	if !ns.ReadyForConnections(10 * time.Second) {
		return "", errors.New("coordinator: embedded nats not ready after 10s")
	}
	url := ns.ClientURL()
	if a, ok := ns.Addr().(*net.TCPAddr); ok && a != nil {
		url = fmt.Sprintf("nats://%s", net.JoinHostPort(advertiseHost(host, c.ml.Addr()), fmt.Sprint(a.Port)))
	}
	if c.cfg.NATSCluster != "" {
		c.log.Info("nats cluster", "route", c.meta.Routes, "seed", routes)
	}
	if c.cfg.Secret != nil {
		url = cluster.SecureNATSURL(url)
	}
	return url, nil
}

// freePort returns a port on host that was free a moment ago.
func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// anyPort maps port 0 to nats-server's "any free port" (-1; its 0 means the default).
func anyPort(p int) int {
	if p == 0 {
		return -1
	}
	return p
}

// clusterRoutes waits for gossip to show coordinators whose embedded
// servers accept routes and returns their route URLs (the seed; nats-server
// learns the others from them). A cluster whose coordinators run a
// standalone server cannot be joined in clustered mode.
func (c *Coordinator) clusterRoutes(wait time.Duration) ([]*neturl.URL, error) {
	ch, unsub := c.ml.Subscribe()
	defer unsub()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		var routes []*neturl.URL
		standalone := ""
		for _, m := range c.ml.Members() {
			if m.Name == c.cfg.Name || m.Meta.Role != cluster.RoleCoordinator {
				continue
			}
			if m.Meta.Routes == "" {
				if m.Meta.NATS != "" {
					standalone = m.Name
				}
				continue
			}
			u, err := neturl.Parse(m.Meta.Routes)
			if err != nil {
				c.log.Warn("bad route url in gossip", "member", m.Name, "url", m.Meta.Routes, "err", err)
				continue
			}
			routes = append(routes, u)
		}
		if len(routes) > 0 {
			return routes, nil
		}
		if standalone != "" {
			return nil, fmt.Errorf("coordinator: coordinator %s runs a standalone NATS server: start every coordinator with a NATS cluster listen address (--nats-cluster)", standalone)
		}
		select {
		case <-ch:
		case <-deadline.C:
			return nil, fmt.Errorf("coordinator: no coordinator advertising NATS routes seen by gossip within %v", wait)
		}
	}
}

// clusterNATS waits for gossip to show a coordinator advertising NATS.
func (c *Coordinator) clusterNATS(wait time.Duration) (string, error) {
	ch, unsub := c.ml.Subscribe()
	defer unsub()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		var urls []string
		for _, m := range c.ml.Members() {
			if m.Name != c.cfg.Name && m.Meta.Role == cluster.RoleCoordinator && m.Meta.NATS != "" {
				urls = append(urls, m.Meta.NATS)
			}
		}
		if len(urls) > 0 {
			return strings.Join(urls, ","), nil
		}
		select {
		case <-ch:
		case <-deadline.C:
			return "", fmt.Errorf("coordinator: no coordinator advertising NATS seen by gossip within %v", wait)
		}
	}
}

// advertiseHost replaces an unspecified listen host by the host gossip advertises.
func advertiseHost(host, gossipAddr string) string {
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return host
	}
	h, _, err := net.SplitHostPort(gossipAddr)
	if err != nil {
		return "127.0.0.1"
	}
	return h
}

// Run runs the coordinator's loops until ctx ends, then closes it.
func (c *Coordinator) Run(ctx context.Context) error {
	defer c.Close()
	c.loops.Add(2)
	go func() { defer c.loops.Done(); c.leaderLoop(c.stopCtx) }()
	go func() { defer c.loops.Done(); c.watchMembers(c.stopCtx) }()
	c.loops.Add(1)
	go func() { defer c.loops.Done(); c.touchLoop(c.stopCtx) }() // keys.go
	c.loops.Add(1)
	go func() { defer c.loops.Done(); c.routeLoop(c.stopCtx) }() // routing.go
	c.loops.Add(1)
	go func() { defer c.loops.Done(); c.reportLoop(c.stopCtx) }() // status.go
	c.loops.Add(1)
	go func() { defer c.loops.Done(); c.modelsLoop(c.stopCtx) }() // models.go
	select {
	case <-ctx.Done():
	case <-c.stopCtx.Done():
	}
	return nil
}

// Close leaves the cluster and stops Raft and NATS. Safe to call twice.
func (c *Coordinator) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.shutdown(true) })
	return c.closeErr
}

// Kill stops everything without a graceful gossip leave, as a crash would
// look to the others (tests).
func (c *Coordinator) Kill() {
	c.closeOnce.Do(func() { c.closeErr = c.shutdown(false) })
}

func (c *Coordinator) shutdown(graceful bool) error {
	start := time.Now()
	defer func() { c.log.Debug("coordinator stopped", "took", time.Since(start)) }()
	c.stop()
	c.loops.Wait()
	c.requeueMu.Lock()
	c.closing = true
	c.requeueMu.Unlock()
	c.requeues.Wait()
	var errs []error
	// Fail the streams still open so HTTP handlers return.
	c.streams.Range(func(k, v any) bool {
		v.(*stream).fail(unavailable("coordinator %s is shutting down", c.cfg.Name))
		return true
	})
	if c.ml != nil {
		if graceful {
			errs = append(errs, c.ml.Close())
		} else {
			c.ml.Kill()
		}
	}
	c.log.Debug("left gossip", "took", time.Since(start))
	if c.raft != nil {
		errs = append(errs, c.raft.Shutdown().Error())
		c.log.Debug("raft stopped", "took", time.Since(start))
	}
	if c.raftTrans != nil {
		c.raftTrans.CloseStreams() // pooled outbound connections, else peers' readers linger
		errs = append(errs, c.raftTrans.Close())
	}
	if c.store != nil {
		errs = append(errs, c.store.Close())
	}
	if c.nc != nil {
		c.nc.Close()
	}
	if c.ns != nil {
		c.ns.Shutdown()
		c.ns.WaitForShutdown()
	}
	return errors.Join(errs...)
}

// GossipAddr is the bound gossip address.
func (c *Coordinator) GossipAddr() string { return c.ml.Addr() }

// NATSURL is the NATS client URL workers connect to.
func (c *Coordinator) NATSURL() string { return c.meta.NATS }

// RaftAddr is the bound Raft transport address.
func (c *Coordinator) RaftAddr() string { return c.meta.Raft }

// Name is the coordinator's node name.
func (c *Coordinator) Name() string { return c.cfg.Name }

// Membership exposes the gossip view (status, tests).
func (c *Coordinator) Membership() *cluster.Membership { return c.ml }
