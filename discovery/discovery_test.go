package discovery

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// memberlist's Shutdown does not wait for a probe in flight: it ends
	// at its ack timeout (a second), which a loaded machine can stretch
	// past goleak's retries.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

// memNet is an in-memory Transport: what is advertised on it is what a
// browse returns.
type memNet struct {
	mu      sync.Mutex
	entries map[int]Entry
	next    int
	browses int
}

func (n *memNet) Advertise(service, domain string, e Entry) (func() error, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.entries == nil {
		n.entries = map[int]Entry{}
	}
	id := n.next
	n.next++
	n.entries[id] = e
	return func() error {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.entries, id)
		return nil
	}, nil
}

func (n *memNet) Browse(ctx context.Context, service, domain string, timeout time.Duration) ([]Entry, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.browses++
	var out []Entry
	for _, e := range n.entries {
		out = append(out, e)
	}
	return out, nil
}

func (n *memNet) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.entries)
}

func testConfig(tr Transport) Config {
	cfg := DefaultConfig()
	cfg.Transport = tr
	cfg.QueryTimeout = 50 * time.Millisecond
	cfg.RetryInterval = 10 * time.Millisecond
	return cfg
}

// advertise starts a Discovery that advertises cfg and returns a stop
// function that waits for Run to return.
func advertise(t *testing.T, cfg Config) func() {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := d.Close(); err != nil { // idempotent
			t.Errorf("second Close: %v", err)
		}
	}
	t.Cleanup(func() { cancel() })
	return stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"default", func(c *Config) {}, ""},
		{"bad service", func(c *Config) { c.Service = "macpool" }, `discovery service "macpool" must look like _name._tcp`},
		{"no domain", func(c *Config) { c.Domain = "" }, "discovery domain must be set"},
		{"space in cluster", func(c *Config) { c.Cluster = "a b" }, `discovery cluster name "a b" must not contain spaces or '='`},
		{"zero timeout", func(c *Config) { c.QueryTimeout = 0 }, "discovery query timeout 0s must be positive"},
		{"negative retry", func(c *Config) { c.RetryInterval = -time.Second }, "discovery retry interval -1s must not be negative"},
		{"advertise without instance", func(c *Config) { c.Gossip = ":7946" }, "discovery instance name must be set to advertise"},
		{"advertise without cluster", func(c *Config) { c.Gossip = ":7946"; c.Instance = "a"; c.Cluster = "" }, "discovery cluster name must be set to advertise"},
		{"dotted instance", func(c *Config) { c.Gossip = ":7946"; c.Instance = "a.b" }, `discovery instance name "a.b" must not contain '.'`},
		{"bad gossip", func(c *Config) { c.Gossip = "host"; c.Instance = "a" }, `discovery gossip address "host": address host: missing port in address`},
		{"gossip port 0", func(c *Config) { c.Gossip = ":0"; c.Instance = "a" }, `discovery gossip address ":0": port "0" must be 1-65535`},
		{"advertiser", func(c *Config) { c.Gossip = "10.0.0.2:7946"; c.Instance = "mac-1" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.modify(&cfg)
			err := cfg.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestEntryDoesNotCarrySecret(t *testing.T) {
	cfg := testConfig(&memNet{})
	cfg.Instance, cfg.Gossip, cfg.Secret, cfg.ClusterID, cfg.HTTP = "mac-1", "10.0.0.2:7946", "hunter2-secret", "c0ffee", "10.0.0.2:8080"
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := d.Entry()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"v=1", "cluster=macpool", "gossip=10.0.0.2:7946", "sh=" + SecretHash("hunter2-secret"), "id=c0ffee", "http=10.0.0.2:8080"}
	if !reflect.DeepEqual(e.TXT, want) {
		t.Errorf("TXT got %q, want %q", e.TXT, want)
	}
	for _, f := range e.TXT {
		if strings.Contains(f, "hunter2") {
			t.Errorf("TXT field %q carries the secret", f)
		}
	}
	if e.Port != 7946 || len(e.Addrs) != 1 || !e.Addrs[0].Equal(net.IPv4(10, 0, 0, 2)) {
		t.Errorf("got port %d addrs %v, want 7946 [10.0.0.2]", e.Port, e.Addrs)
	}
	if SecretHash("a") == SecretHash("b") || len(SecretHash("")) != 16 {
		t.Errorf("SecretHash: distinct secrets must differ and be 16 hex digits")
	}
}

// TestBrowseFilters checks the advertise/browse logic through the in-memory
// transport: strangers' clusters (other secret, other name, other id, other
// protocol version) are ignored, unspecified gossip hosts are filled in from
// the advertisement's address, duplicates and the node's own advertisement
// are dropped.
func TestBrowseFilters(t *testing.T) {
	net0 := &memNet{}
	adv := func(instance, cluster, id, secret, gossip string) func() {
		cfg := testConfig(net0)
		cfg.Instance, cfg.Cluster, cfg.ClusterID, cfg.Secret, cfg.Gossip = instance, cluster, id, secret, gossip
		return advertise(t, cfg)
	}
	stops := []func(){
		adv("coord-b", "office", "", "s3cret", "192.168.1.20:7946"),
		adv("coord-a", "office", "", "s3cret", "0.0.0.0:7946"), // listens on all interfaces
		adv("stranger", "office", "", "other-secret", "192.168.1.30:7946"),
		adv("lab", "lab", "", "s3cret", "192.168.1.40:7946"),
		adv("coord-dup", "office", "", "s3cret", "192.168.1.20:7946"),
	}
	// An entry from an unknown protocol version.
	stopV2, _ := net0.Advertise(DefaultService, "local", Entry{Instance: "future", Port: 1, TXT: []string{"v=2", "sh=" + SecretHash("s3cret")}})
	defer stopV2()
	waitFor(t, "advertisements", func() bool { return net0.count() == 6 })

	cfg := testConfig(net0)
	cfg.Cluster, cfg.Secret = "office", "s3cret"
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	peers, err := d.Browse(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range peers {
		got = append(got, p.Instance+"="+p.Gossip)
	}
	// coord-a advertised 0.0.0.0: the in-memory entry's address comes from
	// localAddrs, so check only that it was replaced by a concrete host.
	// coord-dup repeats coord-b's address and sorts after it, so it is dropped.
	if len(got) != 2 || !strings.HasPrefix(got[0], "coord-a=") || got[1] != "coord-b=192.168.1.20:7946" {
		t.Fatalf("got peers %q, want coord-a=<host>:7946 and coord-b=192.168.1.20:7946", got)
	}
	if h, _, _ := net.SplitHostPort(peers[0].Gossip); net.ParseIP(h) == nil || net.ParseIP(h).IsUnspecified() {
		t.Errorf("coord-a gossip %q: want a concrete address", peers[0].Gossip)
	}

	// With no cluster name, two clusters share the secret: ambiguous.
	cfg.Cluster = ""
	d2, _ := New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := d2.Discover(ctx); !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "lab, office") {
		t.Errorf("Discover without cluster name: got %v, want ErrAmbiguous naming lab, office", err)
	}

	for _, stop := range stops {
		stop()
	}
	if n := net0.count(); n != 1 {
		t.Errorf("after Close got %d advertisements, want 1 (the v2 entry)", n)
	}
}

func TestDiscoverWaitsForCoordinator(t *testing.T) {
	net0 := &memNet{}
	cfg := testConfig(net0)
	cfg.Secret = "s"
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		addrs []string
		err   error
	}
	res := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a, err := d.Discover(ctx)
		res <- result{a, err}
	}()
	// Browsing already, nothing found yet.
	waitFor(t, "two browse rounds", func() bool { net0.mu.Lock(); defer net0.mu.Unlock(); return net0.browses >= 2 })
	acfg := testConfig(net0)
	acfg.Instance, acfg.Gossip, acfg.Secret = "coord", "10.1.2.3:7946", "s"
	stop := advertise(t, acfg)
	defer stop()
	r := <-res
	if r.err != nil || !reflect.DeepEqual(r.addrs, []string{"10.1.2.3:7946"}) {
		t.Errorf("got %v, %v; want [10.1.2.3:7946]", r.addrs, r.err)
	}

	// Nothing advertised under another secret: ErrNotFound when ctx ends.
	cfg.Secret = "other"
	d2, _ := New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := d2.Discover(ctx); !errors.Is(err, ErrNotFound) {
		t.Errorf("got %v, want ErrNotFound", err)
	}
}

