package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestGGUFInfo(t *testing.T) {
	var out, errb bytes.Buffer
	err := runGGUFInfo(context.Background(), []string{"--file", "../../testdata/gguf/qwen3moe-q4_k_m.gguf", "--tensors"}, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`architecture "qwen3moe"`,
		`"ModelType": "qwen3_moe"`,
		"blk.1.ffn_down_exps.weight   Q6_K  [8 256 256]",
		"model.layers.1.mlp.experts.0.down_proj.weight ... (8 expert views)",
		"output.weight",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := runGGUFInfo(context.Background(), nil, &out, &errb); err == nil {
		t.Error("no --file: no error")
	}
}
