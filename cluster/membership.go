package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config configures a Membership.
type Config struct {
	// Name is the node name, unique in the cluster.
	Name string
	// BindAddr is host:port for gossip (UDP and TCP); port 0 picks a free one.
	BindAddr string
	// Join lists gossip addresses of existing members; empty starts a new cluster.
	Join []string
	// Meta is the initial metadata; update it later with UpdateMeta.
	Meta Meta
	// Failure detection timing. DefaultConfig gives LAN values; tests shorten them.
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	GossipInterval time.Duration
	SuspicionMult  int
	// LeaveTimeout bounds the graceful leave broadcast in Close.
	LeaveTimeout time.Duration
	// DeadGossipTime is how long memberlist still gossips to a failed node
	// (so a node back within it is found again without a rejoin; 0: its
	// default, 30 s).
	DeadGossipTime time.Duration
	// PeersFile, if set, is where the gossip addresses of the peers seen
	// are remembered (JSON, 0600), so that a node restarted without Join
	// (or with stale Join addresses) finds its cluster again. Empty: the
	// peers are remembered in memory only (peers.go).
	PeersFile string
	// RejoinMin and RejoinMax bound the backoff between attempts to dial
	// remembered peers and Join addresses that are not alive (0: 1 s and
	// 15 s).
	RejoinMin, RejoinMax time.Duration
	// Discover, if set, finds gossip addresses by other means (mDNS); it
	// is asked when no other member is alive.
	Discover func(ctx context.Context) ([]string, error)
	// Secret, if set, encrypts and authenticates all gossip with its
	// derived keyring key (AES-256-GCM); nodes without it (or with another
	// secret) can neither join nor read the gossip. Nil: plaintext gossip.
	Secret *Secret
	Logger *slog.Logger
}

// DefaultConfig returns LAN timings: a failed node is noticed within a few seconds.
func DefaultConfig() Config {
	return Config{
		BindAddr:       "0.0.0.0:7946",
		ProbeInterval:  time.Second,
		ProbeTimeout:   500 * time.Millisecond,
		GossipInterval: 200 * time.Millisecond,
		SuspicionMult:  3,
		LeaveTimeout:   2 * time.Second,
		RejoinMin:      time.Second,
		RejoinMax:      15 * time.Second,
	}
}

// FastConfig returns timings for tests on loopback: failures are seen in
// about a second.
func FastConfig() Config {
	c := DefaultConfig()
	c.BindAddr = "127.0.0.1:0"
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 20 * time.Millisecond
	c.SuspicionMult = 2
	c.LeaveTimeout = time.Second
	c.DeadGossipTime = 2 * time.Second
	c.RejoinMin = 100 * time.Millisecond
	c.RejoinMax = time.Second
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Name == "" {
		return errors.New("membership: node name must be set")
	}
	if _, _, err := net.SplitHostPort(c.BindAddr); err != nil {
		return fmt.Errorf("membership: gossip address %q must be host:port: %w", c.BindAddr, err)
	}
	if c.ProbeTimeout <= 0 || c.ProbeInterval <= c.ProbeTimeout {
		return fmt.Errorf("membership: probe interval %v must exceed probe timeout %v (> 0)", c.ProbeInterval, c.ProbeTimeout)
	}
	if c.GossipInterval <= 0 {
		return fmt.Errorf("membership: gossip interval %v must be positive", c.GossipInterval)
	}
	if c.RejoinMin < 0 || (c.RejoinMax != 0 && c.RejoinMax < c.RejoinMin) {
		return fmt.Errorf("membership: rejoin max %v must be at least rejoin min %v (>= 0)", c.RejoinMax, c.RejoinMin)
	}
	if c.SuspicionMult < 1 {
		return fmt.Errorf("membership: suspicion multiplier %d must be at least 1", c.SuspicionMult)
	}
	if _, err := c.Meta.Encode(); err != nil {
		return fmt.Errorf("membership: %w", err)
	}
	return nil
}

// Member is one live node as seen by gossip.
type Member struct {
	Name string
	Addr string // gossip address
	Meta Meta
}