// TestMDNSLoopback runs real multicast DNS on the loopback interface of a
// network namespace it creates (root and iproute2 needed): the test binary
// re-executes itself inside the namespace, where lo is up with MULTICAST set.
// The host's interfaces are never touched.
func TestMDNSLoopback(t *testing.T) {
	if os.Getenv("MACPOOL_DISCOVERY_IN_NETNS") == "1" {
		mdnsLoopback(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace; the advertise/browse logic is covered by TestBrowseFilters")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("needs iproute2 (ip) to create a network namespace")
	}
	ns := "macpool-disc-" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-") + "-" + strconv.Itoa(os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.Command(ip, "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace here: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command(ip, "netns", "del", ns).Run() })
	run("-n", ns, "link", "set", "lo", "up")
	run("-n", ns, "link", "set", "lo", "multicast", "on")
	run("-n", ns, "route", "add", "224.0.0.0/4", "dev", "lo")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ip, "netns", "exec", ns, self, "-test.run", "^TestMDNSLoopback$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "MACPOOL_DISCOVERY_IN_NETNS=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in namespace %s:\n%s", ns, out)
	if err != nil {
		t.Fatalf("test in namespace failed: %v", err)
	}
}

// newMember starts a memberlist node on 127.0.0.1 (any port), left and shut
// down at cleanup.
func newMember(t *testing.T, name string) *memberlist.Memberlist {
	t.Helper()
	mc := memberlist.DefaultLocalConfig()
	mc.Name = name
	mc.BindAddr = "127.0.0.1"
	mc.BindPort = 0
	mc.LogOutput = io.Discard
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatalf("memberlist: %v", err)
	}
	t.Cleanup(func() {
		ml.Leave(time.Second)
		ml.Shutdown()
	})
	return ml
}

