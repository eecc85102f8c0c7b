package worker

import (
	"testing"
	"time"

	"github.com/macpool/macpool/cluster"
)

// TestMemoryBandwidthGossiped: Config.MemoryBandwidth reaches the gossiped
// metadata: a given figure as is, 0 a measured one on a worker that takes
// stages (not a known Mac: the probe) and none on one that takes none, and
// the default -1 no probe (unknown off a Mac).
func TestMemoryBandwidthGossiped(t *testing.T) {
	hw := cluster.DetectHardware()
	// A loaded test machine cannot fault the probe's buffer in within the
	// product's budget (it then reads as unknown): give it time.
	defer func(d time.Duration) { bandwidthProbe = d }(bandwidthProbe)
	bandwidthProbe = 2 * time.Second
	for _, tc := range []struct {
		name     string
		set      int64
		pipeline string
		ok       func(int64) bool
	}{
		{"given", 123_456, "", func(v int64) bool { return v == 123_456 }},
		{"measured", 0, "127.0.0.1:1", func(v int64) bool { return v > 0 }},
		{"takes no stages: no probe", 0, "", func(v int64) bool { return v == hw.BandwidthMBs }},
		{"default: no probe", DefaultConfig().MemoryBandwidth, "127.0.0.1:1", func(v int64) bool { return v == hw.BandwidthMBs }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Name, cfg.Models, cfg.Engine = "w", []string{"m"}, &TestEngine{}
			cfg.Gossip = cluster.FastConfig()
			cfg.MemoryBandwidth, cfg.Pipeline = tc.set, tc.pipeline
			w, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if !tc.ok(w.meta.BandwidthMBs) {
				t.Errorf("MemoryBandwidth %d: gossiped %d MB/s", tc.set, w.meta.BandwidthMBs)
			}
		})
	}
}