// Membership is this node's view of the cluster, kept by memberlist.
type Membership struct {
	cfg     Config
	log     *slog.Logger
	ml      *memberlist.Memberlist
	addr    string
	started int64 // unix seconds: every Meta gossiped carries it (Meta.Started)

	mu      sync.RWMutex
	meta    []byte
	members map[string]Member
	left    map[string]bool // nodes whose last departure was a graceful leave
	subs    map[chan struct{}]struct{}
	// peers.go: remembered peers, and the rejoin loop's wake-ups
	known        map[string]knownPeer
	dirty        bool
	resetBackoff bool
	wake         chan struct{}
	stopLoop     context.CancelFunc
	wg           sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// New binds the gossip port and joins cfg.Join and the peers remembered in
// cfg.PeersFile. It fails if none of them answers only when there are no
// remembered peers (a wrong -join address is an error at once); otherwise
// the rejoin loop keeps trying. memberlist's goroutines and the rejoin loop
// run until Close.
func New(cfg Config) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.RejoinMin == 0 {
		cfg.RejoinMin = time.Second
	}
	if cfg.RejoinMax == 0 {
		cfg.RejoinMax = max(15*time.Second, cfg.RejoinMin)
	}
	m := &Membership{
		cfg:     cfg,
		log:     logger.With("component", "membership"),
		members: map[string]Member{},
		left:    map[string]bool{},
		subs:    map[chan struct{}]struct{}{},
		wake:    make(chan struct{}, 1),
		started: time.Now().Unix(),
	}
	m.meta, _ = m.stamp(cfg.Meta).Encode()
	known, err := loadPeers(cfg.PeersFile)
	if err != nil {
		return nil, err
	}
	m.known = known
	delete(m.known, cfg.Name)

	host, portStr, _ := net.SplitHostPort(cfg.BindAddr)
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("membership: gossip port %q: %w", portStr, err)
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr = host
	mc.BindPort = port
	// memberlist replaces the advertised port with the bound one only when
	// it picks the port itself (BindPort 0); a fixed port must be given as
	// the advertised one too, or the node gossips port 0 and peers probe,
	// suspect and drop it.
	mc.AdvertisePort = port
	if host == "0.0.0.0" || host == "" || host == "::" {
		mc.AdvertiseAddr = ""
	} else {
		mc.AdvertiseAddr = host
	}
	mc.ProbeInterval = cfg.ProbeInterval
	mc.ProbeTimeout = cfg.ProbeTimeout
	mc.GossipInterval = cfg.GossipInterval
	mc.SuspicionMult = cfg.SuspicionMult
	// A node restarted under its name after a crash (on another port or
	// address) replaces its dead entry at once, instead of being refused
	// as a conflict until the entry is reaped (GossipToTheDeadTime, 30 s).
	mc.DeadNodeReclaimTime = time.Nanosecond
	mc.PushPullInterval = 10 * cfg.ProbeInterval
	if cfg.DeadGossipTime > 0 {
		mc.GossipToTheDeadTime = cfg.DeadGossipTime
	}
	mc.TCPTimeout = 2 * time.Second
	if cfg.Secret != nil {
		kr, err := memberlist.NewKeyring(nil, cfg.Secret.GossipKey())
		if err != nil {
			return nil, fmt.Errorf("membership: gossip keyring: %w", err)
		}
		mc.Keyring = kr
		mc.GossipVerifyIncoming = true // refuse plaintext from nodes without the secret
		mc.GossipVerifyOutgoing = true
	}
	mc.Delegate = m
	mc.Events = m
	mc.Logger = log.New(&logWriter{m.log}, "", 0)
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("membership: start gossip on %s: %w", cfg.BindAddr, err)
	}
	m.ml = ml
	ln := ml.LocalNode()
	m.addr = net.JoinHostPort(ln.Addr.String(), strconv.Itoa(int(ln.Port)))
	join := append([]string(nil), cfg.Join...)
	for _, p := range m.known {
		if p.Addr != m.addr && !slices.Contains(join, p.Addr) {
			join = append(join, p.Addr)
		}
	}
	if len(join) > 0 {
		if _, err := ml.Join(join); err != nil {
			if len(m.known) == 0 {
				ml.Shutdown()
				return nil, fmt.Errorf("membership: join %v: %w", cfg.Join, err)
			}
			m.log.Warn("no remembered peer answers yet; retrying in the background", "tried", join, "err", err)
		}
	}
	lctx, stop := context.WithCancel(context.Background())
	m.stopLoop = stop
	m.wg.Add(1)
	go m.rejoinLoop(lctx)
	m.log.Info("gossip started", "addr", m.addr, "join", cfg.Join, "remembered", len(m.known), "encrypted", cfg.Secret != nil)
	return m, nil
}

// Addr is the bound gossip address (host:port).
func (m *Membership) Addr() string { return m.addr }

// Name is this node's name.
func (m *Membership) Name() string { return m.cfg.Name }

// UpdateMeta replaces this node's metadata and gossips it.
func (m *Membership) UpdateMeta(meta Meta) error {
	b, err := m.stamp(meta).Encode()
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.meta = b
	m.mu.Unlock()
	if err := m.ml.UpdateNode(m.cfg.LeaveTimeout); err != nil {
		return fmt.Errorf("membership: update meta: %w", err)
	}
	return nil
}

