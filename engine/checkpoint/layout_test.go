package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine/safetensors"
)

// stTensor is a tensor to write into a test safetensors file.
type stTensor struct {
	dtype string
	shape []int
	data  []byte
}

// writeSafetensors writes tensors (in reverse name order, to exercise
// unordered data) with an unpadded header.
func writeSafetensors(t *testing.T, path string, tensors map[string]stTensor) {
	t.Helper()
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data []byte
	for _, n := range names {
		tt := tensors[n]
		header[n] = map[string]any{"dtype": tt.dtype, "shape": tt.shape, "data_offsets": []int{len(data), len(data) + len(tt.data)}}
		data = append(data, tt.data...)
	}
	js, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	out = append(append(out, js...), data...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestQwen35UpstreamLayout rewrites the hf/qwen3_5_moe fixture the way the
// published Qwen3.5/3.6 checkpoints are laid out: image-text config with
// text_config, weights under model.language_model., experts fused into
// gate_up_proj [E, 2I, H] / down_proj [E, H, I], vision and MTP weights,
// two shards with an index. Every canonical tensor must come back equal.
func TestQwen35UpstreamLayout(t *testing.T) {
	srcDir := filepath.Join(testdata, "hf/qwen3_5_moe")
	src, err := safetensors.OpenDir(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ref, err := Open(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	cfg := ref.Config()

	shards := []map[string]stTensor{{}, {}}
	for i, name := range src.Names() {
		if strings.Contains(name, ".mlp.experts.") {
			continue
		}
		info, f, _ := src.Info(name)
		b, _ := f.Bytes(name)
		out := strings.Replace(name, "model.", "model.language_model.", 1)
		shards[i%2][out] = stTensor{info.DType, info.Shape, b}
	}
	e, mi, h := cfg.NumExperts, cfg.MoEIntermediateSize, cfg.HiddenSize
	for l := 0; l < cfg.NumHiddenLayers; l++ {
		var gateUp, down []byte
		for x := 0; x < e; x++ {
			for _, p := range []string{"gate_proj", "up_proj"} {
				b, _ := src.Files()[0].Bytes(fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s.weight", l, x, p))
				gateUp = append(gateUp, b...)
			}
			b, _ := src.Files()[0].Bytes(fmt.Sprintf("model.layers.%d.mlp.experts.%d.down_proj.weight", l, x))
			down = append(down, b...)
		}
		p := fmt.Sprintf("model.language_model.layers.%d.mlp.experts.", l)
		shards[l%2][p+"gate_up_proj"] = stTensor{"BF16", []int{e, 2 * mi, h}, gateUp}
		shards[l%2][p+"down_proj"] = stTensor{"BF16", []int{e, h, mi}, down}
	}
	shards[0]["model.visual.blocks.0.attn.qkv.weight"] = stTensor{"BF16", []int{2, 2}, make([]byte, 8)}
	shards[1]["mtp.fc.weight"] = stTensor{"BF16", []int{2}, make([]byte, 4)}

	dir := t.TempDir()
	weightMap := map[string]string{}
	for i, s := range shards {
		name := fmt.Sprintf("model-%05d-of-00002.safetensors", i+1)
		writeSafetensors(t, filepath.Join(dir, name), s)
		for n := range s {
			weightMap[n] = name
		}
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	os.WriteFile(filepath.Join(dir, safetensors.IndexFile), idx, 0o644)
	text, _ := os.ReadFile(filepath.Join(srcDir, "config.json"))
	var textCfg map[string]any
	json.Unmarshal(text, &textCfg)
	delete(textCfg, "layer_types") // derive from full_attention_interval
	textCfg["full_attention_interval"] = 4
	textCfg["eos_token_id"] = 7
	top, _ := json.Marshal(map[string]any{
		"architectures": []string{"Qwen3_5MoeForConditionalGeneration"}, "model_type": "qwen3_5_moe",
		"text_config": textCfg, "tie_word_embeddings": false, "vision_config": map[string]any{"depth": 1},
	})
	os.WriteFile(filepath.Join(dir, "config.json"), top, 0o644)
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": [8, 7]}`), 0o644)

	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	got := *ck.Config()
	if fmt.Sprint(got.EOSTokenIDs) != "[7 8]" {
		t.Errorf("EOSTokenIDs %v, want [7 8]", got.EOSTokenIDs)
	}
	got.EOSTokenIDs = cfg.EOSTokenIDs
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", *cfg) {
		t.Errorf("config:\n got %+v\nwant %+v", got, *cfg)
	}
	if a, b := strings.Join(ck.Names(), ","), strings.Join(ref.Names(), ","); a != b {
		t.Fatalf("names differ:\n got %s\nwant %s", a, b)
	}
	for _, n := range ref.Names() {
		want, _ := ref.Tensor(n)
		h, err := ck.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(h.Shape) != fmt.Sprint(want.Shape) || string(h.Data) != string(want.Data) || h.Format != want.Format {
			t.Errorf("%s: got %v %v (%d bytes), want %v %v (%d bytes)", n, h.Format, h.Shape, len(h.Data), want.Format, want.Shape, len(want.Data))
		}
	}
}
