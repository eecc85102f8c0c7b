package qwen_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/internal/reftest"
)

// The MLX 4-bit conversions of the hybrid fixtures, against references computed by
// transformers on the exactly dequantized weights.
func TestHybridMLXMatchesReference(t *testing.T) {
	for _, name := range []string{"qwen3_moe-4bit", "qwen3_next-4bit", "qwen3_5-4bit", "qwen3_5_moe-4bit"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("..", "..", "testdata", "mlx", name)
			r := reftest.ReadRef(t, dir)
			want := reftest.ReadF32(t, filepath.Join(dir, "ref_logits.f32"))
			m, err := engine.Load(dir, engine.Options{Threads: 2, ExactMatMul: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			V := r.LogitsShape[1]
			got := allLogits(t, m, newCache(t, m), r.InputIDs)
			worst := 0.0
			for p := range r.InputIDs {
				worst = max(worst, hybridRelL2(got[p*V:(p+1)*V], want[p*V:(p+1)*V]))
			}
			t.Logf("%s: max relative L2 error %.3g", name, worst)
			if worst >= 1e-4 {
				t.Errorf("max relative L2 error %.3g, want < 1e-4", worst)
			}
			out, err := m.Generate(context.Background(), r.GreedyPrompt, len(r.GreedyOut), engine.Greedy{}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(out, r.GreedyOut) {
				t.Errorf("greedy\n got %v\nwant %v", out, r.GreedyOut)
			}
		})
	}
}

// The GGUF Qwen3-MoE files (stacked *_exps experts sliced per expert by the checkpoint
// loader), against references computed in float64 from the exactly dequantized weights
// (ExactMatMul: the default int8-activation kernels differ by design, and tiny random MoE
// models turn that into different expert choices).
func TestHybridGGUFMoEMatchesReference(t *testing.T) {
	gdir := filepath.Join("..", "..", "testdata", "gguf")
	r := reftest.ReadRef(t, gdir)
	for _, name := range []string{"qwen3moe-q8_0", "qwen3moe-q4_0", "qwen3moe-q4_k_m"} {
		t.Run(name, func(t *testing.T) {
			want := reftest.ReadF32(t, filepath.Join(gdir, name+".ref_logits.f32"))
			m, err := engine.Load(filepath.Join(gdir, name+".gguf"), engine.Options{Threads: 2, ExactMatMul: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			V := r.LogitsShape[1]
			got := allLogits(t, m, newCache(t, m), r.InputIDs)
			worst := 0.0
			for p := range r.InputIDs {
				worst = max(worst, hybridRelL2(got[p*V:(p+1)*V], want[p*V:(p+1)*V]))
			}
			t.Logf("%s: max relative L2 error %.3g", name, worst)
			if worst >= 1e-4 {
				t.Errorf("max relative L2 error %.3g, want < 1e-4", worst)
			}
		})
	}
}
