package cluster

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// memberlist's Shutdown does not wait for a probe in flight: it ends
	// at its ack timeout, which a loaded machine can stretch past
	// goleak's retries.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

func newMember(t *testing.T, name, role string, join ...string) *Membership {
	t.Helper()
	c := FastConfig()
	c.Name = name
	c.Join = join
	c.Meta = Meta{Role: role}
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

func TestMembershipJoinUpdateLeaveFail(t *testing.T) {
	start0 := time.Unix(time.Now().Unix(), 0) // Started has a resolution of seconds
	a := newMember(t, "a", RoleCoordinator)
	b := newMember(t, "b", RoleWorker, a.Addr())
	c := newMember(t, "c", RoleWorker, a.Addr())
	waitFor(t, 5*time.Second, "3 members", func() bool { return len(a.Members()) == 3 && len(c.Members()) == 3 })

	// Metadata updates propagate.
	if err := b.UpdateMeta(Meta{Role: RoleWorker, Models: []string{"m"}, Running: 2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "b's new meta at a", func() bool {
		m, ok := a.Member("b")
		return ok && m.Meta.Running == 2 && m.Meta.Serves("m")
	})
	// Every node's meta carries its start time (uptime), kept across
	// updates that do not set it.
	if m, _ := a.Member("b"); m.Meta.Started < start0.Unix() || m.Meta.Started > time.Now().Unix() {
		t.Errorf("b's start time %d, want within [%d, now]", m.Meta.Started, start0.Unix())
	}

	// Graceful leave.
	start := time.Now()
	b.Close()
	waitFor(t, 5*time.Second, "b gone", func() bool { _, ok := a.Member("b"); return !ok })
	if !a.LeftGracefully("b") {
		t.Error("b's leave not recorded as graceful")
	}
	t.Logf("leave seen after %v", time.Since(start))

	// Failure (no leave message).
	start = time.Now()
	c.Kill()
	waitFor(t, 5*time.Second, "c gone", func() bool { _, ok := a.Member("c"); return !ok })
	if a.LeftGracefully("c") {
		t.Error("c's failure recorded as a graceful leave")
	}
	t.Logf("failure seen after %v", time.Since(start))
}

// freePort returns a port that was free for both TCP and UDP on 127.0.0.1
// a moment ago (gossip binds both).
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no port free for both TCP and UDP")
	return 0
}

// A node bound to a fixed host:port must advertise that port: memberlist
// fills in the advertised port only for an ephemeral bind, so a fixed one
// used to be gossiped as port 0 and peers could not reach it.
func TestMembershipFixedPorts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		aFix, bFix bool
	}{
		{"both fixed", true, true},
		{"fixed seed, ephemeral joiner", true, false},
		{"ephemeral seed, fixed joiner", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bind := func(fixed bool) string {
				if fixed {
					return net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
				}
				return "127.0.0.1:0"
			}
			mk := func(name, addr string, join ...string) *Membership {
				c := FastConfig()
				c.Name, c.BindAddr, c.Join, c.Meta = name, addr, join, Meta{Role: RoleWorker}
				m, err := New(c)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				return m
			}
			aAddr := bind(tc.aFix)
			a := mk("a", aAddr)
			if tc.aFix && a.Addr() != aAddr {
				t.Fatalf("a.Addr(): got %s, want %s", a.Addr(), aAddr)
			}
			b := mk("b", bind(tc.bFix), a.Addr())
			waitFor(t, 5*time.Second, "2 members on both", func() bool { return len(a.Members()) == 2 && len(b.Members()) == 2 })
			for _, x := range []*Membership{a, b} {
				for _, peer := range []*Membership{a, b} {
					m, ok := x.Member(peer.Name())
					if !ok || m.Addr != peer.Addr() {
						t.Errorf("%s sees %s at %q, want %s", x.Name(), peer.Name(), m.Addr, peer.Addr())
					}
				}
			}
			// Stays stable past several probe rounds (a wrong address flapped
			// within a second with fast timings).
			deadline := time.Now().Add(1500 * time.Millisecond)
			for time.Now().Before(deadline) {
				if len(a.Members()) != 2 || len(b.Members()) != 2 {
					t.Fatalf("membership flapped: a sees %d, b sees %d", len(a.Members()), len(b.Members()))
				}
				time.Sleep(20 * time.Millisecond) // polling interval
			}
		})
	}
}

// TestMembershipRejoins restarts nodes as kill -9 would, with no join
// address: a node finds its cluster again through the peers it remembered
// in its peers file (its own restart), and the others dial a node they
// remember until it answers again (their restart).
func TestMembershipRejoins(t *testing.T) {
	dir := t.TempDir()
	mk := func(name, addr, peersFile string, join ...string) *Membership {
		t.Helper()
		c := FastConfig()
		c.Name, c.BindAddr, c.Join, c.PeersFile, c.Meta = name, addr, join, peersFile, Meta{Role: RoleWorker}
		m, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	fixed := func() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))) }
	aFile := filepath.Join(dir, "a", "peers.json")
	a := mk("a", "127.0.0.1:0", aFile)
	bAddr := fixed()
	b := mk("b", bAddr, "", a.Addr())
	c := mk("c", "127.0.0.1:0", "", a.Addr())
	waitFor(t, 5*time.Second, "3 members", func() bool { return len(a.Members()) == 3 && len(c.Members()) == 3 })
	waitFor(t, 5*time.Second, "a's peers file", func() bool {
		peers, err := loadPeers(aFile)
		return err == nil && len(peers) == 2
	})
	if fi, err := os.Stat(aFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("peers file: %v %v, want mode 0600", fi.Mode(), err)
	}

	// Its own restart: a comes back on another port with no join address.
	a.Kill()
	waitFor(t, 5*time.Second, "a gone at b", func() bool { _, ok := b.Member("a"); return !ok })
	a = mk("a", "127.0.0.1:0", aFile)
	waitFor(t, 5*time.Second, "restarted a sees b and c", func() bool { return len(a.Members()) == 3 })

	// Their restart: b comes back at its address, knowing nobody; a and c
	// dial it.
	b.Kill()
	waitFor(t, 5*time.Second, "b gone at a", func() bool { _, ok := a.Member("b"); return !ok })
	b = mk("b", bAddr, "")
	waitFor(t, 5*time.Second, "restarted b seen by all", func() bool {
		return len(b.Members()) == 3 && len(a.Members()) == 3 && len(c.Members()) == 3
	})

	// A graceful leave is forgotten: nobody dials a drained node.
	c.Close()
	waitFor(t, 5*time.Second, "c forgotten by a", func() bool {
		peers, err := loadPeers(aFile)
		_, ok := peers["c"]
		return err == nil && !ok
	})
}
