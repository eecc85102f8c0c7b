package coordinator_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/worker"
)

func testSecret(t testing.TB) *cluster.Secret {
	t.Helper()
	s, err := cluster.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func secretWorkerConfig(t testing.TB, name, join string, s *cluster.Secret) worker.Config {
	cfg := worker.DefaultConfig()
	cfg.Name = name
	cfg.Models = []string{testModel}
	cfg.Engine = &worker.TestEngine{}
	cfg.Gossip = cluster.FastConfig()
	if join != "" {
		cfg.Gossip.Join = []string{join}
	}
	cfg.MetaInterval = 50 * time.Millisecond
	cfg.PingInterval = 100 * time.Millisecond
	cfg.Secret = s
	cfg.Logger = testLogger(t)
	return cfg
}

// connectSecure opens a NATS connection as a node holding s.
func connectSecure(t testing.TB, url string, s *cluster.Secret) (*nats.Conn, error) {
	t.Helper()
	opts, err := cluster.NATSOptions(s, "test-client", url)
	if err != nil {
		t.Fatal(err)
	}
	return nats.Connect(url, append(opts, nats.Timeout(5*time.Second))...)
}

// A coordinator and a worker with the same secret serve requests over
// encrypted gossip, mutual-TLS NATS and TLS Raft.
func TestSecretClusterServes(t *testing.T) {
	s := testSecret(t)
	cfg := coordConfig(t, "coord-1", nil)
	cfg.Secret = s
	c, _ := startCoordinator(t, cfg)
	if !strings.HasPrefix(c.NATSURL(), "tls://") {
		t.Fatalf("NATS URL %q, want tls:// with a secret", c.NATSURL())
	}
	w, err := worker.New(secretWorkerConfig(t, "worker-1", c.GossipAddr(), s))
	if err != nil {
		t.Fatalf("worker with the secret: %v", err)
	}
	runNode(t, w)
	waitWorkers(t, c, 1)
	eventually(t, 10*time.Second, "raft leader", c.IsLeader)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := submit(ctx, c, chatJob("req-1", "", "one two three", 10))
	if err != nil || r.err != nil || r.text != "one two three" || r.worker != "worker-1" {
		t.Fatalf("got %+v, %v; want the echo from worker-1", r, err)
	}
}

// A node with another secret (or none) cannot join the gossip, cannot
// connect to NATS (so it cannot take jobs), and cannot talk Raft; requests
// keep going to the good worker only.
func TestWrongSecretCannotJoinOrTakeJobs(t *testing.T) {
	s, wrong := testSecret(t), testSecret(t)
	cfg := coordConfig(t, "coord-1", nil)
	cfg.Secret = s
	c, _ := startCoordinator(t, cfg)
	good, err := worker.New(secretWorkerConfig(t, "good", c.GossipAddr(), s))
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, good)
	waitWorkers(t, c, 1)

	// Gossip: joining fails with another secret or none.
	for _, tc := range []struct {
		name string
		s    *cluster.Secret
	}{{"wrong", wrong}, {"none", nil}} {
		if w, err := worker.New(secretWorkerConfig(t, "stranger-"+tc.name, c.GossipAddr(), tc.s)); err == nil {
			w.Close()
			t.Errorf("worker with %s secret joined, want a join error", tc.name)
		}
	}

	// NATS: a stranger that knows the URL (from a sniffed or guessed
	// address) runs its own gossip and dials NATS directly: Run fails.
	scfg := secretWorkerConfig(t, "stranger-direct", "", wrong)
	scfg.NATSURL = c.NATSURL()
	stranger, err := worker.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { runErr <- stranger.Run(ctx) }()
	select {
	case err := <-runErr:
		if err == nil || !strings.Contains(err.Error(), "connect nats") {
			t.Fatalf("stranger worker Run: got %v, want a NATS connect error", err)
		}
		t.Logf("stranger worker: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("stranger worker still running after 15s, want a NATS connect error")
	}

	plain := "nats://" + strings.TrimPrefix(c.NATSURL(), "tls://")
	tlsGood, err := cluster.NATSOptions(s, "x", c.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		dial func() (*nats.Conn, error)
	}{
		{"plain, no credentials", func() (*nats.Conn, error) { return nats.Connect(plain, nats.Timeout(time.Second)) }},
		{"plain, right credentials", func() (*nats.Conn, error) {
			return nats.Connect(plain, nats.UserInfo(cluster.NATSUser, s.NATSPassword()), nats.Timeout(time.Second))
		}},
		{"system TLS roots", func() (*nats.Conn, error) { return nats.Connect(c.NATSURL(), nats.Timeout(time.Second)) }},
		{"other secret", func() (*nats.Conn, error) { return connectSecure(t, c.NATSURL(), wrong) }},
		{"cluster TLS, wrong password", func() (*nats.Conn, error) {
			return nats.Connect(c.NATSURL(), tlsGood[0], tlsGood[1], nats.UserInfo(cluster.NATSUser, "guess"), nats.Timeout(time.Second))
		}},
	} {
		if nc, err := tc.dial(); err == nil {
			nc.Close()
			t.Errorf("%s: connected, want a refusal", tc.name)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	nc, err := connectSecure(t, c.NATSURL(), s)
	if err != nil {
		t.Fatalf("same secret: %v, want a connection", err)
	}
	nc.Close()

	// Raft: a plain transport cannot send RPCs to the TLS one.
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var resp raft.RequestVoteResponse
	err = trans.RequestVote("stranger", raft.ServerAddress(c.RaftAddr()), &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("stranger"), Addr: []byte(trans.LocalAddr())}, Term: 1 << 40,
	}, &resp)
	trans.CloseStreams()
	trans.Close()
	if err == nil {
		t.Errorf("plain raft RequestVote with a huge term: answered %+v, want an error", resp)
	}
	eventually(t, 5*time.Second, "leader kept", c.IsLeader)

	// Gossip shows no stranger; requests go to the good worker only.
	for _, m := range c.Membership().Members() {
		if m.Name != "coord-1" && m.Name != "good" {
			t.Errorf("member %s in gossip, want only coord-1 and good", m.Name)
		}
	}
	for i := 0; i < 5; i++ {
		r, err := submit(ctx, c, chatJob(fmt.Sprint("req-", i), "", "hello there", 10))
		if err != nil || r.err != nil || r.worker != "good" {
			t.Fatalf("request %d: got %+v, %v; want served by good", i, r, err)
		}
	}
}

// Two coordinators with a secret: clustered embedded NATS routes over
// mutual TLS with the derived route credentials (the queue is replicated on
// both), or, standalone, the second one connects to the first one's server
// over TLS. Either way a request through the second one is served, and
// their Raft runs over TLS: the second becomes a voter and its write
// (forwarded to the leader) reaches both.
func TestSecretTwoCoordinators(t *testing.T) {
	for _, clustered := range []bool{true, false} {
		name := map[bool]string{true: "clustered", false: "standalone"}[clustered]
		t.Run(name, func(t *testing.T) { testSecretTwoCoordinators(t, clustered) })
	}
}

func testSecretTwoCoordinators(t *testing.T, clustered bool) {
	s := testSecret(t)
	var coords []*coordinator.Coordinator
	var join []string
	for i := 0; i < 2; i++ {
		cfg := coordConfig(t, fmt.Sprintf("coord-%d", i), join)
		if clustered {
			cfg.NATSCluster = "127.0.0.1:0"
		}
		cfg.Secret = s
		c, _ := startCoordinator(t, cfg)
		coords = append(coords, c)
		join = []string{coords[0].GossipAddr()}
	}
	if !strings.HasPrefix(coords[1].NATSURL(), "tls://") {
		t.Fatalf("second coordinator's NATS %q, want tls://", coords[1].NATSURL())
	}
	w, err := worker.New(secretWorkerConfig(t, "worker-1", coords[0].GossipAddr(), s))
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, w)
	for _, c := range coords {
		waitWorkers(t, c, 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := submit(ctx, coords[1], chatJob("req-1", "", "through the second", 10))
	if err != nil || r.err != nil || r.text != "through the second" {
		t.Fatalf("got %+v, %v; want the echo", r, err)
	}
	if clustered {
		nc, err := connectSecure(t, coords[1].NATSURL(), s)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 15*time.Second, "queue replicated on both coordinators", func() bool {
			st, err := js.Stream(ctx, cluster.StreamName(testModel))
			if err != nil {
				return false
			}
			info, err := st.Info(ctx)
			if err != nil || info.Cluster == nil || len(info.Cluster.Replicas) != 1 {
				return false
			}
			return info.Cluster.Replicas[0].Current
		})
	}
	eventually(t, 15*time.Second, "2 raft voters", func() bool { return len(coords[0].RaftServers()) == 2 })
	if _, err := coords[1].CreateAPIKey(ctx, coordinator.KeyRequest{ID: "k1", Name: "k1", Secret: "sk-1"}); err != nil {
		t.Fatalf("raft write through the follower: %v", err)
	}
	for _, c := range coords {
		eventually(t, 10*time.Second, "key replicated to "+c.Name(), func() bool { return len(c.State().APIKeys) == 1 })
	}
}

// Config.Validate refuses a gossip secret that is not the cluster secret.
func TestSecretConfigValidate(t *testing.T) {
	cfg := coordConfig(t, "c", nil)
	cfg.Gossip.Secret = testSecret(t)
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "gossip secret") {
		t.Fatalf("coordinator: got %v, want a gossip secret error", err)
	}
	cfg.Secret = cfg.Gossip.Secret
	if err := cfg.Validate(); err != nil {
		t.Fatalf("coordinator, same secret: %v", err)
	}
	wcfg := secretWorkerConfig(t, "w", "x:1", nil)
	wcfg.Gossip.Secret = testSecret(t)
	if err := wcfg.Validate(); err == nil || !strings.Contains(err.Error(), "gossip secret") {
		t.Fatalf("worker: got %v, want a gossip secret error", err)
	}
}

