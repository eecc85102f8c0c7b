package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
)

func TestBenchSyntheticJSON(t *testing.T) {
	for _, q := range []string{"q8_0", "q4_0", "bf16"} {
		var out, errb bytes.Buffer
		args := []string{"--synthetic", "tiny", "--quant", q, "--threads", "2", "--prompt-tokens", "16", "--gen-tokens", "4", "--json"}
		if code := runMain(context.Background(), append([]string{"bench"}, args...), &out, &errb); code != 0 {
			t.Fatalf("bench %v: exit %d: %s", args, code, errb.String())
		}
		var res map[string]any
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("bench --json output %q: %v", out.String(), err)
		}
		for _, k := range []string{"prefill_tok_s", "decode_tok_s", "bandwidth_gb_s"} {
			if v, ok := res[k].(float64); !ok || !(v > 0) {
				t.Errorf("%s: %s = %v, want a positive number", q, k, res[k])
			}
		}
		if res["model"] != "tiny" || res["quant"] != q || res["threads"] != float64(2) {
			t.Errorf("model/quant/threads = %v/%v/%v, want tiny/%s/2", res["model"], res["quant"], res["threads"], q)
		}
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--synthetic", "nope"},
		{"--synthetic", "tiny", "--quant", "q3"},
		{"--synthetic", "tiny", "--model", "x"},
		{"--synthetic", "tiny", "--quantize", "q5"},
	} {
		var out, errb bytes.Buffer
		if code := runMain(context.Background(), append([]string{"bench"}, args...), &out, &errb); code != 2 {
			t.Errorf("bench %v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}
