package gguf

import (
	"reflect"
	"strings"
	"testing"
)

// TestRopeScalingMetadata reads ARCH.rope.scaling.* as llama.cpp's converter
// writes it (and the older rope.scale_linear) into Config.RopeScaling, and
// refuses scalings that would compute something else than transformers.
func TestRopeScalingMetadata(t *testing.T) {
	type kv = [2]any
	cases := []struct {
		name string
		meta []kv
		want RopeScaling
		err  string
	}{
		{"none", nil, RopeScaling{}, ""},
		{"type none", []kv{{"type", "none"}, {"factor", float32(4)}}, RopeScaling{}, ""},
		{"yarn qwen card", []kv{{"type", "yarn"}, {"factor", float32(4)}, {"original_context_length", uint32(32768)}},
			RopeScaling{Type: "yarn", Factor: 4, OriginalContextLength: 32768}, ""},
		{"yarn all keys", []kv{{"type", "yarn"}, {"factor", float32(2.5)}, {"original_context_length", uint32(64)},
			{"yarn_attn_factor", float32(0.8)}, {"yarn_beta_fast", float32(16)}, {"yarn_beta_slow", float32(2)},
			{"yarn_ext_factor", float32(1)}, {"yarn_log_multiplier", float32(0)}, {"finetuned", true}},
			RopeScaling{Type: "yarn", Factor: 2.5, OriginalContextLength: 64, AttentionFactor: 0.8, BetaFast: 16, BetaSlow: 2}, ""},
		{"yarn without original", []kv{{"type", "yarn"}, {"factor", float32(4)}},
			RopeScaling{Type: "yarn", Factor: 4, OriginalContextLength: 128}, ""},
		{"linear", []kv{{"type", "linear"}, {"factor", float32(4)}}, RopeScaling{Type: "linear", Factor: 4}, ""},
		{"factor without type", []kv{{"factor", float32(2)}}, RopeScaling{Type: "linear", Factor: 2}, ""},
		{"factor 1 without type", []kv{{"factor", float32(1)}}, RopeScaling{}, ""},
		{"longrope", []kv{{"type", "longrope"}}, RopeScaling{}, `qwen3.rope.scaling.type "longrope" is not supported`},
		{"type not string", []kv{{"type", uint32(2)}}, RopeScaling{}, "qwen3.rope.scaling.type is not a string"},
		{"no factor", []kv{{"type", "yarn"}}, RopeScaling{}, "qwen3.rope.scaling.factor missing"},
		{"small factor", []kv{{"type", "linear"}, {"factor", float32(0.5)}}, RopeScaling{}, "qwen3.rope.scaling.factor 0.5 must be >= 1"},
		{"factor not number", []kv{{"type", "yarn"}, {"factor", "4"}}, RopeScaling{}, "qwen3.rope.scaling.factor is not a finite number"},
		{"bad original", []kv{{"type", "yarn"}, {"factor", float32(4)}, {"original_context_length", int32(-5)}}, RopeScaling{}, "original_context_length is not a positive integer"},
		{"ext factor", []kv{{"type", "yarn"}, {"factor", float32(4)}, {"yarn_ext_factor", float32(0.5)}}, RopeScaling{}, "yarn_ext_factor 0.5 is not supported"},
		{"log multiplier", []kv{{"type", "yarn"}, {"factor", float32(4)}, {"yarn_log_multiplier", float32(0.1)}}, RopeScaling{}, "yarn_log_multiplier 0.1 is not supported"},
		{"negative beta", []kv{{"type", "yarn"}, {"factor", float32(4)}, {"yarn_beta_fast", float32(-1)}}, RopeScaling{}, "yarn_beta_fast -1 must be positive"},
		{"attn_factor", []kv{{"type", "linear"}, {"factor", float32(4)}, {"attn_factor", float32(2)}}, RopeScaling{}, "qwen3.rope.scaling.attn_factor 2 is not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := denseQwen3()
			for _, m := range c.meta {
				w.add("qwen3.rope.scaling."+m[0].(string), m[1])
			}
			f, err := Parse("m.gguf", w.bytes())
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := f.Config()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.RopeScaling, c.want) {
				t.Errorf("rope scaling: got %+v, want %+v", cfg.RopeScaling, c.want)
			}
		})
	}
	t.Run("scale_linear", func(t *testing.T) {
		w := denseQwen3()
		w.add("qwen3.rope.scale_linear", float32(8))
		f, err := Parse("m.gguf", w.bytes())
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := f.Config()
		if err != nil {
			t.Fatal(err)
		}
		if want := (RopeScaling{Type: "linear", Factor: 8}); cfg.RopeScaling != want {
			t.Errorf("rope scaling: got %+v, want %+v", cfg.RopeScaling, want)
		}
	})
}

