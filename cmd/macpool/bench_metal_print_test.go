package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/macpool/macpool/coordinator"
)

func TestPrintBackendFigures(t *testing.T) {
	for _, c := range []struct {
		f    *benchBackend
		want string
	}{
		{nil, ""},
		{&benchBackend{Backend: "metal", Chip: "Apple M2 Pro", GPUCores: 19, WorkingSetBytes: 22e9, PeakGBs: 200, BandwidthShare: 0.61},
			"backend  metal on Apple M2 Pro, 19 GPU cores, working set 22.0 GB\nshare        61.0 %     of the chip's 200 GB/s memory bandwidth (bandwidth_share 0.610)\n"},
		{&benchBackend{Backend: "metal", Chip: "Apple M9"}, "backend  metal on Apple M9\nshare    unknown      (chip \"Apple M9\" not in the bandwidth table)\n"},
	} {
		var b bytes.Buffer
		printBackendFigures(&b, c.f)
		if b.String() != c.want {
			t.Errorf("got %q, want %q", b.String(), c.want)
		}
	}
}

// `macpool status` shows a Mac's GPU cores from the gossip.
func TestPrintStatusGPU(t *testing.T) {
	st := coordinator.Status{Coordinator: "c1", Leader: "c1", Nodes: []coordinator.NodeStatus{
		{Name: "w1", Role: "worker", Chip: "Apple M4 Max", Cores: 16, MemoryMB: 131072, GPUCores: 40, GPUWorkingMB: 110000},
		{Name: "w2", Role: "worker", Chip: "Intel Xeon", Cores: 2, MemoryMB: 8192},
	}}
	var b strings.Builder
	if err := printStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "Apple M4 Max, 16 cores, 128.0 GB, 40 GPU cores") || strings.Count(out, "GPU cores") != 1 {
		t.Errorf("status output:\n%s", out)
	}
}
