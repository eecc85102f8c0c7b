package synth

import (
	"math"
	"slices"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

func TestTinyModel(t *testing.T) {
	cfg, err := Config("tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []Quant{BF16, F32, Q8_0, Q4_0, MLX4, MLX8} {
		m, err := New(cfg, q, 7, 0)
		if err != nil {
			t.Fatal(err)
		}
		const name = "model.layers.1.mlp.down_proj.weight"
		h, err := m.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if h.Rows() != cfg.HiddenSize || h.Cols() != cfg.IntermediateSize {
			t.Fatalf("%s %s: shape %v", q, name, h.Shape)
		}
		if got := len(h.Data); q != MLX4 && q != MLX8 && got != m.Bytes(name) {
			t.Errorf("%s: %d bytes, Bytes says %d", q, got, m.Bytes(name))
		}
		v, err := h.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		var s, s2 float64
		for _, x := range v {
			s += float64(x)
			s2 += float64(x) * float64(x)
		}
		n := float64(len(v))
		std, want := math.Sqrt(s2/n-(s/n)*(s/n)), 1/math.Sqrt(float64(cfg.IntermediateSize))
		if math.Abs(std-want) > 0.1*want {
			t.Errorf("%s: std %.4g, want %.4g ± 10%%", q, std, want)
		}
		again, _ := m.Tensor(name)
		if string(again.Data) != string(h.Data) {
			t.Errorf("%s: two calls gave different weights (not seeded)", q)
		}
		norm, _ := m.Tensor("model.norm.weight")
		if norm.Format != tensor.F32 || len(norm.Data) != 4*cfg.HiddenSize {
			t.Errorf("%s: norm %v %d bytes", q, norm.Format, len(norm.Data))
		}
	}
	if _, err := Config("nope"); err == nil {
		t.Error("unknown shape accepted")
	}
}

func TestShapesDescribeRealModels(t *testing.T) {
	for _, c := range []struct {
		shape  string
		params float64 // billions, approximately (without vision towers)
	}{{"qwen3-0.6b", 0.6}, {"qwen3-8b", 8.2}, {"qwen3-30b-a3b", 30.5}, {"qwen3.6-35b-a3b", 35}, {"qwen3-next-80b-a3b", 80}} {
		cfg, err := Config(c.shape)
		if err != nil {
			t.Fatal(err)
		}
		m, err := New(cfg, BF16, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, name := range m.Names() {
			p := 1
			for _, d := range m.Shape(name) {
				p *= d
			}
			n += float64(p)
		}
		if n/1e9 < 0.85*c.params || n/1e9 > 1.15*c.params {
			t.Errorf("%s: %.2fB parameters, want about %.1fB", c.shape, n/1e9, c.params)
		}
	}
}

// TestQwen3NextFusedProjections: the qwen3-next shape has the published
// checkpoints' fused linear-attention projections (in_proj_qkvz, in_proj_ba:
// what llama.cpp's qwen3next loader takes as attn_qkv + attn_gate and
// ssm_ba), not Qwen3.5's separate ones, and 512 experts + a shared one.
func TestQwen3NextFusedProjections(t *testing.T) {
	cfg, err := Config("qwen3-next-80b-a3b")
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, Q8_0, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	l := "model.layers.0.linear_attn."
	for name, want := range map[string][]int{
		l + "in_proj_qkvz.weight":                       {2*16*128 + 2*32*128, 2048},
		l + "in_proj_ba.weight":                         {2 * 32, 2048},
		"model.layers.3.self_attn.q_proj.weight":        {2 * 16 * 256, 2048},
		"model.layers.0.mlp.gate.weight":                {512, 2048},
		"model.layers.0.mlp.experts.511.up_proj.weight": {512, 2048},
		"model.layers.0.mlp.shared_expert_gate.weight":  {1, 2048},
	} {
		if got := m.Shape(name); !slices.Equal(got, want) {
			t.Errorf("%s: shape %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{l + "in_proj_qkv.weight", l + "in_proj_b.weight", "model.layers.3.linear_attn.in_proj_ba.weight"} {
		if m.Shape(name) != nil {
			t.Errorf("%s present", name)
		}
	}
	if cfg.NumExpertsPerTok != 10 || cfg.ModelType != "qwen3_next" || len(cfg.LayerTypes) != 48 || cfg.LayerTypes[3] != "full_attention" {
		t.Errorf("config: %d experts per token, type %s, layer types %v", cfg.NumExpertsPerTok, cfg.ModelType, cfg.LayerTypes)
	}
}
