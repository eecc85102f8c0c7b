package cluster

import (
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
