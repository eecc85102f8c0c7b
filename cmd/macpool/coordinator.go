package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/dashboard"
	"github.com/macpool/macpool/metrics"
)

// version is reported in gossip metadata.
var version = "dev"

func init() {
	register("coordinator", "run a coordinator: HTTP API, queue (NATS), cluster state (Raft)", runCoordinator)
}

// clusterFlags are the flags shared by coordinator, worker and up.
type clusterFlags struct {
	name     string
	gossip   string
	join     string
	dataDir  string
	logLevel string
	fast     bool
	// cluster secret (init.go): the -secret-file flag, and the secret
	// once loaded by clusterSecret
	secretFile   string
	secret       *cluster.Secret
	secretLoaded bool
}

func (f *clusterFlags) register(fs *flag.FlagSet, gossipDefault string) {
	fs.StringVar(&f.name, "name", "", "node name, unique in the cluster (default: host name)")
	fs.StringVar(&f.gossip, "gossip", gossipDefault, "gossip listen address host:port (port 0: any)")
	fs.StringVar(&f.join, "join", "", "gossip address(es) of any cluster member, comma separated")
	fs.StringVar(&f.dataDir, "data-dir", "macpool-data", "state directory: Raft log and snapshots, embedded NATS JetStream store (models live in the Hugging Face cache)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.BoolVar(&f.fast, "fast-timeouts", false, "short gossip and Raft timeouts (tests on one machine)")
	fs.StringVar(&f.secretFile, "secret-file", "", `cluster secret made by 'macpool init' (default: $MACPOOL_SECRET_FILE, else ~/.config/macpool/cluster.secret if it exists; "none": run open)`)
}

func (f *clusterFlags) logger(stderr io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("%w: -log-level %q: %v", errUsage, f.logLevel, err)
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})), nil
}

func (f *clusterFlags) nodeName(suffix bool) string {
	if f.name != "" {
		return f.name
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "macpool"
	}
	if i := strings.IndexByte(h, '.'); i > 0 {
		h = h[:i]
	}
	if suffix {
		h = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	return h
}

func (f *clusterFlags) gossipConfig() cluster.Config {
	g := cluster.DefaultConfig()
	if f.fast {
		g = cluster.FastConfig()
	}
	g.BindAddr = f.gossip
	for _, j := range strings.Split(f.join, ",") {
		if j = strings.TrimSpace(j); j != "" {
			g.Join = append(g.Join, j)
		}
	}
	return g
}

type coordinatorFlags struct {
	clusterFlags
	http          string
	nats          string
	natsListen    string
	natsCluster   string
	raft          string
	bootstrap     string
	queueLimit    int
	keyQueueLimit int
	keyMaxStreams int
	streamWrite   time.Duration
	apiKeys       keyFlags
	modelAliases  aliasFlags     // alias.go
	discovery     discoveryFlags // LAN advertising (observe.go)
}

// keyFlags collects repeated -api-key ID:SECRET flags.
type keyFlags []string

func (k *keyFlags) String() string { return strings.Join(*k, ",") }

func (k *keyFlags) Set(v string) error {
	id, secret, ok := strings.Cut(v, ":")
	if !ok || id == "" || secret == "" {
		return fmt.Errorf("want ID:SECRET, got %q", v)
	}
	*k = append(*k, v)
	return nil
}

func (f *coordinatorFlags) register(fs *flag.FlagSet) {
	f.clusterFlags.register(fs, "0.0.0.0:7946")
	fs.StringVar(&f.http, "http", ":8080", "HTTP API listen address (port 0: any)")
	fs.StringVar(&f.nats, "nats", coordinator.NATSEmbedded, `"embedded" or nats:// URLs of an external JetStream-enabled NATS`)
	fs.StringVar(&f.natsListen, "nats-listen", "0.0.0.0:4222", "client listen address of the embedded NATS server (port 0: any)")
	fs.StringVar(&f.natsCluster, "nats-cluster", "", "NATS route listen address host:port (port 0: any) of the embedded server: every coordinator runs its own server, routed to the others found by gossip, with queues replicated on up to 3 coordinators (give it to all coordinators; the queues open once two run). Empty: one standalone server on the first coordinator")
	fs.StringVar(&f.raft, "raft", "", "Raft listen address (default: gossip host, any port)")
	fs.StringVar(&f.bootstrap, "bootstrap", "auto", "start a new Raft cluster: auto (when -join is empty), true or false")
	fs.IntVar(&f.queueLimit, "queue-limit", 256, "jobs queued per model before 429")
	fs.IntVar(&f.keyQueueLimit, "key-queue-limit", 64, "jobs queued per model and API key before 429 (fairness)")
	fs.IntVar(&f.keyMaxStreams, "key-max-streams", 0, "requests (queued or running) one API key may have open at once; more get 429 at once (0: no limit; anonymous callers are not limited)")
	fs.DurationVar(&f.streamWrite, "stream-write-timeout", api.DefaultConfig().StreamWriteTimeout, "cut off a streaming client that has not read anything for this long, cancelling its generation (0: never)")
	f.discovery.register(fs)
	fs.Var(&f.apiKeys, "api-key", "store API key ID:SECRET in the cluster state (hashed; repeatable); once any key is stored, requests need one")
	fs.Var(&f.modelAliases, "model-alias", "serve model MODEL under the name NAME too, e.g. claude-sonnet-4-5=qwen3.6-35b-a3b for agents that send their vendor's model names (NAME=MODEL; repeatable)")
}

func (f *coordinatorFlags) config(logger *slog.Logger, httpAddr string) (coordinator.Config, error) {
	cfg := coordinator.DefaultConfig()
	cfg.Name = f.nodeName(false)
	cfg.Version = version
	cfg.DataDir = f.dataDir
	cfg.Gossip = f.gossipConfig()
	cfg.NATS = f.nats
	cfg.NATSListen = f.natsListen
	cfg.NATSCluster = f.natsCluster
	cfg.RaftAddr = f.raft
	switch f.bootstrap {
	case "auto":
		cfg.Bootstrap = len(cfg.Gossip.Join) == 0
	case "true":
		cfg.Bootstrap = true
	case "false":
	default:
		return cfg, fmt.Errorf("%w: -bootstrap must be auto, true or false", errUsage)
	}
	if f.fast {
		cfg.FastRaft()
	}
	cfg.QueueLimit = f.queueLimit
	cfg.KeyQueueLimit = f.keyQueueLimit
	cfg.KeyMaxStreams = f.keyMaxStreams
	cfg.HTTPAddr = httpAddr
	cfg.Logger = logger
	secret, err := f.clusterSecret(logger, f.gossip, f.natsListen, f.natsCluster, f.raft) // init.go
	if err != nil {
		return cfg, err
	}
	cfg.Secret = secret
	if secret != nil && cfg.AdminToken == "" {
		cfg.AdminToken = secret.AdminToken() // macpool keys/drain send it when they find the secret
	}
	f.discovery.useClusterSecret(secret)
	return cfg, nil
}

func runCoordinator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("coordinator", stderr)
	var f coordinatorFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger, err := f.logger(stderr)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	c, _, err := startCoordinator(ctx, g, &f, logger, stdout)
	if err != nil {
		return err
	}
	_ = c
	return g.Wait()
}

