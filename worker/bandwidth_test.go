package worker

import (
	"testing"

	"github.com/macpool/macpool/cluster"
)

// TestMemoryBandwidthGossiped: Config.MemoryBandwidth reaches the gossiped
// metadata: a given figure as is, 0 a measured one (not a known Mac: the
// probe), and the default -1 no probe (unknown off a Mac).
func TestMemoryBandwidthGossiped(t *testing.T) {
	hw := cluster.DetectHardware()
	for _, tc := range []struct {
		name string
		set  int64
		ok   func(int64) bool
	}{
		{"given", 123_456, func(v int64) bool { return v == 123_456 }},
		{"measured", 0, func(v int64) bool { return v > 0 }},
		{"default: no probe", DefaultConfig().MemoryBandwidth, func(v int64) bool { return v == hw.BandwidthMBs }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Name, cfg.Models, cfg.Engine = "w", []string{"m"}, &TestEngine{}
			cfg.Gossip = cluster.FastConfig()
			cfg.MemoryBandwidth = tc.set
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
