package cluster

import (
	"strings"
	"testing"
	"time"
)

// The GPU facts of a Mac travel in the gossiped metadata, within its limit
// next to a long model list.
func TestMetaGPUFields(t *testing.T) {
	m := Meta{Role: RoleWorker, Chip: "Apple M4 Max", Cores: 16, MemoryMB: 131072, GPUCores: 40, GPUWorkingMB: 110000,
		Models: []string{strings.Repeat("q", 60), strings.Repeat("w", 60), strings.Repeat("e", 60)}, Slots: 8, Free: 8}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.GPUCores != 40 || got.GPUWorkingMB != 110000 || got.Chip != "Apple M4 Max" {
		t.Errorf("parsed %+v, want the GPU fields of %+v", got, m)
	}
	if !strings.Contains(string(b), `"gc":40`) || !strings.Contains(string(b), `"gw":110000`) {
		t.Errorf("wire form %s lacks the short GPU keys", b)
	}
	// Elsewhere (no GPU facts) the keys are left out.
	b, _ = Meta{Role: RoleWorker, Chip: "x"}.Encode()
	if strings.Contains(string(b), `"gc"`) || strings.Contains(string(b), `"gw"`) {
		t.Errorf("wire form %s carries empty GPU keys", b)
	}
}

// The bandwidth travels in gossip under its short key; a record without it
// (an older worker) parses as unknown (0).
func TestMetaBandwidth(t *testing.T) {
	b, err := Meta{Role: RoleWorker, Chip: "Apple M4 Max", BandwidthMBs: 546000}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"bw":546000`) {
		t.Errorf("wire form %s lacks \"bw\"", b)
	}
	got, err := ParseMeta(b)
	if err != nil || got.BandwidthMBs != 546000 {
		t.Errorf("parsed %+v, %v; want bandwidth 546000", got, err)
	}
	old, err := ParseMeta([]byte(`{"r":"worker","c":"x","n":8,"m":16384}`))
	if err != nil || old.BandwidthMBs != 0 {
		t.Errorf("old record parsed %+v, %v; want bandwidth 0 (unknown)", old, err)
	}
}

// The probe takes about its budget and measures a plausible figure
// (between 100 MB/s and 10 TB/s: it reads memory, and the reads happen),
// or 0 when the machine was too busy to fault its buffer in within the
// budget (a loaded test machine: then a generous budget must succeed).
func TestMeasureBandwidth(t *testing.T) {
	for _, budget := range []time.Duration{150 * time.Millisecond, 1500 * time.Millisecond} {
		t0 := time.Now()
		mbs := MeasureBandwidth(budget)
		took := time.Since(t0)
		t.Logf("budget %v: %d MB/s in %v", budget, mbs, took)
		if took > budget+2*time.Second { // one pass beyond the budget, on a loaded machine
			t.Errorf("probe took %v for a %v budget", took, budget)
		}
		if mbs == 0 && budget < time.Second {
			continue // too busy for the short budget
		}
		if mbs < 100 || mbs > 10_000_000 {
			t.Errorf("budget %v: measured %d MB/s, want 100 MB/s .. 10 TB/s", budget, mbs)
		}
		return
	}
}
