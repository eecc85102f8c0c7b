// Package discovery finds a macpool cluster on the local network without
// configuration: coordinators advertise the DNS-SD service _macpool._tcp
// over multicast DNS, and a node started without join addresses browses for
// it and joins the gossip addresses it finds.
//
// An advertisement carries, in its TXT record, the cluster name and id, the
// gossip address, and a salted hash of the cluster secret (never the secret
// itself), so a browser ignores clusters that are not its own. The hash only
// keeps clusters apart; it is no authentication: anyone on the LAN can read
// and replay it.
package discovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultService is the DNS-SD service type macpool coordinators advertise.
const DefaultService = "_macpool._tcp"

// TXT record keys.
const (
	txtVersion = "v"
	txtCluster = "cluster"
	txtID      = "id"
	txtGossip  = "gossip"
	txtHTTP    = "http"
	txtSecret  = "sh"
)

// ErrNotFound is returned by Discover when no advertisement of the cluster
// was seen before the context ended.
var ErrNotFound = errors.New("no macpool coordinator found on the local network")

// ErrAmbiguous is returned by Discover when several clusters with the same
// secret and no cluster name to choose between them are advertised.
var ErrAmbiguous = errors.New("several macpool clusters found on the local network")

// Config configures advertising and browsing.
type Config struct {
	// Service is the DNS-SD service type, Domain its domain.
	Service string
	Domain  string
	// Interface names the network interface to use ("" = the system's
	// default multicast interface).
	Interface string

	// Cluster is the cluster name. Advertisers must set it; a browser with
	// an empty Cluster accepts any cluster whose secret matches.
	Cluster string
	// ClusterID optionally identifies one cluster among those of a name.
	ClusterID string
	// Secret is the cluster secret; only a salted hash of it is advertised.
	// Empty is allowed (an open cluster) and matches only other open ones.
	Secret string

	// Advertising (coordinators): Instance is the DNS-SD instance name (the
	// node name), Gossip the memberlist address host:port. An unspecified
	// host (":7946", "0.0.0.0:7946") is filled in by the browser with the
	// address the advertisement came from. HTTP optionally names the API.
	Instance string
	Gossip   string
	HTTP     string

	// QueryTimeout bounds one browse round; Discover repeats rounds,
	// RetryInterval apart, until it finds the cluster or ctx ends.
	QueryTimeout  time.Duration
	RetryInterval time.Duration

	// Transport sends and answers the queries; nil = multicast DNS.
	Transport Transport
	Logger    *slog.Logger
}

// DefaultConfig returns the settings for the local network.
func DefaultConfig() Config {
	return Config{
		Service:       DefaultService,
		Domain:        "local",
		Cluster:       "macpool",
		QueryTimeout:  time.Second,
		RetryInterval: time.Second,
	}
}

// Validate checks cfg; messages name the violated constraint.
func (c Config) Validate() error {
	if !strings.HasPrefix(c.Service, "_") || !strings.HasSuffix(c.Service, "._tcp") {
		return fmt.Errorf("discovery service %q must look like _name._tcp", c.Service)
	}
	if c.Domain == "" {
		return errors.New("discovery domain must be set")
	}
	if strings.ContainsAny(c.Cluster, " \t=") {
		return fmt.Errorf("discovery cluster name %q must not contain spaces or '='", c.Cluster)
	}
	if c.QueryTimeout <= 0 {
		return fmt.Errorf("discovery query timeout %v must be positive", c.QueryTimeout)
	}
	if c.RetryInterval < 0 {
		return fmt.Errorf("discovery retry interval %v must not be negative", c.RetryInterval)
	}
	if c.Gossip != "" {
		if c.Cluster == "" {
			return errors.New("discovery cluster name must be set to advertise")
		}
		if c.Instance == "" {
			return errors.New("discovery instance name must be set to advertise")
		}
		if strings.ContainsAny(c.Instance, ".") {
			return fmt.Errorf("discovery instance name %q must not contain '.'", c.Instance)
		}
		if _, _, err := splitHostPort(c.Gossip); err != nil {
			return fmt.Errorf("discovery gossip address %q: %w", c.Gossip, err)
		}
	}
	return nil
}

// Entry is one advertisement as a transport sees it.
type Entry struct {
	Instance string   // instance name
	Addrs    []net.IP // addresses of the advertising host
	Port     int      // SRV port
	TXT      []string // TXT record, "key=value" strings
}