// stamp sets the start time of meta unless its node set its own.
func (m *Membership) stamp(meta Meta) Meta {
	if meta.Started == 0 {
		meta.Started = m.started
	}
	return meta
}

// Members returns the live members, sorted by name (this node included).
func (m *Membership) Members() []Member {
	m.mu.RLock()
	out := make([]Member, 0, len(m.members))
	for _, x := range m.members {
		out = append(out, x)
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Member returns the live member named name.
func (m *Membership) Member(name string) (Member, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	x, ok := m.members[name]
	return x, ok
}

// LeftGracefully reports whether node name is gone after a graceful leave
// (as opposed to failing).
func (m *Membership) LeftGracefully(name string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.left[name]
}

// Subscribe returns a channel that receives a value (coalesced) after every
// membership change, and a function that unsubscribes.
func (m *Membership) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		delete(m.subs, ch)
		m.mu.Unlock()
	}
}

// Run blocks until ctx ends, then leaves the cluster gracefully.
func (m *Membership) Run(ctx context.Context) error {
	<-ctx.Done()
	return m.Close()
}

// Close leaves the cluster (broadcasting the leave) and stops gossip. Safe to
// call more than once.
func (m *Membership) Close() error {
	m.closeOnce.Do(func() {
		m.mu.RLock()
		meta, err := ParseMeta(m.meta)
		m.mu.RUnlock()
		if err == nil {
			meta.Leaving = true
			if b, err := meta.Encode(); err == nil {
				m.mu.Lock()
				m.meta = b
				m.mu.Unlock()
				m.ml.UpdateNode(min(m.cfg.LeaveTimeout, 500*time.Millisecond))
			}
		}
		m.stopLoop()
		m.wg.Wait()
		if err := m.ml.Leave(m.cfg.LeaveTimeout); err != nil {
			m.log.Debug("leave", "err", err)
		}
		m.closeErr = m.ml.Shutdown()
	})
	return m.closeErr
}

// Kill stops gossip without a leave message, as a crash would (tests).
func (m *Membership) Kill() {
	m.closeOnce.Do(func() {
		m.stopLoop()
		m.wg.Wait()
		m.closeErr = m.ml.Shutdown()
	})
}

func (m *Membership) notify() {
	for ch := range m.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (m *Membership) set(n *memberlist.Node) {
	meta, err := ParseMeta(n.Meta)
	if err != nil {
		m.log.Warn("ignoring member with bad metadata", "node", n.Name, "err", err)
		return
	}
	m.mu.Lock()
	m.members[n.Name] = Member{Name: n.Name, Addr: n.Address(), Meta: meta}
	delete(m.left, n.Name)
	if meta.Leaving {
		m.forget(n.Name)
	} else {
		m.remember(n.Name, n.Address())
	}
	m.notify()
	m.mu.Unlock()
}

// NotifyJoin implements memberlist.EventDelegate.
func (m *Membership) NotifyJoin(n *memberlist.Node) {
	m.log.Info("member joined", "node", n.Name, "addr", n.Address())
	m.set(n)
}

// NotifyUpdate implements memberlist.EventDelegate.
func (m *Membership) NotifyUpdate(n *memberlist.Node) { m.set(n) }

// NotifyLeave implements memberlist.EventDelegate (graceful leave or failure).
func (m *Membership) NotifyLeave(n *memberlist.Node) {
	m.log.Info("member gone", "node", n.Name)
	m.mu.Lock()
	if last, ok := m.members[n.Name]; ok && last.Meta.Leaving {
		m.left[n.Name] = true
		m.forget(n.Name)
	} else if n.Name != m.cfg.Name {
		m.lost()
	}
	delete(m.members, n.Name)
	m.notify()
	m.mu.Unlock()
}

// NodeMeta implements memberlist.Delegate.
func (m *Membership) NodeMeta(limit int) []byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if len(m.meta) > limit {
		return nil
	}
	return append([]byte(nil), m.meta...)
}

// NotifyMsg implements memberlist.Delegate (unused: user messages go over NATS).
func (m *Membership) NotifyMsg([]byte) {}

// GetBroadcasts implements memberlist.Delegate.
func (m *Membership) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState implements memberlist.Delegate.
func (m *Membership) LocalState(join bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate.
func (m *Membership) MergeRemoteState(buf []byte, join bool) {}

// logWriter adapts memberlist's log.Logger output to slog at debug level.
type logWriter struct{ l *slog.Logger }

func (w *logWriter) Write(p []byte) (int, error) {
	w.l.Debug(string(trimNL(p)))
	return len(p), nil
}

func trimNL(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}