// TestRopeScalingWriteRoundTrip: DenseMeta writes a scaling that Config reads
// back unchanged.
func TestRopeScalingWriteRoundTrip(t *testing.T) {
	for _, s := range []RopeScaling{
		{Type: "yarn", Factor: 4, OriginalContextLength: 32},
		{Type: "yarn", Factor: 2.5, OriginalContextLength: 64, AttentionFactor: 0.8, BetaFast: 16, BetaSlow: 2},
		{Type: "linear", Factor: 4},
	} {
		c := &Config{ModelType: "qwen3", HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 1,
			NumAttentionHeads: 2, NumKeyValueHeads: 1, HeadDim: 16, MaxPositionEmbeddings: 128,
			RMSNormEps: 1e-6, RopeTheta: 1e6, RopeScaling: s}
		meta, err := DenseMeta(c)
		if err != nil {
			t.Fatal(err)
		}
		w := newBuilder()
		for _, m := range meta {
			w.add(m.Key, m.Value)
		}
		addDenseTensors(w)
		f, err := Parse("m.gguf", w.bytes())
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := f.Config()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.RopeScaling != s {
			t.Errorf("rope scaling: wrote %+v, read %+v", s, cfg.RopeScaling)
		}
	}
}

// denseQwen3 is a complete one-layer qwen3 file (hidden 32, 2 heads of 16,
// context 128) without rope scaling keys.
func denseQwen3() *builder {
	w := newBuilder()
	w.add("general.architecture", "qwen3")
	w.add("qwen3.block_count", uint32(1))
	w.add("qwen3.context_length", uint32(128))
	w.add("qwen3.embedding_length", uint32(32))
	w.add("qwen3.feed_forward_length", uint32(64))
	w.add("qwen3.attention.head_count", uint32(2))
	w.add("qwen3.attention.head_count_kv", uint32(1))
	w.add("qwen3.attention.key_length", uint32(16))
	w.add("qwen3.rope.freq_base", float32(1e6))
	w.add("qwen3.attention.layer_norm_rms_epsilon", float32(1e-6))
	addDenseTensors(w)
	return w
}

func addDenseTensors(w *builder) {
	z := func(n int) []byte { return make([]byte, 4*n) }
	w.tensor("token_embd.weight", TypeF32, []uint64{32, 8}, z(32*8))
	w.tensor("output_norm.weight", TypeF32, []uint64{32}, z(32))
	w.tensor("blk.0.attn_norm.weight", TypeF32, []uint64{32}, z(32))
	w.tensor("blk.0.ffn_norm.weight", TypeF32, []uint64{32}, z(32))
	w.tensor("blk.0.attn_q.weight", TypeF32, []uint64{32, 32}, z(32*32))
	w.tensor("blk.0.attn_k.weight", TypeF32, []uint64{32, 16}, z(32*16))
	w.tensor("blk.0.attn_v.weight", TypeF32, []uint64{32, 16}, z(32*16))
	w.tensor("blk.0.attn_output.weight", TypeF32, []uint64{32, 32}, z(32*32))
	w.tensor("blk.0.attn_q_norm.weight", TypeF32, []uint64{16}, z(16))
	w.tensor("blk.0.attn_k_norm.weight", TypeF32, []uint64{16}, z(16))
	w.tensor("blk.0.ffn_gate.weight", TypeF32, []uint64{32, 64}, z(32*64))
	w.tensor("blk.0.ffn_up.weight", TypeF32, []uint64{32, 64}, z(32*64))
	w.tensor("blk.0.ffn_down.weight", TypeF32, []uint64{64, 32}, z(64*32))
}
