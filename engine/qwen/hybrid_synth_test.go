package qwen_test

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/cpu"
	"github.com/macpool/macpool/engine/tensor"
)

// synthetic is a checkpoint with every tensor cfg implies, random bf16 values
// (matrices ~ N(0, 1/fan_in), vectors ~ N(0, 0.1), norms of qwen3_moe around 1).
func synthetic(t testing.TB, cfg *checkpoint.Config, seed uint64) *checkpoint.Checkpoint {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	tensors := map[string]*tensor.Host{}
	for name, shape := range cfg.TensorShapes() {
		n, fanIn := 1, shape[len(shape)-1]
		for _, d := range shape {
			n *= d
		}
		std, mean := 1/math.Sqrt(float64(fanIn)), 0.0
		if len(shape) == 1 {
			std = 0.1
			if cfg.ModelType == "qwen3_moe" && strings.HasSuffix(name, "norm.weight") {
				mean = 1
			}
		}
		data := make([]byte, 2*n)
		for i := 0; i < n; i++ {
			v := tensor.F32ToBF16(float32(mean + std*r.NormFloat64()))
			data[2*i], data[2*i+1] = byte(v), byte(v>>8)
		}
		tensors[name] = &tensor.Host{Name: name, Format: tensor.BF16, Shape: shape, Data: data}
	}
	ck, err := checkpoint.New("synthetic", cfg, tensors, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

func smallNext() *checkpoint.Config {
	return &checkpoint.Config{
		ModelType: "qwen3_next", HiddenSize: 64, IntermediateSize: 96, NumHiddenLayers: 4,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, VocabSize: 256,
		MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, RopeTheta: 10000, PartialRotaryFactor: 0.25,
		BOSTokenID: -1,
		LayerTypes: []string{"linear_attention", "linear_attention", "full_attention", "linear_attention"},
		NumExperts: 6, NumExpertsPerTok: 2, MoEIntermediateSize: 32, SharedExpertIntermediateSize: 48,
		DecoderSparseStep: 1, NormTopKProb: true,
		LinearConvKernelDim: 4, LinearKeyHeadDim: 8, LinearValueHeadDim: 12,
		LinearNumKeyHeads: 2, LinearNumValueHeads: 6,
	}
}

// Layer mixes that the fixtures do not cover (dense layers between sparse ones through
// decoder_sparse_step and mlp_only_layers, three value heads per key head, no shared
// expert) load, and incremental decoding matches one pass.
func TestHybridSyntheticLayerMixes(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *checkpoint.Config)
	}{
		{"qwen3_next sparse step 2 + mlp_only_layers", func(c *checkpoint.Config) {
			c.DecoderSparseStep, c.MLPOnlyLayers = 2, []int{3}
		}},
		{"qwen3_next no shared expert, no renorm", func(c *checkpoint.Config) {
			c.SharedExpertIntermediateSize, c.NormTopKProb = 0, false
		}},
		{"qwen3_5_moe_text", func(c *checkpoint.Config) { c.ModelType, c.IntermediateSize = "qwen3_5_moe_text", 0 }},
		{"qwen3_5_text", func(c *checkpoint.Config) {
			c.ModelType, c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize, c.SharedExpertIntermediateSize = "qwen3_5_text", 0, 0, 0, 0
		}},
		{"qwen3_moe mlp_only_layers", func(c *checkpoint.Config) {
			c.ModelType, c.PartialRotaryFactor, c.SharedExpertIntermediateSize, c.MLPOnlyLayers = "qwen3_moe", 1, 0, []int{0}
			c.LayerTypes = []string{"full_attention", "full_attention", "full_attention", "full_attention"}
		}},
	}
	be, err := cpu.New(cpu.Config{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallNext()
			tc.modify(cfg)
			ck := synthetic(t, cfg, 1)
			m, err := engine.New(be, ck)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ids := randomIDs(11, 90, cfg.VocabSize)
			V := cfg.VocabSize
			whole := allLogits(t, m, newCache(t, m), ids)
			c := newCache(t, m)
			got := allLogits(t, m, c, ids[:66])
			for _, id := range ids[66:] {
				out, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: []int{id}}})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, out[0]...)
			}
			for p := range ids {
				if e := hybridRelL2(got[p*V:(p+1)*V], whole[p*V:(p+1)*V]); e > 1e-5 {
					t.Errorf("position %d: incremental vs one pass rel-L2 %.3g", p, e)
				}
			}
		})
	}
}

