package coordinator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/macpool/macpool/coordinator"
)

// A write through a follower is visible to a read on that follower as soon
// as the write returns: `macpool keys create` then `keys list` (or `models
// add` then `models ls`) against the same coordinator used to miss it until
// the follower learnt the commit (~2 s with LAN timings).
func TestFollowerReadsItsWrites(t *testing.T) {
	leader, _ := startCoordinator(t, coordConfig(t, "c1", nil))
	follower, _ := startCoordinator(t, coordConfig(t, "c2", []string{leader.GossipAddr()}))
	eventually(t, 15*time.Second, "c2 a raft voter", func() bool {
		return len(leader.RaftServers()) == 2 && leader.IsLeader() && !follower.IsLeader()
	})
	src := filepath.Join(t.TempDir(), "m")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 10 {
		id := fmt.Sprintf("k%d", i)
		if _, err := follower.CreateAPIKey(ctx, coordinator.KeyRequest{ID: id, Admin: true}); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(follower.Keys(), func(k coordinator.KeyInfo) bool { return k.ID == id }) {
			t.Fatalf("key %s created through the follower is missing from its list right after", id)
		}
		name := fmt.Sprintf("model-%d", i)
		if _, err := follower.AddManagedModel(ctx, coordinator.AddModelRequest{Name: name, Source: src, Size: 1000}); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(follower.ModelStatuses(), func(m coordinator.ModelStatus) bool { return m.Name == name }) {
			t.Fatalf("model %s added through the follower is missing from its list right after", name)
		}
		if err := follower.RevokeAPIKey(ctx, id); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(follower.Keys(), func(k coordinator.KeyInfo) bool { return k.ID == id }) {
			t.Fatalf("key %s revoked through the follower is still listed right after", id)
		}
	}
}
