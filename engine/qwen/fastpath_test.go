package qwen_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/internal/reftest"
)

// fastPathCases are the default (activation-quantizing) path's stated
// tolerances: the largest relative L2 error of any position's logits
// against the exact path (ExactMatMul) on the same weights, per
// architecture and format (mlx4: the MLX 4-bit fixtures; q8_0/q4_0: the HF
// fixtures quantized at load; gguf: testdata/gguf). bound is about 1.5×
// what was measured (docs/engine.md, "Fast-path accuracy", has the table).
// The tiny random MoE fixtures drift most: a changed expert choice moves a
// position's logits whole. llama names the file whose llama.cpp-family
// logits are in testdata/gguf (NAME.llamacpp_logits.f32): there the default
// path must also stay within 1.5× of llama.cpp's own error against the
// exact result. precise is the bound with engine.Options.PreciseHybrid
// (float32 activations into and out of the recurrence and into the MoE
// routers): 2-5× closer on the hybrids, at the decode cost docs/engine.md
// states.
var fastPathCases = []struct {
	name, path string
	opts       engine.Options
	bound      float64
	llama      string
	precise    float64 // bound with PreciseHybrid (hybrids; 0: not checked)
}{
	{"qwen3/mlx4", "mlx/qwen3-4bit", engine.Options{}, 0.045, "", 0},
	{"qwen3_moe/mlx4", "mlx/qwen3_moe-4bit", engine.Options{}, 0.9, "", 0},
	{"qwen3_next/mlx4", "mlx/qwen3_next-4bit", engine.Options{}, 2, "", 0.45},
	{"qwen3_5/mlx4", "mlx/qwen3_5-4bit", engine.Options{}, 0.35, "", 0.15},
	{"qwen3_5_moe/mlx4", "mlx/qwen3_5_moe-4bit", engine.Options{}, 1.9, "", 0.42},
	{"qwen3_next/q8_0", "hf/qwen3_next", engine.Options{Quantize: "q8"}, 1.6, "", 1.3},
	{"qwen3_5/q8_0", "hf/qwen3_5", engine.Options{Quantize: "q8"}, 0.45, "", 0.2},
	{"qwen3_5_moe/q8_0", "hf/qwen3_5_moe", engine.Options{Quantize: "q8"}, 2, "", 1},
	{"qwen3_5/q4_0", "hf/qwen3_5", engine.Options{Quantize: "q4"}, 0.6, "", 0.33},
	{"qwen3/gguf-q8_0", "gguf/qwen3-q8_0.gguf", engine.Options{}, 0.045, "qwen3-q8_0", 0},
	{"qwen3/gguf-q4_0", "gguf/qwen3-q4_0.gguf", engine.Options{}, 0.045, "qwen3-q4_0", 0},
	{"qwen3/gguf-q4_k_m", "gguf/qwen3-q4_k_m.gguf", engine.Options{}, 0.045, "qwen3-q4_k_m", 0},
	{"qwen3/gguf-q6_k", "gguf/qwen3-q6_k.gguf", engine.Options{}, 0.048, "qwen3-q6_k", 0},
	{"qwen3moe/gguf-q8_0", "gguf/qwen3moe-q8_0.gguf", engine.Options{}, 1.1, "qwen3moe-q8_0", 0},
}

func TestFastPathAccuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("whole-model test")
	}
	for _, tc := range fastPathCases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("..", "..", "testdata", filepath.FromSlash(tc.path))
			refDir := path
			if strings.HasSuffix(path, ".gguf") {
				refDir = filepath.Dir(path)
			}
			ids := reftest.ReadRef(t, refDir).InputIDs
			run := func(o engine.Options) []float32 {
				o.Threads, o.Quantize = 2, tc.opts.Quantize
				m, err := engine.Load(path, o)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				return allLogits(t, m, newCache(t, m), ids)
			}
			exact, fast, precise := run(engine.Options{ExactMatMul: true}), run(engine.Options{}), run(engine.Options{PreciseHybrid: true})
			V := len(exact) / len(ids)
			e, ep := reftest.MaxRelL2(fast, exact, V), reftest.MaxRelL2(precise, exact, V)
			t.Logf("%s: default path vs exact: max rel-L2 %.3g, mean %.3g; with PreciseHybrid: max %.3g, mean %.3g",
				tc.name, e, reftest.RelL2(fast, exact), ep, reftest.RelL2(precise, exact))
			if e > tc.bound {
				t.Errorf("default path: max rel-L2 %.3g against the exact path, want ≤ %g", e, tc.bound)
			}
			if tc.precise > 0 && ep > tc.precise {
				t.Errorf("PreciseHybrid: max rel-L2 %.3g against the exact path, want ≤ %g", ep, tc.precise)
			}
			if tc.llama != "" {
				llama := reftest.ReadF32(t, filepath.Join(refDir, tc.llama+".llamacpp_logits.f32"))
				el := reftest.MaxRelL2(llama, exact, V)
				t.Logf("%s: llama.cpp vs our exact path: max rel-L2 %.3g (ours / llama.cpp %.2f)", tc.name, el, e/el)
				if e > 1.5*el {
					t.Errorf("default path %.3g is more than 1.5× llama.cpp's %.3g from the exact path", e, el)
				}
			}
		})
	}
}