// Transport advertises entries and browses for them. The mDNS transport is
// the default; tests inject their own.
type Transport interface {
	// Advertise answers queries for e under service.domain until stop is
	// called (stop is idempotent).
	Advertise(service, domain string, e Entry) (stop func() error, err error)
	// Browse queries service.domain once and returns what answered within
	// timeout (or until ctx ends).
	Browse(ctx context.Context, service, domain string, timeout time.Duration) ([]Entry, error)
}

// Peer is an advertised coordinator of this node's cluster.
type Peer struct {
	Instance  string
	Cluster   string
	ClusterID string
	Gossip    string // host:port to join
	HTTP      string // HTTP API address, if advertised
}

// Discovery advertises this node (when Config.Gossip is set) and browses for
// others.
type Discovery struct {
	cfg    Config
	tr     Transport
	logger *slog.Logger

	mu     sync.Mutex
	stop   func() error
	closed bool
}

// New checks cfg and returns a Discovery; nothing is sent until Run or
// Discover.
func New(cfg Config) (*Discovery, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Discovery{cfg: cfg, tr: cfg.Transport, logger: cfg.Logger}
	if d.logger == nil {
		d.logger = slog.New(slog.DiscardHandler)
	}
	d.logger = d.logger.With("component", "discovery")
	if d.tr == nil {
		d.tr = &MDNS{Interface: cfg.Interface, Logger: d.logger}
	}
	return d, nil
}

// SecretHash is the advertised form of a cluster secret: 16 hex digits of a
// salted SHA-256.
func SecretHash(secret string) string {
	h := sha256.Sum256([]byte("macpool-discovery-v1\x00" + secret))
	return hex.EncodeToString(h[:8])
}

// Entry is the advertisement this node sends (Config.Gossip must be set).
func (d *Discovery) Entry() (Entry, error) {
	host, port, err := splitHostPort(d.cfg.Gossip)
	if err != nil {
		return Entry{}, fmt.Errorf("discovery gossip address %q: %w", d.cfg.Gossip, err)
	}
	txt := []string{
		txtVersion + "=1",
		txtCluster + "=" + d.cfg.Cluster,
		txtGossip + "=" + d.cfg.Gossip,
		txtSecret + "=" + SecretHash(d.cfg.Secret),
	}
	if d.cfg.ClusterID != "" {
		txt = append(txt, txtID+"="+d.cfg.ClusterID)
	}
	if d.cfg.HTTP != "" {
		txt = append(txt, txtHTTP+"="+d.cfg.HTTP)
	}
	e := Entry{Instance: d.cfg.Instance, Port: port, TXT: txt}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		e.Addrs = []net.IP{ip}
	} else {
		e.Addrs = localAddrs(d.cfg.Interface)
	}
	return e, nil
}

// Run advertises this node until ctx ends. Without Config.Gossip (a node
// that only browses) it just waits.
func (d *Discovery) Run(ctx context.Context) error {
	if d.cfg.Gossip != "" {
		e, err := d.Entry()
		if err != nil {
			return err
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil
		}
		stop, err := d.tr.Advertise(d.cfg.Service, d.cfg.Domain, e)
		if err != nil {
			d.mu.Unlock()
			return fmt.Errorf("advertise %s: %w", d.cfg.Service, err)
		}
		d.stop = stop
		d.mu.Unlock()
		d.logger.Info("advertising", "service", d.cfg.Service, "instance", e.Instance, "cluster", d.cfg.Cluster, "gossip", d.cfg.Gossip)
	}
	<-ctx.Done()
	return d.Close()
}

// Close stops advertising. It is safe to call more than once.
func (d *Discovery) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.stop == nil {
		return nil
	}
	err := d.stop()
	d.stop = nil
	return err
}

// Browse runs one query round and returns the peers of this node's cluster
// (same secret hash, and same cluster name and id where those are set),
// sorted by instance, excluding this node's own advertisement.
func (d *Discovery) Browse(ctx context.Context) ([]Peer, error) {
	entries, err := d.tr.Browse(ctx, d.cfg.Service, d.cfg.Domain, d.cfg.QueryTimeout)
	if err != nil {
		return nil, fmt.Errorf("browse %s: %w", d.cfg.Service, err)
	}
	// Sorted first so that of two advertisements of one gossip address the
	// same one is kept whatever order they arrived in.
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Instance < entries[j].Instance })
	seen := map[string]bool{}
	var peers []Peer
	for _, e := range entries {
		p, ok, why := d.match(e)
		if !ok {
			d.logger.Debug("ignoring advertisement", "instance", e.Instance, "reason", why)
			continue
		}
		if d.cfg.Gossip != "" && p.Instance == d.cfg.Instance {
			continue
		}
		if seen[p.Gossip] {
			continue
		}
		seen[p.Gossip] = true
		peers = append(peers, p)
	}
	return peers, nil
}

