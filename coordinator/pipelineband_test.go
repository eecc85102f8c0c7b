package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/pipeline"
)

// TestPipelineBandwidthGossiped: the memory bandwidth workers gossip
// (Meta.BandwidthMBs) reaches the leader's pipeline plan (and the status). Two stage
// workers with the same room, one 5× faster: the fast one gets the larger
// share of the layers (with the bandwidth left out, the memory rule splits
// them evenly, which the test also checks, so it fails if the gossiped
// figure is lost on the way).
func TestPipelineBandwidthGossiped(t *testing.T) {
	c, _ := startCoordinator(t, coordConfig(t, "coord-1", nil))
	const mib = int64(1) << 20
	layout := &admin.ModelLayout{Embed: 8 * mib, Head: 8 * mib}
	for range 12 {
		layout.Layers = append(layout.Layers, 16*mib)
		layout.KVPerToken = append(layout.KVPerToken, 1024)
		layout.StatePerSeq = append(layout.StatePerSeq, 0)
	}
	// Room for about 2/3 of the model each (the KV budget per stage
	// included): two stages.
	pc := coordinator.DefaultPlacementConfig()
	limit := pc.KVBudget + 150*mib
	workers := []struct {
		name string
		mbs  int64
	}{{"w-fast", 500_000}, {"w-slow", 100_000}}
	for _, w := range workers {
		gc := cluster.FastConfig()
		gc.Name = w.name
		gc.Join = []string{c.GossipAddr()}
		gc.Meta = cluster.Meta{Role: cluster.RoleWorker, Store: "127.0.0.1:1", Pipeline: "127.0.0.1:2",
			MemLimit: limit, BandwidthMBs: w.mbs, Slots: 1, Free: 1, Ready: true}
		gc.Logger = testLogger(t)
		ml, err := cluster.New(gc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ml.Close() })
	}
	var size int64 = layout.Embed + layout.Head
	for _, l := range layout.Layers {
		size += l
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.RegisterModel(ctx, coordinator.ModelSpec{Name: "big", Source: "/m", Managed: true, Size: size, Layout: layout}); err != nil {
		t.Fatal(err)
	}
	var got string
	eventually(t, 20*time.Second, "a pipeline plan", func() bool {
		p, ok := c.State().Pipelines["big"]
		got = stagesOf(p)
		return ok && len(p.Stages) > 0
	})
	// What placement gives with and without the gossiped figures.
	cands := []pipeline.Worker{{Name: "w-fast", Free: limit, Bandwidth: 500_000 * 1e6}, {Name: "w-slow", Free: limit, Bandwidth: 100_000 * 1e6}}
	want := mustPlace(t, pc, layout, cands)
	cands[0].Bandwidth, cands[1].Bandwidth = 0, 0
	memOnly := mustPlace(t, pc, layout, cands)
	if want == memOnly {
		t.Fatalf("test setup: the bandwidth and memory rules agree (%s)", want)
	}
	if got != want {
		t.Errorf("plan %s, want %s (the memory rule alone: %s)", got, want, memOnly)
	}
	t.Logf("plan %s (the memory rule alone: %s)", got, memOnly)
	// The status shows the figures.
	for _, n := range c.Status(ctx).Nodes {
		for _, w := range workers {
			if n.Name == w.name && n.BandwidthMBs != w.mbs {
				t.Errorf("status: %s memory_bandwidth_mb_s %d, want %d", n.Name, n.BandwidthMBs, w.mbs)
			}
		}
	}
}

func mustPlace(t *testing.T, pc coordinator.PlacementConfig, l *admin.ModelLayout, ws []pipeline.Worker) string {
	t.Helper()
	as, err := pc.PipelinePlace(l, ws)
	if err != nil {
		t.Fatal(err)
	}
	var p pipeline.Plan
	for _, a := range as {
		p.Stages = append(p.Stages, pipeline.StageAddr{Worker: a.Worker, First: a.Stage.First, Last: a.Stage.Last})
	}
	return stagesOf(p)
}

func stagesOf(p pipeline.Plan) string {
	s := ""
	for _, st := range p.Stages {
		s += fmt.Sprintf("%s[%d,%d) ", st.Worker, st.First, st.Last)
	}
	return s
}