func mdnsLoopback(t *testing.T) {
	newCfg := func() Config {
		cfg := DefaultConfig()
		cfg.Interface = "lo"
		cfg.Transport = &MDNS{Interface: "lo", DisableIPv6: true}
		cfg.QueryTimeout = 300 * time.Millisecond
		cfg.RetryInterval = 50 * time.Millisecond
		return cfg
	}
	// A real gossip member for the advertised address, listening on all
	// interfaces (advertised as 0.0.0.0:PORT, so the browser must fill in
	// the host from the mDNS answer).
	coord := newMember(t, "coord-1")
	port := coord.LocalNode().Port
	a := newCfg()
	a.Instance, a.Gossip, a.Secret, a.Cluster, a.HTTP = "coord-1", net.JoinHostPort("0.0.0.0", strconv.Itoa(int(port))), "office-secret", "office", "127.0.0.1:8080"
	stopA := advertise(t, a)
	s := newCfg()
	s.Instance, s.Gossip, s.Secret, s.Cluster = "stranger", "127.0.0.1:7000", "not-ours", "office"
	stopS := advertise(t, s)

	b := newCfg()
	b.Secret, b.Cluster = "office-secret", "office"
	d, err := New(b)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	addrs, err := d.Discover(ctx)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	t.Logf("discovered %v in %v", addrs, time.Since(start))
	want := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	if !reflect.DeepEqual(addrs, []string{want}) {
		t.Fatalf("got %v, want [%s] (the stranger's cluster must be ignored)", addrs, want)
	}
	// The discovered address is joinable: a worker-side member joins it.
	w := newMember(t, "worker-1")
	if n, err := w.Join(addrs); err != nil || n != 1 {
		t.Fatalf("join %v: %d, %v", addrs, n, err)
	}
	waitFor(t, "both members to see each other", func() bool { return coord.NumMembers() == 2 && w.NumMembers() == 2 })
	peers, err := d.Browse(ctx)
	if err != nil || len(peers) != 1 || peers[0].Instance != "coord-1" || peers[0].HTTP != "127.0.0.1:8080" {
		t.Errorf("Browse got %+v, %v; want coord-1 with http 127.0.0.1:8080", peers, err)
	}
	stopA()
	stopS()
	// After Close nothing answers.
	peers, err = d.Browse(context.Background())
	if err != nil || len(peers) != 0 {
		t.Errorf("after Close got %+v, %v; want none", peers, err)
	}
}
