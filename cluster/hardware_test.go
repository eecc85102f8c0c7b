package cluster

import (
	"strings"
	"testing"
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
