package coordinator_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/worker"
)

// TestPlacementGraceAfterRestart restarts a coordinator whose placed
// worker is not back yet: for PlacementGrace after it leads again, the
// placement stays as Raft stored it (a worker rejoining within the grace
// keeps its model loaded); only after it is the dead worker withdrawn.
func TestPlacementGraceAfterRestart(t *testing.T) {
	src := filepath.Join(t.TempDir(), "graced")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	ccfg := coordConfig(t, "c1", nil)
	ccfg.PlacementGrace = 2 * time.Second
	c, stopC := startCoordinator(t, ccfg)

	wcfg := worker.DefaultConfig()
	wcfg.Name = "w1"
	wcfg.Slots = 1
	wcfg.Gossip = cluster.FastConfig()
	wcfg.Gossip.Join = []string{c.GossipAddr()}
	wcfg.MetaInterval = 50 * time.Millisecond
	wcfg.Logger = testLogger(t)
	pc := worker.DefaultModelsConfig()
	pc.Dir = t.TempDir()
	pc.Listen = "127.0.0.1:0"
	pc.PollInterval = 100 * time.Millisecond
	pc.Load = func(context.Context, string, string) (worker.Engine, func() error, error) {
		return &worker.TestEngine{}, func() error { return nil }, nil
	}
	wcfg.Placed = &pc
	w, err := worker.New(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	stopW := runNode(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.AddManagedModel(ctx, coordinator.AddModelRequest{Source: src, Size: 1000}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "graced placed on w1", func() bool {
		return slices.Equal(c.State().Assign["graced"], []string{"w1"})
	})
	// The coordinator goes first, so nobody withdraws w1 when it leaves.
	stopC()
	stopW()

	ccfg.Gossip.Join = nil
	c, _ = startCoordinator(t, ccfg)
	eventually(t, 10*time.Second, "leadership after the restart", c.IsLeader)
	led := time.Now()
	// The log replayed (the FSM holds only the snapshot until the new
	// leader commits).
	eventually(t, 10*time.Second, "state after the restart", func() bool {
		_, ok := c.State().Models["graced"]
		return ok
	})
	for time.Since(led) < ccfg.PlacementGrace*3/4 {
		if got := c.State().Assign["graced"]; !slices.Equal(got, []string{"w1"}) {
			t.Fatalf("%v after leading again: placement %v, want [w1] kept during the grace period", time.Since(led), got)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	eventually(t, 10*time.Second, "w1 withdrawn after the grace period", func() bool {
		return len(c.State().Assign["graced"]) == 0
	})
	// led is seen within a poll of the election, before the leader loop
	// starts its grace period.
	if took := time.Since(led); took < ccfg.PlacementGrace-50*time.Millisecond {
		t.Errorf("withdrawn %v after leading, before the %v grace period", took, ccfg.PlacementGrace)
	}
}
