package coordinator

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/pipeline"
)

// layout6 is a model of six 100-byte layers, 10-byte embedding and head.
func layout6() *admin.ModelLayout {
	return &admin.ModelLayout{Layers: []int64{100, 100, 100, 100, 100, 100}, Embed: 10, Head: 10,
		KVPerToken: make([]int64, 6), StatePerSeq: make([]int64, 6)}
}

func plan3(model string) *pipeline.Plan {
	return &pipeline.Plan{Model: model, Stages: []pipeline.StageAddr{
		{Worker: "a", Addr: "a:1", First: 0, Last: 2}, {Worker: "b", Addr: "b:1", First: 2, Last: 4}, {Worker: "c", Addr: "c:1", First: 4, Last: 6}}}
}

func TestPipelineFSM(t *testing.T) {
	f := newFSM()
	apply := func(typ cmdType, body any) error {
		t.Helper()
		if r := f.Apply(&raft.Log{Type: raft.LogCommand, Data: mustCmd(t, typ, body)}); r != nil {
			return r.(error)
		}
		return nil
	}
	if err := apply(cmdRegisterModel, ModelSpec{Name: "big", Source: "/m", Managed: true, Stages: []admin.Stage{{Worker: "x"}}}); err != nil {
		t.Fatal(err)
	}
	if len(f.snapshot().Models["big"].Stages) != 0 {
		t.Error("a registry entry stored stages")
	}
	if err := apply(cmdSetPipeline, pipelineCmd{Model: "big", Plan: plan3("big")}); err == nil || !strings.Contains(err.Error(), "no layout") {
		t.Errorf("plan without a layout: got %v, want a no-layout error", err)
	}
	if err := apply(cmdRegisterModel, ModelSpec{Name: "big", Source: "/m", Managed: true, Layout: layout6()}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		name string
		cmd  pipelineCmd
		want string
	}{
		{"unregistered", pipelineCmd{Model: "nope", Plan: plan3("nope")}, "not registered"},
		{"other model", pipelineCmd{Model: "big", Plan: plan3("other")}, "given for"},
		{"gap", pipelineCmd{Model: "big", Plan: &pipeline.Plan{Model: "big", Stages: []pipeline.StageAddr{{Worker: "a", First: 0, Last: 2}, {Worker: "b", First: 3, Last: 6}}}}, "want [2"},
		{"short", pipelineCmd{Model: "big", Plan: &pipeline.Plan{Model: "big", Stages: []pipeline.StageAddr{{Worker: "a", First: 0, Last: 5}}}}, "the model has 6"},
	} {
		if err := apply(cmdSetPipeline, bad.cmd); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: got %v, want an error containing %q", bad.name, err, bad.want)
		}
	}
	// Epochs grow with every change, whatever the proposer wrote.
	p := plan3("big")
	p.Epoch = 41
	for want := uint64(1); want <= 3; want++ {
		if err := apply(cmdSetPipeline, pipelineCmd{Model: "big", Plan: p, Seed: "a"}); err != nil {
			t.Fatal(err)
		}
		if got := f.snapshot().Pipelines["big"].Epoch; got != want {
			t.Fatalf("epoch %d, want %d", got, want)
		}
	}
	// Removing the plan keeps the epoch count: a later plan is newer still.
	if err := apply(cmdSetPipeline, pipelineCmd{Model: "big"}); err != nil {
		t.Fatal(err)
	}
	if st := f.snapshot(); len(st.Pipelines) != 0 || st.Seeds["big"] != "" {
		t.Fatalf("after removal: %+v %+v", st.Pipelines, st.Seeds)
	}
	if err := apply(cmdSetPipeline, pipelineCmd{Model: "big", Plan: p, Seed: "a"}); err != nil {
		t.Fatal(err)
	}
	st := f.snapshot()
	if got := st.Pipelines["big"]; got.Epoch != 4 || len(got.Stages) != 3 || got.Stages[1].Addr != "b:1" {
		t.Fatalf("plan after re-placement: %+v", got)
	}
	// Snapshot and restore carry plans, seeds and epochs.
	var sk sink
	snap, _ := f.Snapshot()
	if err := snap.Persist(&sk); err != nil {
		t.Fatal(err)
	}
	g := newFSM()
	if err := g.Restore(io.NopCloser(&sk.Buffer)); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(st)
	b, _ := json.Marshal(g.snapshot())
	if !bytes.Equal(a, b) {
		t.Fatalf("restored state differs:\n%s\n%s", a, b)
	}
	if err := g.apply(mustCmd(t, cmdSetPipeline, pipelineCmd{Model: "big", Plan: p})); err != nil || g.snapshot().Pipelines["big"].Epoch != 5 {
		t.Fatalf("epoch after restore: %v %+v", err, g.snapshot().Pipelines["big"])
	}
	if err := g.apply(mustCmd(t, cmdRemoveModel, nameCmd{Name: "big"})); err != nil {
		t.Fatal(err)
	}
	if st := g.snapshot(); len(st.Pipelines)+len(st.Seeds)+len(st.Epochs) != 0 {
		t.Errorf("removed model left pipeline state: %+v", st)
	}
}