// Discover browses until it sees the cluster, then returns the gossip
// addresses to join. It fails with ErrNotFound when ctx ends first (the
// caller bounds the wait) and with ErrAmbiguous when several clusters match.
func (d *Discovery) Discover(ctx context.Context) ([]string, error) {
	for {
		peers, err := d.Browse(ctx)
		if err != nil && ctx.Err() == nil {
			d.logger.Warn("browse failed", "err", err)
		}
		if len(peers) > 0 {
			clusters := map[string]bool{}
			for _, p := range peers {
				clusters[p.Cluster+"/"+p.ClusterID] = true
			}
			if len(clusters) > 1 {
				names := make([]string, 0, len(clusters))
				for c := range clusters {
					names = append(names, strings.TrimSuffix(c, "/"))
				}
				sort.Strings(names)
				return nil, fmt.Errorf("%w: %s (choose one by name)", ErrAmbiguous, strings.Join(names, ", "))
			}
			addrs := make([]string, len(peers))
			for i, p := range peers {
				addrs[i] = p.Gossip
			}
			return addrs, nil
		}
		t := time.NewTimer(d.cfg.RetryInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (cluster %q, service %s): %w", ErrNotFound, d.cfg.Cluster, d.cfg.Service, ctx.Err())
		case <-t.C:
		}
	}
}

// match turns an entry into a peer of this node's cluster, or says why not.
func (d *Discovery) match(e Entry) (Peer, bool, string) {
	txt := parseTXT(e.TXT)
	if txt[txtVersion] != "1" {
		return Peer{}, false, fmt.Sprintf("txt version %q", txt[txtVersion])
	}
	if txt[txtSecret] != SecretHash(d.cfg.Secret) {
		return Peer{}, false, "different cluster secret"
	}
	p := Peer{Instance: e.Instance, Cluster: txt[txtCluster], ClusterID: txt[txtID], HTTP: txt[txtHTTP]}
	if d.cfg.Cluster != "" && p.Cluster != d.cfg.Cluster {
		return Peer{}, false, fmt.Sprintf("cluster %q", p.Cluster)
	}
	if d.cfg.ClusterID != "" && p.ClusterID != d.cfg.ClusterID {
		return Peer{}, false, fmt.Sprintf("cluster id %q", p.ClusterID)
	}
	host, port, err := splitHostPort(txt[txtGossip])
	if err != nil {
		return Peer{}, false, fmt.Sprintf("gossip address %q: %v", txt[txtGossip], err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		// The coordinator listens on all interfaces: join it at the
		// address it advertised from.
		if len(e.Addrs) == 0 {
			return Peer{}, false, "no address for unspecified gossip host"
		}
		host = pickAddr(e.Addrs).String()
	}
	p.Gossip = net.JoinHostPort(host, strconv.Itoa(port))
	return p, true, ""
}

// pickAddr prefers IPv4, then global IPv6 (link-local IPv6 needs a zone the
// record does not carry).
func pickAddr(ips []net.IP) net.IP {
	for _, ip := range ips {
		if ip.To4() != nil {
			return ip
		}
	}
	for _, ip := range ips {
		if !ip.IsLinkLocalUnicast() {
			return ip
		}
	}
	return ips[0]
}

func parseTXT(fields []string) map[string]string {
	m := make(map[string]string, len(fields))
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		if _, dup := m[k]; !dup { // RFC 6763 6.4: only the first occurrence counts
			m[k] = v
		}
	}
	return m
}

func splitHostPort(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q must be 1-65535", ps)
	}
	return host, port, nil
}

// localAddrs lists the addresses to advertise for a node listening on all
// interfaces: those of iface, or of every up multicast interface that is not
// loopback (loopback only when nothing else exists).
func localAddrs(iface string) []net.IP {
	var ifs []net.Interface
	if iface != "" {
		if ifi, err := net.InterfaceByName(iface); err == nil {
			ifs = []net.Interface{*ifi}
		}
	} else if all, err := net.Interfaces(); err == nil {
		for _, ifi := range all {
			if ifi.Flags&net.FlagUp != 0 && ifi.Flags&net.FlagMulticast != 0 && ifi.Flags&net.FlagLoopback == 0 {
				ifs = append(ifs, ifi)
			}
		}
	}
	var ips []net.IP
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				ips = append(ips, n.IP)
			}
		}
	}
	if len(ips) == 0 {
		ips = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	return ips
}
