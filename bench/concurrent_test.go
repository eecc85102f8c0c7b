package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/macpool/macpool/internal/reftest"
)

func TestBenchConcurrentJSON(t *testing.T) {
	m := reftest.SynthModel(t, "tiny", 2)
	var out bytes.Buffer
	res := benchResult{Model: "tiny", PromptTokens: 40, GenTokens: 4, Threads: 2}
	if err := runBenchConcurrent(context.Background(), m, res, 3, 33, 1, true, &out); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%q: %v", out.String(), err)
	}
	for _, k := range []string{"decode_tok_s", "ttft_p50_ms", "ttft_p99_ms"} {
		if v, ok := got[k].(float64); !ok || !(v > 0) {
			t.Errorf("%s = %v, want a positive number (%s)", k, got[k], out.String())
		}
	}
	if got["concurrency"] != float64(3) || got["cached_tokens"] != float64(32) || got["model"] != "tiny" {
		t.Errorf("output %s", out.String())
	}
	if err := runBenchConcurrent(context.Background(), m, res, 3, 40, 1, true, &out); err == nil {
		t.Error("--cached-prefix equal to the prompt accepted")
	}
}