func TestPlacePipelines(t *testing.T) {
	pc := PlacementConfig{UsableFraction: 1, KVBudget: 50, Overhead: 0}
	// Whole: 600 + 20 + 50 = 670. Stage of two layers: 200 + 10 + 50 = 260.
	big := ModelSpec{Name: "big", Source: "/m", Managed: true, Size: 620, Layout: layout6()}
	noLayout := big
	noLayout.Layout = nil
	ws := func(names ...string) []pipeWorker {
		var out []pipeWorker
		for _, n := range names {
			out = append(out, pipeWorker{name: n, addr: n + ":1", store: n + ":2"})
		}
		return out
	}
	room := func(kv ...any) map[string]int64 {
		m := map[string]int64{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = int64(kv[i+1].(int))
		}
		return m
	}
	withPlan := func(spec ModelSpec, p *pipeline.Plan, seed string) State {
		st := newState()
		st.Models[spec.Name] = spec
		if p != nil {
			q := *p
			q.Epoch = 3
			st.Pipelines[spec.Name] = q
		}
		if seed != "" {
			st.Seeds[spec.Name] = seed
		}
		return st
	}
	three := room("a", 300, "b", 300, "c", 300, "d", 300)
	run := func(t *testing.T, st State, placedOn []string, free map[string]int64, workers []pipeWorker, young bool, failed map[string]map[string]bool) string {
		t.Helper()
		placed := map[string][]string{"big": placedOn}
		cmds := placePipelines(pc, st, placed, free, workers, young, failed)
		var got []string
		for _, c := range cmds {
			s := c.Model
			if c.Plan != nil {
				s += " " + stagesText(c.Plan)
				for _, st := range c.Plan.Stages {
					if st.Addr != st.Worker+":1" && !(st.Worker == "b" && st.Addr == "b:9") {
						t.Errorf("stage %s has address %q", st.Worker, st.Addr)
					}
				}
			} else {
				s += " none"
			}
			got = append(got, s+" seed="+c.Seed)
		}
		return strings.Join(got, "; ")
	}
	for _, tc := range []struct {
		name    string
		st      State
		placed  []string
		free    map[string]int64
		workers []pipeWorker
		young   bool
		want    string // the commands as text, "" none
	}{
		{"layout unknown: seed", withPlan(noLayout, nil, ""), nil, three, ws("c", "b", "d"), false, "big none seed=b"},
		{"layout unknown: source node seeds", withPlan(func() ModelSpec { s := noLayout; s.SourceNode = "d"; return s }(), nil, ""), nil, three, ws("c", "b", "d"), false, "big none seed=d"},
		{"seed kept", withPlan(noLayout, nil, "b"), nil, three, ws("b", "c"), false, ""},
		{"three-way split", withPlan(big, nil, "a"), nil, three, ws("a", "b", "c", "d"), false, "big a[0,2) b[2,4) c[4,6) seed=a"},
		{"two fit", withPlan(big, nil, "a"), nil, room("a", 400, "b", 400), ws("a", "b"), false, "big a[0,3) b[3,6) seed=a"},
		{"plan holds", withPlan(big, plan3("big"), "a"), nil, three, ws("a", "b", "c", "d"), false, ""},
		{"middle stage died: spare takes over", withPlan(big, plan3("big"), "a"), nil, three, ws("a", "c", "d"), false, "big a[0,2) c[2,4) d[4,6) seed=a"},
		{"middle stage died, young leader: kept", withPlan(big, plan3("big"), "a"), nil, three, ws("a", "c", "d"), true, ""},
		{"address changed: re-placed", withPlan(big, plan3("big"), "a"), nil, three, []pipeWorker{{name: "a", addr: "a:1"}, {name: "b", addr: "b:9"}, {name: "c", addr: "c:1"}}, false, "big a[0,2) b[2,4) c[4,6) seed=a"},
		{"too little room: plan dropped", withPlan(big, plan3("big"), "a"), nil, room("a", 100, "b", 100, "c", 100), ws("a", "b", "c"), false, "big none seed=a"},
		{"fits whole now: pipeline removed", withPlan(big, plan3("big"), "a"), []string{"a"}, three, ws("a", "b", "c"), false, "big none seed="},
		{"no pipeline listener: not a stage", withPlan(big, nil, "a"), nil, three, []pipeWorker{{name: "a", addr: "a:1"}, {name: "b", addr: "b:1"}, {name: "c"}, {name: "d", addr: "d:1"}}, false, "big a[0,2) b[2,4) d[4,6) seed=a"},
		{"size unknown: whole placement first", withPlan(ModelSpec{Name: "big", Source: "/m", Managed: true}, nil, ""), nil, three, ws("a"), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if g := run(t, tc.st, tc.placed, tc.free, tc.workers, tc.young, nil); g != tc.want {
				t.Errorf("got %q, want %q", g, tc.want)
			}
		})
	}
	// A stage that failed on its worker (StageFailed for the plan's
	// epoch), and the workers' own KV budgets (gossiped --kv-bytes).
	kv := func(w []pipeWorker, name string, b int64) []pipeWorker {
		for i := range w {
			if w[i].name == name {
				w[i].kv = b
			}
		}
		return w
	}
	failedB := map[string]map[string]bool{"big": {"b": true}}
	for _, tc := range []struct {
		name    string
		st      State
		free    map[string]int64
		workers []pipeWorker
		young   bool
		failed  map[string]map[string]bool
		want    string
	}{
		{name: "stage failed: re-placed without its worker", st: withPlan(big, plan3("big"), "a"), free: three, workers: ws("a", "b", "c", "d"), failed: failedB, want: "big a[0,2) c[2,4) d[4,6) seed=a"},
		{name: "stage failed, young leader: re-placed all the same", st: withPlan(big, plan3("big"), "a"), free: three, workers: ws("a", "b", "c", "d"), young: true, failed: failedB, want: "big a[0,2) c[2,4) d[4,6) seed=a"},
		{name: "stage failed, no spare: plan removed", st: withPlan(big, plan3("big"), "a"), free: three, workers: ws("a", "b", "c"), failed: failedB, want: "big none seed=a"},
		{name: "failed worker gets no stage of a new plan", st: withPlan(big, nil, "a"), free: three, workers: ws("a", "b", "c", "d"), failed: failedB, want: "big a[0,2) c[2,4) d[4,6) seed=a"},
		{name: "failed for another model: no effect", st: withPlan(big, plan3("big"), "a"), free: three, workers: ws("a", "b", "c", "d"), failed: map[string]map[string]bool{"other": {"b": true}}, want: ""},
		// A middle stage needs 200 + b's 120 = 320 > 300.
		{name: "a worker's larger kv budget: not a stage", st: withPlan(big, nil, "a"), free: three, workers: kv(ws("a", "b", "c", "d"), "b", 120), want: "big a[0,2) c[2,4) d[4,6) seed=a"},
		{name: "a worker's larger kv budget: plan no longer holds", st: withPlan(big, plan3("big"), "a"), free: three, workers: kv(ws("a", "b", "c", "d"), "b", 120), want: "big a[0,2) c[2,4) d[4,6) seed=a"},
		// First and last stage 200 + 10 + 30 = 240: fits with a 30-byte
		// budget, not with the default 50.
		{name: "smaller kv budgets: three stages fit", st: withPlan(big, nil, "a"), free: room("a", 240, "b", 240, "c", 240), workers: kv(kv(kv(ws("a", "b", "c"), "a", 30), "b", 30), "c", 30), want: "big a[0,2) b[2,4) c[4,6) seed=a"},
		{name: "default kv budget: three stages do not fit", st: withPlan(big, nil, "a"), free: room("a", 240, "b", 240, "c", 240), workers: ws("a", "b", "c"), want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if g := run(t, tc.st, nil, tc.free, tc.workers, tc.young, tc.failed); g != tc.want {
				t.Errorf("got %q, want %q", g, tc.want)
			}
		})
	}
}