// BenchmarkHybridDecode times one decode step of a two-layer model with the layer sizes
// of Qwen3.6-35B-A3B (hidden 2048; Gated DeltaNet 16 key / 32 value heads of 128; gated
// attention 16 heads / 2 KV heads of 256; 8 of 32 experts of 512 + a shared one) after a
// 256-token prefill. Only 16 of its 256 experts exist here: decode cost does not depend on
// the expert count.
func BenchmarkHybridDecode(b *testing.B) {
	m := hybridBenchModel(b)
	c := newCache(b, m)
	ctx := context.Background()
	if _, err := m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: randomIDs(1, 256, m.VocabSize())}}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: []int{7}}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHybridResume times what a failover resume of the BenchmarkHybridDecode model
// costs: a 256-token prompt and 64 generated tokens prefilled in one call, the generated
// ones replayed as decode steps compute them (engine.Seq.PromptEnd: "resume"), against
// the same 320 tokens all as prompt rows ("prompt") and the uninterrupted run's prompt
// plus 64 decode steps ("decoded").
func BenchmarkHybridResume(b *testing.B) {
	m := hybridBenchModel(b)
	ids := randomIDs(1, 320, m.VocabSize())
	c := newCache(b, m)
	ctx := context.Background()
	fwd := func(s engine.Seq) {
		if _, err := m.Forward(ctx, []engine.Seq{s}); err != nil {
			b.Fatal(err)
		}
	}
	for _, mode := range []string{"prompt", "resume", "decoded"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				if err := c.Truncate(0); err != nil {
					b.Fatal(err)
				}
				switch mode {
				case "prompt":
					fwd(engine.Seq{Cache: c, Tokens: ids, PromptEnd: len(ids)})
				case "resume":
					fwd(engine.Seq{Cache: c, Tokens: ids, PromptEnd: 256})
				default:
					fwd(engine.Seq{Cache: c, Tokens: ids[:256], PromptEnd: 256})
					for i := 256; i < len(ids); i++ {
						fwd(engine.Seq{Cache: c, Tokens: ids[i : i+1], PromptEnd: 256})
					}
				}
			}
		})
	}
}

// hybridBenchModel is a two-layer model with the layer sizes of Qwen3.6-35B-A3B
// (BenchmarkHybridDecode).
func hybridBenchModel(b *testing.B) *engine.Model {
	cfg := &checkpoint.Config{
		ModelType: "qwen3_5_moe_text", HiddenSize: 2048, NumHiddenLayers: 2,
		NumAttentionHeads: 16, NumKeyValueHeads: 2, HeadDim: 256, VocabSize: 1024,
		MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, RopeTheta: 1e7, PartialRotaryFactor: 0.25,
		BOSTokenID: -1, LayerTypes: []string{"linear_attention", "full_attention"},
		NumExperts: 16, NumExpertsPerTok: 8, MoEIntermediateSize: 512, SharedExpertIntermediateSize: 512,
		DecoderSparseStep: 1, NormTopKProb: true,
		LinearConvKernelDim: 4, LinearKeyHeadDim: 128, LinearValueHeadDim: 128,
		LinearNumKeyHeads: 16, LinearNumValueHeads: 32,
	}
	ck := synthetic(b, cfg, 2)
	be, err := cpu.New(cpu.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	m, err := engine.New(be, ck)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}
