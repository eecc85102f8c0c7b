package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/modelstore"
)

// TestWantChunks: a stage wants every chunk of a file outside the ranges
// (config, tokenizer) and, of a weight file, exactly the chunks that
// overlap its common ranges, its layers, the embedding (first stage) and
// the head (last stage).
func TestWantChunks(t *testing.T) {
	const c = 100 // chunk bytes
	r := &admin.LayoutRanges{
		Common: []admin.FileRange{{Path: "w", Off: 0, Len: 10}},   // chunk 0
		Embed:  []admin.FileRange{{Path: "w", Off: 10, Len: 150}}, // chunks 0, 1
		Layers: [][]admin.FileRange{
			{{Path: "w", Off: 160, Len: 100}}, // chunks 1, 2
			{{Path: "w", Off: 260, Len: 140}}, // chunks 2, 3
			{{Path: "w", Off: 400, Len: 50}},  // chunk 4
			{{Path: "w", Off: 450, Len: 100}}, // chunks 4, 5
		},
		Head: []admin.FileRange{{Path: "w", Off: 550, Len: 100}, {Path: "w", Off: 10, Len: 150}}, // chunks 5, 6 + the tied embedding
	}
	w := modelstore.File{Path: "w", Size: 650}
	for _, tc := range []struct {
		first, last int
		want        string
	}{
		{0, 1, "1110000"},
		{1, 2, "1011000"},
		{2, 3, "1000100"},
		{1, 3, "1011100"},
		{3, 4, "1100111"},
		{0, 4, "1111111"},
	} {
		want := wantChunks(r, tc.first, tc.last)
		got := ""
		for off := int64(0); off < w.Size; off += c {
			if want(w, off, min(c, w.Size-off)) {
				got += "1"
			} else {
				got += "0"
			}
		}
		if got != tc.want {
			t.Errorf("stage [%d,%d): chunks %s, want %s", tc.first, tc.last, got, tc.want)
		}
		if !want(modelstore.File{Path: "config.json", Size: 5}, 0, 5) {
			t.Errorf("stage [%d,%d) does not want config.json", tc.first, tc.last)
		}
	}
}

// TestMemoryLimitGossiped: a worker's --memory-limit is gossiped and caps
// the memory it reports.
func TestMemoryLimitGossiped(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name, cfg.Models, cfg.Engine = "w", []string{"m"}, &TestEngine{}
	cfg.Gossip = cluster.FastConfig()
	cfg.MemoryLimit = 3 << 20
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.meta.MemLimit != 3<<20 || w.meta.MemoryMB != 3 {
		t.Errorf("meta: limit %d, memory %d MB; want %d and 3 MB", w.meta.MemLimit, w.meta.MemoryMB, 3<<20)
	}
	cfg.MemoryLimit = -1
	if _, err := New(cfg); err == nil {
		t.Error("a negative memory limit was accepted")
	}
}

// TestEngineLostOnlyItsInstall: a job of an old plan's engine that fails
// with ErrEngineLost after the model's newer plan was installed unloads
// only the old install; the newer one keeps serving (seen in e2e: a drained
// middle stage broke the old epoch's pipeline after the new one was up).
func TestEngineLostOnlyItsInstall(t *testing.T) {
	w := &Worker{changed: make(chan struct{}, 1), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w.placed.models, w.placed.lost = map[string]*placedModel{}, map[string]string{}
	install := func(key string) *placedModel {
		_, cancel := context.WithCancel(context.Background())
		pm := &placedModel{name: "m", key: key, cancel: cancel, done: make(chan struct{}), eng: &TestEngine{}, closeEng: func() error { return nil }}
		close(pm.done)
		return pm
	}
	old, cur := install("plan 4"), install("plan 5")
	w.placed.models["m"] = cur
	w.engineLost(old)
	if w.placed.models["m"] != cur || w.placed.lost["m"] != "" {
		t.Fatalf("an old install's lost engine unloaded the new one: models %v lost %v", w.placed.models, w.placed.lost)
	}
	w.engineLost(cur)
	w.placed.mu.Lock()
	defer w.placed.mu.Unlock()
	if _, ok := w.placed.models["m"]; ok || w.placed.lost["m"] != "plan 5" {
		t.Fatalf("the current install's lost engine: models %v lost %v, want it gone until another plan", w.placed.models, w.placed.lost)
	}
}

// TestStageLostReported: when a loaded stage's pipeline is lost for good
// (Stage.Lost), the worker reports the stage failed for its plan
// (StageFailed, the stage's error), so that the leader re-places the
// model, and unloads it until its plan changes; an install whose ctx ended
// first (unloaded) reports nothing.
func TestStageLostReported(t *testing.T) {
	w := &Worker{changed: make(chan struct{}, 1), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w.placed.models, w.placed.lost = map[string]*placedModel{}, map[string]string{}
	closed := make(chan struct{})
	_, cancel := context.WithCancel(context.Background())
	pm := &placedModel{name: "m", key: "plan 7", cancel: cancel, done: make(chan struct{}), eng: &TestEngine{},
		closeEng: func() error { close(closed); return nil },
		progress: cluster.ModelProgress{Worker: "w", Model: "m", State: cluster.ModelReady, Epoch: 7}}
	close(pm.done)
	w.placed.models["m"] = pm
	lost := make(chan struct{})
	close(lost)
	w.watchStage(context.Background(), pm, Stage{Lost: lost, Err: func() error { return errors.New("ring gave up") }})
	w.placed.mu.Lock()
	p, inModels, key := pm.progress, w.placed.models["m"] != nil, w.placed.lost["m"]
	w.placed.mu.Unlock()
	if p.State != cluster.ModelFailed || !p.StageFailed || p.Epoch != 7 || !strings.Contains(p.Error, "ring gave up") {
		t.Errorf("progress %+v, want failed with StageFailed for epoch 7 and the stage's error", p)
	}
	if inModels || key != "plan 7" {
		t.Errorf("model still installed (%v) or not marked lost (%q)", inModels, key)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the lost stage was not unloaded")
	}

	// Unloaded first: nothing reported.
	pm2 := &placedModel{name: "m", key: "plan 8", progress: cluster.ModelProgress{State: cluster.ModelReady}}
	ctx, cancel2 := context.WithCancel(context.Background())
	cancel2()
	w.watchStage(ctx, pm2, Stage{Lost: make(chan struct{})})
	if pm2.progress.State != cluster.ModelReady {
		t.Errorf("an unloaded install reported %+v", pm2.progress)
	}
}