// TestPipelineAssignment: each stage worker gets the plan, the seed its
// store-only entry, others nothing.
func TestPipelineAssignment(t *testing.T) {
	st := newState()
	st.Models["big"] = ModelSpec{Name: "big", Source: "/m", Managed: true, Layout: layout6(), Digest: "d1"}
	p := *plan3("big")
	p.Epoch = 7
	st.Pipelines["big"] = p
	st.Seeds["big"] = "s"
	for _, tc := range []struct {
		worker string
		want   string
	}{{"a", "plan 7 self 0"}, {"c", "plan 7 self 2"}, {"s", "store"}, {"z", ""}} {
		as := pipelineAssignments(st, tc.worker)
		got := ""
		if len(as) == 1 {
			am := as[0]
			switch {
			case am.Plan != nil:
				got = "plan " + itoa(am.Plan.Epoch) + " self " + itoa(uint64(am.Plan.Index(tc.worker)))
				if am.Digest != "d1" || len(am.Workers) != 1 || am.Workers[0] != "s" {
					t.Errorf("%s: entry %+v lacks the digest or the seed", tc.worker, am)
				}
			case am.StoreOnly:
				got = "store"
			}
		}
		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.worker, got, tc.want)
		}
	}
	// The wire plan is pipeline.Plan's JSON.
	a, _ := json.Marshal(p)
	b, _ := json.Marshal(wirePlan(p))
	if !bytes.Equal(a, b) {
		t.Errorf("wire plan JSON differs:\n%s\n%s", a, b)
	}
	var back pipeline.Plan
	if err := json.Unmarshal(b, &back); err != nil || back.Validate(6) != nil {
		t.Errorf("wire plan does not decode as a pipeline.Plan: %v", err)
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }
