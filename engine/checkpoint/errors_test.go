package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// copyFixture copies a fixture folder into a temp dir and returns the copy.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join(testdata, name)
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func editFile(t *testing.T, path string, edit func(string) string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := edit(string(b))
	if s == string(b) {
		t.Fatalf("edit of %s changed nothing", path)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOpenErrors(t *testing.T) {
	replace := func(old, new string) func(string) string {
		return func(s string) string { return strings.Replace(s, old, new, 1) }
	}
	for _, tc := range []struct {
		name    string
		fixture string
		setup   func(t *testing.T, dir string)
		want    []string // substrings; "{dir}" is replaced by the folder
	}{
		{"no config", "hf/qwen3", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "config.json")) },
			[]string{"{dir}/config.json"}},
		{"unknown model_type", "hf/qwen3", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "config.json"), replace(`"model_type": "qwen3"`, `"model_type": "qwen9"`))
		}, []string{"{dir}/config.json", "model_type", `"qwen9"`}},
		{"missing required field", "hf/qwen3", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "config.json"), replace(`"vocab_size": 1024`, `"vocab_size": 0`))
		}, []string{"{dir}/config.json", "vocab_size"}},
		{"truncated weights", "hf/qwen3", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			fi, _ := os.Stat(p)
			os.Truncate(p, fi.Size()-100)
		}, []string{"{dir}/model.safetensors", "past the end"}},
		{"header length lies", "hf/qwen3", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			b, _ := os.ReadFile(p)
			b[5] = 0x7f
			os.WriteFile(p, b, 0o644)
		}, []string{"{dir}/model.safetensors", "header length"}},
		{"no weights", "hf/qwen3", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "model.safetensors")) },
			[]string{dir0, "safetensors"}},
		{"missing shard", "mlx/qwen3-4bit", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "model.safetensors.index.json"), replace(`"lm_head.biases": "model.safetensors"`, `"lm_head.biases": "model-00002-of-00002.safetensors"`))
		}, []string{"{dir}/model.safetensors.index.json", "shard model-00002-of-00002.safetensors is missing"}},
		{"tensor missing from shard", "mlx/qwen3-4bit", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "model.safetensors.index.json"), replace(`"weight_map": {`, `"weight_map": {"model.layers.7.mlp.up_proj.weight": "model.safetensors",`))
		}, []string{"{dir}/model.safetensors.index.json", `"model.layers.7.mlp.up_proj.weight"`, "does not contain it"}},
		{"mlx mode", "mlx/qwen3_5-4bit", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "config.json"), replace(`"mode": "affine"`, `"mode": "mxfp4"`))
		}, []string{"{dir}/config.json", "quantization.mode", "mxfp4"}},
		{"other quantizer", "hf/qwen3", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "config.json"), replace(`"vocab_size": 1024`, `"vocab_size": 1024, "quantization_config": {"quant_method": "fp8"}`))
		}, []string{"{dir}/config.json", "quant_method", "fp8"}},
		{"scales without quantization", "mlx/qwen3-8bit", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "config.json"), func(s string) string {
				s = strings.Replace(s, `"quantization": {`, `"q1": {`, 1)
				return strings.Replace(s, `"quantization_config": {`, `"q2": {`, 1)
			})
		}, []string{"{dir}", "scales", "no quantization"}},
		{"wrong bits", "mlx/qwen3_next-4bit", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "config.json"), replace(`"model.layers.0.mlp.gate": {
            "group_size": 64,
            "bits": 8`, `"model.layers.0.mlp.gate": {
            "group_size": 64,
            "bits": 4`))
		}, []string{"{dir}", "model.layers.0.mlp.gate", "quantization"}},
		{"module off", "mlx/qwen3_next-4bit", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, "config.json"), replace(`"model.layers.0.mlp.gate": {
            "group_size": 64,
            "bits": 8
        }`, `"model.layers.0.mlp.gate": false`))
		}, []string{"{dir}", "model.layers.0.mlp.gate", "not quantized"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyFixture(t, tc.fixture)
			tc.setup(t, dir)
			ck, err := Open(dir)
			if err == nil {
				ck.Close()
				t.Fatalf("Open succeeded, want error containing %q", tc.want)
			}
			for _, w := range tc.want {
				w = strings.ReplaceAll(w, "{dir}", dir)
				if w == dir0 {
					w = dir
				}
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

const dir0 = "{dir0}"

func TestTensorErrors(t *testing.T) {
	dir := filepath.Join(testdata, "hf/qwen3")
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	_, err = ck.Tensor("model.layers.9.mlp.up_proj.weight")
	if err == nil || !errors.Is(err, ErrNoTensor) || !strings.Contains(err.Error(), "model.layers.9.mlp.up_proj.weight") || !strings.Contains(err.Error(), dir) {
		t.Errorf("missing tensor: got %v, want ErrNoTensor naming tensor and %s", err, dir)
	}
	_, err = ck.TensorShape("model.layers.0.mlp.up_proj.weight", 128, 256)
	for _, w := range []string{"model.layers.0.mlp.up_proj.weight", "model.safetensors", "[256 128]", "[128 256]"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("shape mismatch: got %v, want it to contain %q", err, w)
		}
	}
	h, err := ck.TensorShape("model.layers.0.mlp.up_proj.weight", 256, 128)
	if err != nil {
		t.Fatal(err)
	}
	h.Shape[0] = 1 // a caller's copy: must not affect the checkpoint
	if _, err := ck.TensorShape("model.layers.0.mlp.up_proj.weight", 256, 128); err != nil {
		t.Errorf("Tensor shares Shape with callers: %v", err)
	}
	if !ck.Has("lm_head.weight") || ck.Has("lm_head") || ck.Dir() != dir {
		t.Errorf("Has/Dir wrong")
	}
	if err := ck.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ck.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestCheckTensors(t *testing.T) {
	ck, err := Open(filepath.Join(testdata, "hf/qwen3_next"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if err := ck.CheckTensors(); err != nil {
		t.Fatalf("good checkpoint: %v", err)
	}
	tensors := map[string]*tensor.Host{}
	for _, n := range ck.Names() {
		tensors[n], _ = ck.Tensor(n)
	}
	delete(tensors, "model.layers.2.linear_attn.A_log")
	tensors["model.norm.weight"].Shape = []int{7}
	bad, err := New("mem", ck.Config(), tensors, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bad.CheckTensors()
	for _, w := range []string{"model.layers.2.linear_attn.A_log", "model.norm.weight", "[7]", "[128]"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("CheckTensors: got %v, want it to contain %q", err, w)
		}
	}
}

// FuzzParseConfig checks that no config.json makes the parser panic or
// accept an inconsistent architecture.
func FuzzParseConfig(f *testing.F) {
	for _, p := range append(mustGlob(f, testdata+"/*/*/config.json"), mustGlob(f, "testdata/configs/*.json")...) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, []byte(`{"eos_token_id": [1, 2]}`))
	}
	f.Fuzz(func(t *testing.T, data, gen []byte) {
		c, err := ParseConfig("config.json", data, gen)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a config Validate rejects: %v", err)
		}
		if len(c.LayerTypes) != c.NumHiddenLayers {
			t.Fatalf("%d layer types for %d layers", len(c.LayerTypes), c.NumHiddenLayers)
		}
	})
}

func mustGlob(f *testing.F, pattern string) []string {
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) == 0 {
		f.Fatalf("glob %s: %v (%d matches)", pattern, err, len(m))
	}
	return m
}
