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
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/dashboard"
	"github.com/macpool/macpool/metrics"
)

// version is reported in gossip metadata (the status and the dashboard show it).
var version = cluster.BuildVersion()

func init() {
	register("coordinator", "run a coordinator: HTTP API, queue (NATS), cluster state (Raft)", runCoordinator)
}

// clusterFlags are the flags shared by coordinator, worker and up.
type clusterFlags struct {
	name    string
	gossip  string
	join    string
	dataDir string
	// dataDirSet: -data-dir was given; a worker remembers its gossip
	// peers there only then (its default data dir is the working folder)
	dataDirSet bool
	logLevel   string
	fast       bool
	// cluster secret (init.go): the -secret-file flag, and the secret
	// once loaded by clusterSecret
	secretFile   string
	secret       *cluster.Secret
	secretLoaded bool
	// insecure: -insecure, run without a cluster secret (plaintext gossip,
	// NATS, Raft); -secret-file none means the same (secure.go)
	insecure bool
	// discover finds the cluster's gossip addresses again by mDNS
	// (observe.go); set for a worker that found its cluster that way
	discover func(ctx context.Context) ([]string, error)
}

func (f *clusterFlags) register(fs *flag.FlagSet, gossipDefault string) {
	fs.StringVar(&f.name, "name", "", "node name, unique in the cluster (default: host name)")
	fs.StringVar(&f.gossip, "gossip", gossipDefault, "gossip listen address host:port (port 0: any)")
	fs.StringVar(&f.join, "join", "", "gossip address(es) of any cluster member, comma separated")
	f.dataDir = "macpool-data"
	fs.Func("data-dir", "state directory: Raft log and snapshots, embedded NATS JetStream store, the gossip peers seen (models live in the Hugging Face cache) (default \"macpool-data\")", func(v string) error {
		f.dataDir, f.dataDirSet = v, true
		return nil
	})
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.BoolVar(&f.fast, "fast-timeouts", false, "short gossip and Raft timeouts (tests on one machine)")
	fs.BoolVar(&f.insecure, "insecure", false, "run without a cluster secret: gossip, NATS, Raft and the model store in plaintext, open to anyone on the network (default: a coordinator creates the secret, a worker needs it: -join TOKEN or the secret file)")
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
	bodyRead      time.Duration
	bodyInFlight  int64
	apiKeys       keyFlags
	openAPI       bool
	requireKey    bool
	modelAliases  aliasFlags     // alias.go
	discovery     discoveryFlags // LAN advertising (observe.go)
}

// keyFlags collects repeated -api-key ID:SECRET flags.
type keyFlags []coordinator.KeyRequest

func (k *keyFlags) String() string { return fmt.Sprint(len(*k), " keys") }

