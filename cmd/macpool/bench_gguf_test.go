package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestBenchWriteGGUFAndLoad: --write-gguf writes the synthetic model, and
// bench --model loads it back, reporting the file size, resident memory
// (on Linux) and a decode from an empty cache (--llama-bench).
func TestBenchWriteGGUFAndLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	var out, errb bytes.Buffer
	if code := runMain(context.Background(), []string{"bench", "--synthetic", "tiny", "--quant", "q8_0", "--write-gguf", path}, &out, &errb); code != 0 {
		t.Fatalf("bench --write-gguf: exit %d: %s", code, errb.String())
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	args := []string{"bench", "--model", path, "--threads", "2", "--prompt-tokens", "8", "--gen-tokens", "4", "--llama-bench", "--json"}
	if code := runMain(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("bench %v: exit %d: %s", args, code, errb.String())
	}
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json output %q: %v", out.String(), err)
	}
	if res["file_bytes"] != float64(st.Size()) {
		t.Errorf("file_bytes = %v, want %d", res["file_bytes"], st.Size())
	}
	if res["decode_from_empty_context"] != true {
		t.Errorf("decode_from_empty_context = %v, want true", res["decode_from_empty_context"])
	}
	if v, _ := res["decode_tok_s"].(float64); !(v > 0) {
		t.Errorf("decode_tok_s = %v, want > 0", res["decode_tok_s"])
	}
	if runtime.GOOS == "linux" {
		if v, _ := res["rss_bytes"].(float64); !(v > 0) {
			t.Errorf("rss_bytes = %v, want > 0", res["rss_bytes"])
		}
	}
}

// TestBenchConcurrentKVF16: the concurrent bench runs with the f16 KV cache.
func TestBenchConcurrentKVF16(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"bench", "--synthetic", "tiny", "--threads", "2", "--concurrency", "2", "--kv-f16", "--prompt-tokens", "40", "--gen-tokens", "4", "--json"}
	if code := runMain(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("bench %v: exit %d: %s", args, code, errb.String())
	}
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json output %q: %v", out.String(), err)
	}
	if v, _ := res["decode_tok_s"].(float64); !(v > 0) {
		t.Errorf("decode_tok_s = %v, want > 0", res["decode_tok_s"])
	}
}

// TestBenchWriteMLXAndLoad: --write-mlx writes the synthetic model as an
// MLX checkpoint folder with a config.json cut to --layers, which
// `bench --model` loads; formats MLX folders cannot hold are refused.
func TestBenchWriteMLXAndLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny-mlx4")
	var out, errb bytes.Buffer
	if code := runMain(context.Background(), []string{"bench", "--synthetic", "tiny", "--quant", "mlx4", "--layers", "1", "--write-mlx", dir}, &out, &errb); code != 0 {
		t.Fatalf("bench --write-mlx: exit %d: %s", code, errb.String())
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Layers int            `json:"num_hidden_layers"`
		Quant  map[string]any `json:"quantization"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatalf("config.json: %v", err)
	}
	if c.Layers != 1 || c.Quant["bits"] != float64(4) {
		t.Errorf("config.json: %d layers, quantization %v; want 1 layer, 4 bits", c.Layers, c.Quant)
	}
	run := func(args ...string) map[string]any {
		t.Helper()
		out.Reset()
		errb.Reset()
		if code := runMain(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		var res map[string]any
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("%v: output %q: %v", args, out.String(), err)
		}
		return res
	}
	res := run("bench", "--model", dir, "--threads", "2", "--prompt-tokens", "8", "--gen-tokens", "2", "--json")
	if res["layers"] != float64(1) {
		t.Errorf("loaded %v layers, want 1", res["layers"])
	}
	if code := runMain(context.Background(), []string{"bench", "--synthetic", "tiny", "--quant", "q8_0", "--write-mlx", filepath.Join(t.TempDir(), "x")}, &out, &errb); code == 0 {
		t.Error("--write-mlx of a q8_0 model: exit 0, want an error (MLX folders hold MLX affine or float tensors)")
	}
}
