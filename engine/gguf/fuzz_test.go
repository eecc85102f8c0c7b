package gguf

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the parser and to everything a caller
// does next (config, tensor views, decoding, tokenizer spec): errors are
// fine, panics and hangs are not. Seeds: testdata/fuzz/FuzzParse plus the
// synthetic models (separate and merged experts, YaRN keys) and the header
// of a fixture.
func FuzzParse(f *testing.F) {
	f.Add(tinyModel().bytes())
	f.Add(tinyMoE(true).bytes()) // merged ffn_gate_up_exps
	yarn := denseQwen3()
	yarn.add("qwen3.rope.scaling.type", "yarn")
	yarn.add("qwen3.rope.scaling.factor", float32(4))
	yarn.add("qwen3.rope.scaling.original_context_length", uint32(32))
	f.Add(yarn.bytes())
	if b, err := os.ReadFile(filepath.Join(fixtures, "qwen3-q4_k_m.gguf")); err == nil {
		f.Add(b[:8192])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		gf, err := Parse("fuzz.gguf", b)
		if err != nil {
			return
		}
		gf.Config()
		gf.TokenizerSpec()
		for _, ti := range gf.Infos() {
			ti.Shape()
		}
		ts, err := gf.Tensors()
		if err != nil {
			return
		}
		for _, h := range ts {
			if h.Numel() > 1<<16 {
				continue
			}
			if h.Rows() > 0 {
				row := make([]float32, h.Cols())
				h.DecodeRow(0, row)
				h.DecodeRow(h.Rows()-1, row)
			}
		}
	})
}
