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