func (k *keyFlags) Set(v string) error {
	id, secret, ok := strings.Cut(v, ":")
	if !ok || id == "" || secret == "" {
		return fmt.Errorf("want ID:SECRET, got %q", v)
	}
	*k = append(*k, coordinator.KeyRequest{ID: id, Name: id, Secret: secret})
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
	fs.DurationVar(&f.bodyRead, "body-read-timeout", api.DefaultConfig().BodyReadTimeout, "a client that has not sent its whole request body within this long gets 408 (0: never)")
	fs.Int64Var(&f.bodyInFlight, "max-body-bytes-in-flight", api.DefaultConfig().MaxBodyBytesInFlight, "request body bytes all clients of this coordinator may have in flight; past it large requests get 429 (bodies up to 64 KiB are not counted)")
	fs.DurationVar(&f.streamWrite, "stream-write-timeout", api.DefaultConfig().StreamWriteTimeout, "cut off a streaming client that has not read anything for this long, cancelling its generation (0: never)")
	f.discovery.register(fs)
	fs.Var(&f.apiKeys, "api-key", "store API key ID:SECRET in the cluster state (hashed; repeatable); once any key is stored, requests need one")
	fs.BoolVar(&f.requireKey, "require-api-key", false, "need an API key while none is stored also on a loopback -http (behind a reverse proxy on this machine, say); the first start creates and prints an admin key")
	fs.BoolVar(&f.openAPI, "open-api", false, "serve the API without keys while none is stored even when -http listens beyond loopback (anyone on the network can use it); default: keys required there, and the first start creates and prints an admin key")
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
	if exposed := cluster.ExposedAddrs(httpAddr); len(exposed) > 0 {
		if f.openAPI {
			logger.Warn("-open-api: the API listens beyond loopback and serves anyone who can reach it while no API key is stored", "http", httpAddr)
		} else {
			cfg.RequireKeys = true // firstAdminKey prints the key to use
		}
	}
	cfg.RequireKeys = cfg.RequireKeys || f.requireKey
	secret, err := f.clusterSecret(logger, f.gossip, f.natsListen, f.natsCluster, f.raft) // init.go
	if err != nil {
		return cfg, err
	}
	if secret == nil && !f.optedOut() {
		if len(cfg.Gossip.Join) > 0 {
			return cfg, errNoSecret // secure.go: joining a cluster takes its secret
		}
		if secret, err = f.createSecret(logger); err != nil { // secure.go: a new cluster gets one
			return cfg, err
		}
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
	if err := f.useJoinToken(); err != nil { // secure.go: -join TOKEN
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
		g.Go(func() error { return c.StoreAPIKeys(ctx, f.apiKeys) })
	}
	if cfg.RequireKeys && len(f.apiKeys) == 0 {
		g.Go(func() error { firstAdminKey(ctx, c, httpAddr, f.dataDir, stdout, logger); return nil })
	}
	g.Go(func() error { return srv.Serve(ctx, ln) })
	fmt.Fprintf(stdout, "listening role=coordinator name=%s http=%s gossip=%s nats=%s raft=%s\n",
		cfg.Name, httpAddr, c.GossipAddr(), c.NATSURL(), c.RaftAddr())
	if cfg.Secret != nil {
		printJoinToken(stdout, cfg.Secret, c.GossipAddr(), f.dataDir, logger) // secure.go
	}
	return c, ln, nil
}

// firstAdminKey hands the operator the admin key the first start creates
// when the API needs keys (coordinator.FirstAdminKey); only a terminal sees
// the key itself (cluster.ShowSecret).
func firstAdminKey(ctx context.Context, c *coordinator.Coordinator, httpAddr, dataDir string, stdout io.Writer, logger *slog.Logger) {
	k, ok, err := c.FirstAdminKey(ctx)
	if err != nil && ctx.Err() == nil {
		logger.Warn("creating the first admin key", "err", err)
	}
	if !ok {
		return
	}
	why := fmt.Sprintf("api key required (the API on %s listens beyond loopback, or -require-api-key): created admin key %q", httpAddr, k.ID)
	line := fmt.Sprintf("export OPENAI_API_KEY=%s\n", k.Secret)
	if path, err := cluster.ShowSecret(stdout, why+" (shown once, only its hash is stored):\n", line, filepath.Join(dataDir, "admin-key")); err != nil {
		logger.Warn("writing the first admin key", "err", err)
	} else if path != "" {
		fmt.Fprintf(stdout, "%s, written to %s (mode 0600; only its hash is stored in the cluster)\n", why, path)
	}
}

// apiConfig is the HTTP server's configuration: api.DefaultConfig's
// timeouts, the flags' stream write timeout, and a short shutdown so that
// Ctrl-C does not wait half a minute for streams.
func (f *coordinatorFlags) apiConfig(httpAddr string) api.Config {
	acfg := api.DefaultConfig()
	acfg.Addr = httpAddr
	acfg.ShutdownTimeout = 5 * time.Second
	acfg.StreamWriteTimeout = f.streamWrite
	acfg.BodyReadTimeout = f.bodyRead
	acfg.MaxBodyBytesInFlight = f.bodyInFlight
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
	acfg.OnRejected = func(path string, e *openai.Error) { reg.ObserveRejected(api.JobKind(path), e) }
	acfg.Handlers = map[string]http.Handler{metrics.Path: reg.Handler()}
	for _, p := range d.Patterns() { // the dashboard at / and /dashboard
		acfg.Handlers[p] = d
	}
	return api.New(acfg, svc, logger)
}
