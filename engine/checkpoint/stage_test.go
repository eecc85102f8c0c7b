package checkpoint

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestStageResolve(t *testing.T) {
	for _, tc := range []struct {
		in      Stage
		want    Stage
		wantErr string
	}{
		{in: Stage{}, want: Stage{0, 4, false}},
		{in: Stage{First: 1}, want: Stage{1, 4, false}},
		{in: Stage{First: 1, Last: 3}, want: Stage{1, 3, false}},
		{in: Stage{First: 2, NoHead: true}, want: Stage{2, 4, true}},
		{in: Stage{First: 4, Last: 4}, want: Stage{4, 4, false}}, // head only
		{in: Stage{First: -1, Last: 2}, wantErr: "must lie within [0,4)"},
		{in: Stage{First: 3, Last: 2}, wantErr: "first ≤ last"},
		{in: Stage{First: 0, Last: 5}, wantErr: "must lie within [0,4)"},
		{in: Stage{First: 2, Last: 2}, wantErr: "holds nothing"},
		{in: Stage{First: 4, Last: 4, NoHead: true}, wantErr: "holds nothing"},
		{in: Stage{First: 0, Last: 3, NoHead: true}, wantErr: "no_head applies only to the stage ending"},
	} {
		got, err := tc.in.Resolve(4)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%+v: got %+v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
		case err != nil || got != tc.want:
			t.Errorf("%+v: got %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestLayerIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int
		ok   bool
	}{
		{"model.layers.0.input_layernorm.weight", 0, true},
		{"model.layers.17.mlp.experts.3.up_proj.weight", 17, true},
		{"model.embed_tokens.weight", 0, false},
		{"model.norm.weight", 0, false},
		{"lm_head.weight", 0, false},
		{"model.layers.x.q_proj.weight", 0, false},
		{"model.layers.3", 0, false},
	} {
		got, ok := LayerIndex(tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("LayerIndex(%q) = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestOpenStageTensors: a stage's checkpoint holds exactly its layers'
// tensors, the embedding on the first stage (and on the last when the head
// is tied), norm and head on the last; the stages of a split hold every
// tensor of the model once (the tied embedding twice), so their bytes add
// up to the model's and each holds fewer than the whole. For HF
// safetensors, MLX and GGUF (where the other stages' tensors are never
// materialised).
func TestOpenStageTensors(t *testing.T) {
	for _, tc := range []struct {
		path   string
		splits [][]Stage
	}{
		{"hf/qwen3", [][]Stage{{{0, 2, false}, {2, 3, false}}, {{0, 1, false}, {1, 2, false}, {2, 3, false}}}},
		{"hf/qwen3_tied", [][]Stage{{{0, 1, false}, {1, 2, false}}, {{0, 1, false}, {1, 2, true}, {2, 2, false}}}},
		{"hf/qwen3_5_moe", [][]Stage{{{0, 2, false}, {2, 4, false}}, {{0, 1, false}, {1, 3, false}, {3, 4, false}}}},
		{"mlx/qwen3_5_moe-4bit", [][]Stage{{{0, 2, false}, {2, 4, false}}, {{0, 1, false}, {1, 3, false}, {3, 4, false}}}},
		{"mlx/qwen3_tied-4bit", [][]Stage{{{0, 1, false}, {1, 2, false}}}},
		{"gguf/qwen3-q4_k_m.gguf", [][]Stage{{{0, 1, false}, {1, 2, false}}, {{0, 1, false}, {1, 2, true}, {2, 2, false}}}},
		{"gguf/qwen3moe-q8_0.gguf", [][]Stage{{{0, 1, false}, {1, 2, false}}}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			path := filepath.Join(testdata, tc.path)
			whole, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Close()
			n := whole.Config().NumHiddenLayers
			tied := !whole.Has("lm_head.weight")
			emb, _ := whole.Tensor("model.embed_tokens.weight")
			for _, split := range tc.splits {
				count := map[string]int{}
				var bytes int64
				for _, st := range split {
					ck, err := OpenStage(path, st)
					if err != nil {
						t.Fatalf("%v: %v", st, err)
					}
					if got := ck.Stage(); got != st {
						t.Errorf("%v: Stage() = %v", st, got)
					}
					for _, name := range ck.Names() {
						count[name]++
						i, isLayer := LayerIndex(name)
						switch {
						case isLayer && (i < st.First || i >= st.Last):
							t.Errorf("%v holds %s", st, name)
						case name == "model.embed_tokens.weight" && !st.IsFirst() && !(tied && st.IsLast(n)):
							t.Errorf("%v holds the embedding", st)
						case (name == "model.norm.weight" || name == "lm_head.weight") && !st.IsLast(n):
							t.Errorf("%v holds %s", st, name)
						}
					}
					if ck.Bytes() >= whole.Bytes() {
						t.Errorf("%v holds %d bytes, the whole model %d", st, ck.Bytes(), whole.Bytes())
					}
					if files := ck.Files(); len(files) == 0 {
						t.Errorf("%v: no source files", st)
					}
					bytes += ck.Bytes()
					ck.Close()
				}
				for _, name := range whole.Names() {
					want := 1
					if name == "model.embed_tokens.weight" && tied {
						want = 2 // the first stage's embedding and the last stage's head
					}
					if count[name] != want {
						t.Errorf("split %v: %s held by %d stages, want %d", split, name, count[name], want)
					}
				}
				want := whole.Bytes()
				if tied {
					want += storedBytes(emb)
				}
				if bytes != want {
					t.Errorf("split %v: stages hold %d bytes, want %d", split, bytes, want)
				}
				if len(count) != len(whole.Names()) {
					t.Errorf("split %v: stages hold %d distinct tensors, the model %d", split, len(count), len(whole.Names()))
				}
			}
			if _, err := OpenStage(path, Stage{First: n + 1}); err == nil || !strings.Contains(err.Error(), "must lie within") {
				t.Errorf("stage past the layers: got %v", err)
			}
			if files := whole.Files(); !slices.IsSorted(files) {
				t.Errorf("Files() not sorted: %v", files)
			}
		})
	}
}
