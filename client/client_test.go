package client

import (
	"math"
	"strings"
	"testing"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
)

func TestPrintStatus(t *testing.T) {
	st := admin.Status{
		Coordinator: "c1", Leader: "c1",
		Nodes: []admin.NodeStatus{
			{Name: "w1", Role: "worker", Addr: "10.0.0.2:7946", Chip: "Apple M2", Cores: 8, MemoryMB: 16384, Models: []string{"qwen3"}, Slots: 4, Running: 1, Ready: true},
			{Name: "c1", Role: "coordinator", Addr: "10.0.0.1:7946", Chip: "Apple M1", Cores: 8, MemoryMB: 8192, Raft: "leader", HTTP: "10.0.0.1:8080"},
		},
		Queued: map[string]uint64{"qwen3": 3},
	}
	var b strings.Builder
	if err := PrintStatus(&b, st); err != nil {
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

// `macpool status` shows a Mac's GPU cores from the gossip.
func TestPrintStatusGPU(t *testing.T) {
	st := admin.Status{Coordinator: "c1", Leader: "c1", Nodes: []admin.NodeStatus{
		{Name: "w1", Role: "worker", Chip: "Apple M4 Max", Cores: 16, MemoryMB: 131072, GPUCores: 40, GPUWorkingMB: 110000},
		{Name: "w2", Role: "worker", Chip: "Intel Xeon", Cores: 2, MemoryMB: 8192},
	}}
	var b strings.Builder
	if err := PrintStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "Apple M4 Max, 16 cores, 128.0 GB, 40 GPU cores") || strings.Count(out, "GPU cores") != 1 {
		t.Errorf("status output:\n%s", out)
	}
}

func TestPrintModels(t *testing.T) {
	list := []admin.ModelStatus{
		{ModelSpec: admin.ModelSpec{Name: "Qwen/Qwen3-8B", Source: "Qwen/Qwen3-8B", Managed: true, Size: 16_400_000_000},
			Assigned: []string{"studio", "mini"},
			Workers: []admin.WorkerModelState{
				{Worker: "studio", State: cluster.ModelReady, From: "source"},
				{Worker: "mini", State: cluster.ModelFetching, From: "peers", Bytes: 4_100_000_000, Total: 16_400_000_000},
			}},
		{ModelSpec: admin.ModelSpec{Name: "huge", Source: "/m/huge", SourceNode: "studio", Managed: true}, Assigned: []string{}},
		{ModelSpec: admin.ModelSpec{Name: "static", Source: "worker:w1"}, Workers: []admin.WorkerModelState{{Worker: "w1", State: "serving"}}},
		{ModelSpec: admin.ModelSpec{Name: "big", Source: "/m/big", Managed: true, Stages: []admin.Stage{{Worker: "a", First: 0, Last: 20}, {Worker: "b", First: 20, Last: 48}}},
			Epoch: 3, Assigned: []string{"a", "b"},
			Workers: []admin.WorkerModelState{{Worker: "a", State: cluster.ModelReady, Stage: "layers [0,20)"}, {Worker: "b", State: cluster.ModelReady, Stage: "layers [20,48)"}}},
	}
	var b strings.Builder
	if err := PrintModels(&b, list); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"NAME", "16.4 GB", "studio,mini",
		"studio: ready (source)",
		"mini: fetching (peers) [#####...............]  25% 4.1 GB/16.4 GB",
		"/m/huge (on studio)", "(no worker has room)",
		"(started with -model)", "w1: serving",
		"pipeline epoch 3: a [0,20) b [20,48)", "a: ready layers [0,20)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestParsePromAndQuantile(t *testing.T) {
	text := `# HELP macpool_requests_total x
# TYPE macpool_requests_total counter
macpool_requests_total{kind="chat",model="m",status="200"} 7
macpool_requests_total{kind="chat",model="m",status="429"} 3
macpool_requests_total{kind="chat",model="a \"quoted\", name",status="200"} 1
macpool_ttft_seconds_bucket{model="m",le="0.1"} 2
macpool_ttft_seconds_bucket{model="m",le="0.2"} 6
macpool_ttft_seconds_bucket{model="m",le="+Inf"} 8
go_goroutines 12
bad line
`
	p := ParseMetrics(text)
	for _, c := range []struct {
		name string
		sel  map[string]string
		want float64
	}{
		{"macpool_requests_total", map[string]string{"model": "m"}, 10},
		{"macpool_requests_total", map[string]string{"model": "m", "status": "200"}, 7},
		{"macpool_requests_total", map[string]string{"model": `a "quoted", name`}, 1},
		{"go_goroutines", nil, 12},
		{"missing", nil, 0},
	} {
		if got := p.Sum(c.name, c.sel); got != c.want {
			t.Errorf("Sum(%s, %v) = %v, want %v", c.name, c.sel, got, c.want)
		}
	}
	b := p.Buckets("macpool_ttft_seconds", map[string]string{"model": "m"})
	// rank 4 of 8 falls halfway into (0.1, 0.2]: 0.15.
	if got := Quantile(0.5, b); math.Abs(got-0.15) > 1e-9 {
		t.Errorf("p50 = %v, want 0.15", got)
	}
	// rank 7.6 of 8 is in +Inf: the last finite bound.
	if got := Quantile(0.95, b); got != 0.2 {
		t.Errorf("p95 = %v, want 0.2", got)
	}
	if got := Quantile(0.5, map[float64]float64{}); !math.IsNaN(got) {
		t.Errorf("p50 of nothing = %v, want NaN", got)
	}
}
