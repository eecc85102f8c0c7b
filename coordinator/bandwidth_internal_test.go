package coordinator

import (
	"testing"

	"github.com/macpool/macpool/cluster"
)

// TestBandwidthOf: a gossiped figure in bytes/s; absent, negative or
// absurd ones are unknown.
func TestBandwidthOf(t *testing.T) {
	ms := []cluster.Member{
		{Name: "mac", Meta: cluster.Meta{BandwidthMBs: 546_000}},
		{Name: "old"},
		{Name: "neg", Meta: cluster.Meta{BandwidthMBs: -5}},
		{Name: "huge", Meta: cluster.Meta{BandwidthMBs: 1<<50 + 3}},
	}
	for name, want := range map[string]int64{"mac": 546e9, "old": 0, "neg": 0, "huge": 0, "gone": 0} {
		if got := bandwidthOf(ms, name); got != want {
			t.Errorf("%s: %d bytes/s, want %d", name, got, want)
		}
	}
}