// startCoordinator opens the HTTP listener, starts the coordinator and its
// HTTP server in g, and prints the bound addresses.
func startCoordinator(ctx context.Context, g *errgroup.Group, f *coordinatorFlags, logger *slog.Logger, stdout io.Writer) (*coordinator.Coordinator, net.Listener, error) {
	ln, err := net.Listen("tcp", f.http)
	if err != nil {
		return nil, nil, fmt.Errorf("http listen %s: %w", f.http, err)
	}
	httpAddr := ln.Addr().String()
	cfg, err := f.config(logger, httpAddr)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	cfg.Metrics = metrics.New() // queue wait recorded by the coordinator; the rest in observe.go
	c, err := coordinator.New(cfg)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	srv, err := newHTTPServer(f.apiConfig(httpAddr), c, cfg.Metrics, logger)
	if err != nil {
		ln.Close()
		c.Close()
		return nil, nil, err
	}
	g.Go(func() error { return c.Run(ctx) })
	f.discovery.advertise(ctx, g, cfg.Name, c.GossipAddr(), httpAddr, logger) // mDNS _macpool._tcp
	if len(f.apiKeys) > 0 {
		g.Go(func() error {
			// Written through Raft (forwarded to the leader, retried while
			// none is elected).
			for _, kv := range f.apiKeys {
				id, secret, _ := strings.Cut(kv, ":")
				kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := c.CreateAPIKey(kctx, admin.KeyRequest{ID: id, Name: id, Secret: secret})
				cancel()
				if err != nil && ctx.Err() == nil {
					return fmt.Errorf("store api key %s: %w", id, err)
				}
			}
			return nil
		})
	}
	g.Go(func() error { return srv.Serve(ctx, ln) })
	fmt.Fprintf(stdout, "listening role=coordinator name=%s http=%s gossip=%s nats=%s raft=%s\n",
		cfg.Name, httpAddr, c.GossipAddr(), c.NATSURL(), c.RaftAddr())
	return c, ln, nil
}

// apiConfig is the HTTP server's configuration: api.DefaultConfig's
// timeouts, the flags' stream write timeout, and a short shutdown so that
// Ctrl-C does not wait half a minute for streams.
func (f *coordinatorFlags) apiConfig(httpAddr string) api.Config {
	acfg := api.DefaultConfig()
	acfg.Addr = httpAddr
	acfg.ShutdownTimeout = 5 * time.Second
	acfg.StreamWriteTimeout = f.streamWrite
	acfg.ModelAliases = f.modelAliases
	return acfg
}

// newHTTPServer builds the coordinator's one HTTP server: the OpenAI API
// (instrumented for /metrics, observe.go), the admin endpoints, /metrics
// and the dashboard, on one router with acfg's timeouts. reg is the
// registry the coordinator was configured with (Config.Metrics).
func newHTTPServer(acfg api.Config, c *coordinator.Coordinator, reg *metrics.Registry, logger *slog.Logger) (*api.Server, error) {
	acfg.Auth = c                      // anonymous while the cluster stores no API keys
	acfg.Admin = c                     // keys, drain (macpool keys, drain), model registry (macpool models), status
	acfg.Responses = c.ResponseStore() // Responses API state, cluster-wide
	d, err := dashboard.New(dashboard.DefaultConfig())
	if err != nil {
		return nil, err
	}
	reg, svc := observeCoordinator(c, reg)
	acfg.Handlers = map[string]http.Handler{metrics.Path: reg.Handler()}
	for _, p := range d.Patterns() { // the dashboard at / and /dashboard
		acfg.Handlers[p] = d
	}
	return api.New(acfg, svc, logger)
}