// TestSecretOverhead compares the cluster path (Submit -> JetStream ->
// worker -> frames) of an open cluster with one that has a secret (TLS on
// every NATS connection, encrypted gossip): sequential latency and the
// rate with 32 clients. MACPOOL_BENCH_N sets the sequential requests
// (default 100). The numbers are logged (docs/security.md).
func TestSecretOverhead(t *testing.T) {
	n := 100
	if v := os.Getenv("MACPOOL_BENCH_N"); v != "" {
		fmt.Sscan(v, &n)
	}
	for _, withSecret := range []bool{false, true} {
		name := "open"
		cfg := coordConfig(t, "coord-"+name, nil)
		if withSecret {
			name = "secret"
			cfg = coordConfig(t, "coord-"+name, nil)
			cfg.Secret = testSecret(t)
		}
		c, stopC := startCoordinator(t, cfg)
		wcfg := secretWorkerConfig(t, "worker-"+name, c.GossipAddr(), cfg.Secret)
		wcfg.Slots = 64
		w, err := worker.New(wcfg)
		if err != nil {
			t.Fatal(err)
		}
		stopW := runNode(t, w)
		waitWorkers(t, c, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		job := chatJob("bench", "", "one two three four", 4)
		lat := make([]time.Duration, n)
		for i := -20; i < n; i++ { // 20 warm-up requests
			start := time.Now()
			r, err := submit(ctx, c, job)
			if err != nil || r.err != nil {
				t.Fatalf("%s request %d: %v %v", name, i, err, r.err)
			}
			if i >= 0 {
				lat[i] = time.Since(start)
			}
		}
		const clients, per = 32, 20
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		start := time.Now()
		for k := 0; k < clients; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per; i++ {
					if r, err := submit(ctx, c, job); err != nil || r.err != nil {
						errs <- fmt.Errorf("%v %v", err, r.err)
						return
					}
				}
			}()
		}
		wg.Wait()
		rate := float64(clients*per) / time.Since(start).Seconds()
		close(errs)
		for err := range errs {
			t.Fatalf("%s concurrent request: %v", name, err)
		}
		cancel()
		t.Logf("%s: sequential p50 %v p99 %v (n=%d); %d clients: %.0f requests/s",
			name, percentile(lat, 0.5), percentile(lat, 0.99), n, clients, rate)
		stopW()
		stopC()
	}
}
