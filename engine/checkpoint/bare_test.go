package checkpoint

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
)

// The Qwen3Model (base-model) layout of testdata/hf/qwen3, as transformers'
// save_pretrained of AutoModel writes it: same tensors under the canonical
// names, no lm_head.
func TestBareQwen3ModelLayout(t *testing.T) {
	bare, err := Open(filepath.Join(testdata, "embeddings/qwen3_model"))
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	full, err := Open(filepath.Join(testdata, "hf/qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	if bare.Has("lm_head.weight") {
		t.Errorf("bare layout has lm_head.weight")
	}
	if _, err := bare.Tensor("lm_head.weight"); !errors.Is(err, ErrNoTensor) {
		t.Errorf("Tensor(lm_head.weight): got %v, want ErrNoTensor", err)
	}
	var n int
	for _, name := range full.Names() {
		if name == "lm_head.weight" {
			continue
		}
		n++
		a, err := full.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := bare.Tensor(name)
		if err != nil {
			t.Fatalf("bare layout: %v", err)
		}
		if a.Format != b.Format || !equalShape(a.Shape, b.Shape) || !bytes.Equal(a.Data, b.Data) {
			t.Errorf("%s: bare %v %v differs from hf/qwen3 %v %v", name, b.Format, b.Shape, a.Format, a.Shape)
		}
	}
	if got := len(bare.Names()); got != n {
		t.Errorf("bare layout has %d tensors, want %d: %v", got, n, bare.Names())
	}
}

func TestWithModelPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"embed_tokens.weight":             "model.embed_tokens.weight",
		"layers.3.mlp.up_proj.weight":     "model.layers.3.mlp.up_proj.weight",
		"norm.weight":                     "model.norm.weight",
		"lm_head.weight":                  "lm_head.weight",
		"model.layers.0.self_attn.q_norm": "model.layers.0.self_attn.q_norm",
	} {
		if got := withModelPrefix(in); got != want {
			t.Errorf("withModelPrefix(%q) = %q, want %q", in, got, want)
		}
	}
}
