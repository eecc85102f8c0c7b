package qwen_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/internal/reftest"
)

var readF32 = reftest.ReadF32

// checkLogits loads path, runs ids in one pass and compares every position
// with want (relative L2 < 1e-4); it returns the worst error. ExactMatMul:
// quantized weights times float32 activations, as the references compute.
func checkLogits(t *testing.T, path string, ids []int, want []float32) float64 {
	t.Helper()
	m, err := engine.Load(path, engine.Options{Threads: 2, ExactMatMul: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, _ := m.NewCache()
	defer c.Free()
	got := forwardAll(t, m, c, ids)
	vocab := m.VocabSize()
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	worst := reftest.CheckPositions(t, got, want, vocab, len(ids), 1e-4)
	return worst
}

// Dense Qwen3 from MLX affine-quantized checkpoints: weights stay packed and
// are read through the reference row decoder.
func TestDenseMLX(t *testing.T) {
	for _, name := range []string{"qwen3-4bit", "qwen3-8bit", "qwen3_tied-4bit"} {
		t.Run(name, func(t *testing.T) {
			d := filepath.Join("..", "..", "testdata", "mlx", name)
			r := reftest.ReadRef(t, d)
			worst := checkLogits(t, d, r.InputIDs, readF32(t, filepath.Join(d, "ref_logits.f32")))
			t.Logf("%s: max relative L2 error %.3g", name, worst)
			m, err := engine.Load(d, engine.Options{Threads: 2, ExactMatMul: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			got, err := m.Generate(context.Background(), r.GreedyPrompt, len(r.GreedyOut), nil, nil, nil)
			if err != nil || !equal(got, r.GreedyOut) {
				t.Errorf("greedy: got %v (%v), want %v", got, err, r.GreedyOut)
			}
		})
	}
}

// Dense Qwen3 GGUF files against logits from the exactly dequantized weights.
func TestDenseGGUF(t *testing.T) {
	d := filepath.Join("..", "..", "testdata", "gguf")
	r := reftest.ReadRef(t, d)
	for _, name := range []string{"qwen3-bf16", "qwen3-q8_0", "qwen3-q4_0", "qwen3-q4_k_m", "qwen3-q6_k"} {
		t.Run(name, func(t *testing.T) {
			if _, err := engine.Load(filepath.Join(d, name+".gguf"), engine.Options{Threads: 1}); err != nil && strings.Contains(err.Error(), "not supported yet") {
				t.Skip(err)
			}
			worst := checkLogits(t, filepath.Join(d, name+".gguf"), r.InputIDs, readF32(t, filepath.Join(d, name+".ref_logits.f32")))
			t.Logf("%s: max relative L2 error %.3g", name, worst)
		})
	}
}
