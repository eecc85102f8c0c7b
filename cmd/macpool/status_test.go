package main

import (
	"strings"
	"testing"

	"github.com/macpool/macpool/coordinator"
)

func TestPrintStatus(t *testing.T) {
	st := coordinator.Status{
		Coordinator: "c1", Leader: "c1",
		Nodes: []coordinator.NodeStatus{
			{Name: "w1", Role: "worker", Addr: "10.0.0.2:7946", Chip: "Apple M2", Cores: 8, MemoryMB: 16384, Models: []string{"qwen3"}, Slots: 4, Running: 1, Ready: true},
			{Name: "c1", Role: "coordinator", Addr: "10.0.0.1:7946", Chip: "Apple M1", Cores: 8, MemoryMB: 8192, Raft: "leader", HTTP: "10.0.0.1:8080"},
		},
		Queued: map[string]uint64{"qwen3": 3},
	}
	var b strings.Builder
	if err := printStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"coordinator c1, raft leader c1",
		"c1    coordinator (leader)",
		"Apple M2, 8 cores, 16.0 GB",
		"1/4 busy",
		"queued qwen3: 3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "c1 ") > strings.Index(out, "w1 ") {
		t.Errorf("coordinators should be listed before workers:\n%s", out)
	}
}
