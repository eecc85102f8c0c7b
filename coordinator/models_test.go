package coordinator

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
)

const gib = int64(1) << 30

func TestPlace(t *testing.T) {
	cfg := PlacementConfig{UsableFraction: 0.75, KVBudget: gib, Overhead: 0.1}
	big := ModelSpec{Name: "big", Managed: true, Size: 20 * gib}    // needs 23 GiB
	small := ModelSpec{Name: "small", Managed: true, Size: 2 * gib} // needs 3.2 GiB
	mb := func(g int64) int64 { return g * 1024 }
	tests := []struct {
		name    string
		models  []ModelSpec
		workers []PlaceWorker
		current map[string][]string
		want    map[string][]string
	}{
		{
			name:    "fits only the big machine",
			models:  []ModelSpec{big},
			workers: []PlaceWorker{{Name: "mini", MemoryMB: mb(16)}, {Name: "studio", MemoryMB: mb(64)}},
			want:    map[string][]string{"big": {"studio"}},
		},
		{
			// 20 GiB + 10% + 4 GiB of --kv-bytes: 26 GiB > 24 GiB usable.
			name:    "a worker's --kv-bytes replaces the KV budget",
			models:  []ModelSpec{big},
			workers: []PlaceWorker{{Name: "studio", MemoryMB: mb(32), KVBytes: 4 * gib}, {Name: "max", MemoryMB: mb(32), KVBytes: gib / 2}},
			want:    map[string][]string{"big": {"max"}},
		},
		{
			name:    "a kept placement is dropped once --kv-bytes leaves no room",
			models:  []ModelSpec{big},
			workers: []PlaceWorker{{Name: "studio", MemoryMB: mb(32), KVBytes: 4 * gib}},
			current: map[string][]string{"big": {"studio"}},
			want:    map[string][]string{"big": {}},
		},
		{
			name:    "fits nowhere",
			models:  []ModelSpec{big},
			workers: []PlaceWorker{{Name: "mini", MemoryMB: mb(16)}, {Name: "air", MemoryMB: mb(24)}},
			want:    map[string][]string{"big": {}},
		},
		{
			name:    "replicas spread over the roomiest workers",
			models:  []ModelSpec{{Name: "small", Managed: true, Size: 2 * gib, Replicas: 2}},
			workers: []PlaceWorker{{Name: "a", MemoryMB: mb(8)}, {Name: "b", MemoryMB: mb(32)}, {Name: "c", MemoryMB: mb(16)}},
			want:    map[string][]string{"small": {"b", "c"}},
		},
		{
			name:    "replicas 0 means every worker with room",
			models:  []ModelSpec{small},
			workers: []PlaceWorker{{Name: "a", MemoryMB: mb(4)}, {Name: "b", MemoryMB: mb(8)}, {Name: "c", MemoryMB: mb(16)}},
			want:    map[string][]string{"small": {"b", "c"}}, // a: 3 GiB usable < 3.2 GiB
		},
		{
			name:    "big placed first, small takes what is left",
			models:  []ModelSpec{small, big},
			workers: []PlaceWorker{{Name: "studio", MemoryMB: mb(32)}}, // 24 GiB usable
			want:    map[string][]string{"big": {"studio"}, "small": {}},
		},
		{
			name:    "unmanaged models served take memory",
			models:  []ModelSpec{small, {Name: "static", Size: 8 * gib}},
			workers: []PlaceWorker{{Name: "a", MemoryMB: mb(16), Serving: []string{"static"}}, {Name: "b", MemoryMB: mb(16)}},
			// a: 0.75*16 = 12 GiB, static needs 8*1.1+1 = 9.8: 2.2 GiB left < 3.2
			want: map[string][]string{"small": {"b"}},
		},
		{
			name:    "current kept when another worker has more room",
			models:  []ModelSpec{{Name: "small", Managed: true, Size: 2 * gib, Replicas: 1}},
			workers: []PlaceWorker{{Name: "a", MemoryMB: mb(8)}, {Name: "b", MemoryMB: mb(64)}},
			current: map[string][]string{"small": {"a"}},
			want:    map[string][]string{"small": {"a"}},
		},
		{
			name:    "re-placed when its worker leaves",
			models:  []ModelSpec{{Name: "small", Managed: true, Size: 2 * gib, Replicas: 1}},
			workers: []PlaceWorker{{Name: "b", MemoryMB: mb(64)}, {Name: "c", MemoryMB: mb(16)}},
			current: map[string][]string{"small": {"a"}},
			want:    map[string][]string{"small": {"b"}},
		},
		{
			name:    "a joining worker gets the models placed everywhere",
			models:  []ModelSpec{small},
			workers: []PlaceWorker{{Name: "a", MemoryMB: mb(16)}, {Name: "new", MemoryMB: mb(16)}},
			current: map[string][]string{"small": {"a"}},
			want:    map[string][]string{"small": {"a", "new"}},
		},
		{
			name:    "the GPU working set bounds a Mac",
			models:  []ModelSpec{big},
			workers: []PlaceWorker{{Name: "m", MemoryMB: mb(64), GPUWorkingMB: mb(20)}, {Name: "n", MemoryMB: mb(32), GPUWorkingMB: mb(24)}},
			want:    map[string][]string{"big": {"n"}},
		},
		{
			name:    "unknown memory takes anything",
			models:  []ModelSpec{big},
			workers: []PlaceWorker{{Name: "x"}},
			want:    map[string][]string{"big": {"x"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Place(cfg, tc.models, tc.workers, tc.current)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// Managed-model commands next to the session-1 ones; logs and snapshots
// written before the new fields existed still apply and restore.
// TestKeepAbsent: a young leader keeps placed workers it does not see
// (they may be rejoining) but withdraws a live one the placement drops.
func TestKeepAbsent(t *testing.T) {
	tests := []struct {
		name      string
		old, next []string
		live      []string
		want      []string
	}{
		{"unchanged", []string{"a", "b"}, []string{"a", "b"}, []string{"a", "b"}, []string{"a", "b"}},
		{"absent worker kept", []string{"a", "b"}, []string{"a"}, []string{"a"}, []string{"a", "b"}},
		{"live worker without room withdrawn", []string{"a", "b"}, []string{"a"}, []string{"a", "b"}, []string{"a"}},
		{"model too big for every live worker", []string{"a", "b", "c"}, nil, []string{"a", "b", "c"}, []string{}},
		{"absent kept beside a new worker", []string{"b"}, []string{"a"}, []string{"a"}, []string{"a", "b"}},
		{"nothing placed before", nil, []string{"b", "a"}, []string{"a", "b"}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live := map[string]bool{}
			for _, w := range tt.live {
				live[w] = true
			}
			got := keepAbsent(tt.old, tt.next, live)
			if got == nil {
				got = []string{}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("keepAbsent(%v, %v, live %v) = %v, want %v", tt.old, tt.next, tt.live, got, tt.want)
			}
		})
	}
}

func TestFSMModelsCompatible(t *testing.T) {
	f := newFSM()
	// A session-1 log entry: no managed fields.
	old := []byte(`{"name":"old","source":"worker:w1","created":5}`)
	cmds := [][]byte{
		append([]byte{cmdVersion, byte(cmdRegisterModel)}, old...),
		mustCmd(t, cmdRegisterModel, ModelSpec{Name: "m", Source: "/models/m", SourceNode: "w1", Managed: true, Replicas: 2}),
		mustCmd(t, cmdSetAssignment, placementCmd{Model: "m", Workers: []string{"w2", "w1"}}),
	}
	for i, c := range cmds {
		if err := f.apply(c); err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	if err := f.apply(mustCmd(t, cmdSetAssignment, placementCmd{Model: "nope", Workers: []string{"w1"}})); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("assignment of an unregistered model: got %v, want not registered", err)
	}
	st := f.snapshot()
	if got := st.Assign["m"]; !reflect.DeepEqual(got, []string{"w1", "w2"}) {
		t.Fatalf("assign m = %v, want [w1 w2]", got)
	}
	if st.Models["old"].Managed || !st.Models["m"].Managed || st.Models["m"].SourceNode != "w1" {
		t.Fatalf("models = %+v", st.Models)
	}
	// Snapshot round trip keeps the assignment; removal clears it.
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(st); err != nil {
		t.Fatal(err)
	}
	g := newFSM()
	if err := g.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.snapshot().Assign, st.Assign) {
		t.Fatalf("restored assign %v, want %v", g.snapshot().Assign, st.Assign)
	}
	if err := g.apply(mustCmd(t, cmdRemoveModel, nameCmd{Name: "m"})); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.snapshot().Assign["m"]; ok {
		t.Fatal("assignment survives model removal")
	}
	// A session-1 snapshot (no "assign" key) restores to an empty map.
	h := newFSM()
	if err := h.Restore(io.NopCloser(strings.NewReader(`{"models":{"x":{"name":"x"}},"placement":{},"api_keys":{}}`))); err != nil {
		t.Fatal(err)
	}
	if s := h.snapshot(); s.Assign == nil || len(s.Models) != 1 {
		t.Fatalf("old snapshot restored to %+v", s)
	}
}

func TestModelSpecFromRequest(t *testing.T) {
	tests := []struct {
		req       AddModelRequest
		wantName  string
		wantParam string
	}{
		{AddModelRequest{Source: "Qwen/Qwen3-0.6B"}, "Qwen/Qwen3-0.6B", ""},
		{AddModelRequest{Source: "hf.co/Qwen/Qwen3-8B-GGUF:Q4_K_M"}, "Qwen/Qwen3-8B-GGUF:Q4_K_M", ""},
		{AddModelRequest{Source: "/models/qwen3-tiny/"}, "qwen3-tiny", ""},
		{AddModelRequest{Source: "/m", Name: "mine"}, "mine", ""},
		{AddModelRequest{}, "", "source"},
		{AddModelRequest{Source: "/m", Name: "a b"}, "", "name"},
		{AddModelRequest{Source: "/m", Size: -1}, "", "size"},
		{AddModelRequest{Source: "/m", Replicas: -2}, "", "replicas"},
	}
	for _, tc := range tests {
		spec, oe := modelSpecFromRequest(tc.req)
		switch {
		case tc.wantParam != "":
			if oe == nil || oe.Param != tc.wantParam || oe.Status != 400 {
				t.Errorf("%+v: got %v, want 400 on %s", tc.req, oe, tc.wantParam)
			}
		case oe != nil:
			t.Errorf("%+v: %v", tc.req, oe)
		case spec.Name != tc.wantName || !spec.Managed:
			t.Errorf("%+v: got name %q managed %v, want %q managed", tc.req, spec.Name, spec.Managed, tc.wantName)
		}
	}
}
