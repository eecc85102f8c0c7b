package checkpoint

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func readConfig(t *testing.T, name string) *Config {
	t.Helper()
	p := filepath.Join("testdata/configs", name+".json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := os.ReadFile(filepath.Join("testdata/configs", name+".generation.json"))
	c, err := ParseConfig(p, data, gen)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func everyNth(n, layers int) []string {
	out := make([]string, layers)
	for i := range out {
		out[i] = LinearAttention
		if (i+1)%n == 0 {
			out[i] = FullAttention
		}
	}
	return out
}

func allFull(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = FullAttention
	}
	return out
}

// TestPublishedConfigs parses configs transcribed from published
// checkpoints (transformers 4.x keys, nested text_config, mrope parameters).
func TestPublishedConfigs(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Config
	}{
		{"qwen3-30b-a3b", Config{ModelType: "qwen3_moe", HiddenSize: 2048, IntermediateSize: 6144, NumHiddenLayers: 48,
			NumAttentionHeads: 32, NumKeyValueHeads: 4, HeadDim: 128, VocabSize: 151936, MaxPositionEmbeddings: 40960,
			RMSNormEps: 1e-6, RopeTheta: 1e6, PartialRotaryFactor: 1, LayerTypes: allFull(48),
			BOSTokenID: 151643, EOSTokenIDs: []int{151645, 151643},
			NumExperts: 128, NumExpertsPerTok: 8, MoEIntermediateSize: 768, DecoderSparseStep: 1, NormTopKProb: true, MLPOnlyLayers: []int{}}},
		{"qwen3-0.6b", Config{ModelType: "qwen3", HiddenSize: 1024, IntermediateSize: 3072, NumHiddenLayers: 28,
			NumAttentionHeads: 16, NumKeyValueHeads: 8, HeadDim: 128, VocabSize: 151936, MaxPositionEmbeddings: 40960,
			RMSNormEps: 1e-6, RopeTheta: 1e6, PartialRotaryFactor: 1, TieWordEmbeddings: true, LayerTypes: allFull(28),
			BOSTokenID: 151643, EOSTokenIDs: []int{151645}}},
		{"qwen2.5-7b-instruct", Config{ModelType: "qwen2", HiddenSize: 3584, IntermediateSize: 18944, NumHiddenLayers: 28,
			NumAttentionHeads: 28, NumKeyValueHeads: 4, HeadDim: 128, VocabSize: 152064, MaxPositionEmbeddings: 32768,
			RMSNormEps: 1e-6, RopeTheta: 1e6, PartialRotaryFactor: 1, AttentionBias: true, LayerTypes: allFull(28),
			BOSTokenID: 151643, EOSTokenIDs: []int{151645}}},
		{"qwen3-next-80b-a3b-instruct", Config{ModelType: "qwen3_next", HiddenSize: 2048, IntermediateSize: 5120, NumHiddenLayers: 48,
			NumAttentionHeads: 16, NumKeyValueHeads: 2, HeadDim: 256, VocabSize: 151936, MaxPositionEmbeddings: 262144,
			RMSNormEps: 1e-6, RopeTheta: 1e7, PartialRotaryFactor: 0.25, LayerTypes: everyNth(4, 48),
			BOSTokenID: 151643, EOSTokenIDs: []int{151645},
			NumExperts: 512, NumExpertsPerTok: 10, MoEIntermediateSize: 512, SharedExpertIntermediateSize: 512, DecoderSparseStep: 1,
			NormTopKProb: true, MLPOnlyLayers: []int{},
			LinearConvKernelDim: 4, LinearKeyHeadDim: 128, LinearValueHeadDim: 128, LinearNumKeyHeads: 16, LinearNumValueHeads: 32}},
		{"qwen3.6-35b-a3b", Config{ModelType: "qwen3_5_moe_text", HiddenSize: 2048, NumHiddenLayers: 40,
			NumAttentionHeads: 16, NumKeyValueHeads: 2, HeadDim: 256, VocabSize: 248320, MaxPositionEmbeddings: 262144,
			RMSNormEps: 1e-6, RopeTheta: 1e7, PartialRotaryFactor: 0.25, LayerTypes: everyNth(4, 40),
			BOSTokenID: -1, EOSTokenIDs: []int{248044},
			NumExperts: 256, NumExpertsPerTok: 8, MoEIntermediateSize: 512, SharedExpertIntermediateSize: 512, DecoderSparseStep: 1,
			NormTopKProb:        true,
			LinearConvKernelDim: 4, LinearKeyHeadDim: 128, LinearValueHeadDim: 128, LinearNumKeyHeads: 16, LinearNumValueHeads: 32}},
		{"qwen3.5-9b", Config{ModelType: "qwen3_5_text", HiddenSize: 4096, IntermediateSize: 12288, NumHiddenLayers: 32,
			NumAttentionHeads: 16, NumKeyValueHeads: 4, HeadDim: 256, VocabSize: 248320, MaxPositionEmbeddings: 262144,
			RMSNormEps: 1e-6, RopeTheta: 1e7, PartialRotaryFactor: 0.25, LayerTypes: everyNth(4, 32),
			BOSTokenID: -1, EOSTokenIDs: []int{248044},
			LinearConvKernelDim: 4, LinearKeyHeadDim: 128, LinearValueHeadDim: 128, LinearNumKeyHeads: 16, LinearNumValueHeads: 32}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got := readConfig(t, tc.file)
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

func TestIsMoELayer(t *testing.T) {
	c := &Config{NumExperts: 4, DecoderSparseStep: 2, MLPOnlyLayers: []int{3}}
	var got []bool
	for i := 0; i < 6; i++ {
		got = append(got, c.IsMoELayer(i))
	}
	if want := []bool{false, true, false, false, false, true}; !reflect.DeepEqual(got, want) {
		t.Errorf("IsMoELayer: got %v, want %v", got, want)
	}
	if (&Config{}).IsMoELayer(0) {
		t.Errorf("dense config has a MoE layer")
	}
}

// baseConfig is a valid qwen3 config as a JSON object body to edit.
const baseConfig = `"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
	"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "rope_theta": 10000`

func TestConfigSpellings(t *testing.T) {
	for _, tc := range []struct {
		name, json, gen string
		check           func(c *Config) string
	}{
		{"head_dim default", `{` + baseConfig + `}`, "", func(c *Config) string {
			if c.HeadDim != 16 || c.NumKeyValueHeads != 2 || c.BOSTokenID != -1 || c.PartialRotaryFactor != 1 {
				return "head_dim/kv/bos/prf defaults"
			}
			return ""
		}},
		{"kv heads default", `{"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}`, "", func(c *Config) string {
			if c.NumKeyValueHeads != 4 || c.RopeTheta != 10000 {
				return "kv heads default to heads, theta to 10000"
			}
			return ""
		}},
		{"rope_parameters", `{` + baseConfig[:strings.Index(baseConfig, `, "rope_theta"`)] + `, "rope_parameters": {"rope_theta": 5e6, "partial_rotary_factor": 0.5}}`, "", func(c *Config) string {
			if c.RopeTheta != 5e6 || c.PartialRotaryFactor != 0.5 || c.RotaryDim() != 8 {
				return "theta/prf from rope_parameters"
			}
			return ""
		}},
		{"eos list merged", `{` + baseConfig + `, "eos_token_id": [5, 6], "bos_token_id": 1}`, `{"eos_token_id": [6, 7]}`, func(c *Config) string {
			if !reflect.DeepEqual(c.EOSTokenIDs, []int{5, 6, 7}) || c.BOSTokenID != 1 {
				return "eos [5 6 7], bos 1"
			}
			return ""
		}},
		{"eos from generation only", `{` + baseConfig + `, "eos_token_id": null}`, `{"eos_token_id": 9, "bos_token_id": 3}`, func(c *Config) string {
			if !reflect.DeepEqual(c.EOSTokenIDs, []int{9}) || c.BOSTokenID != 3 {
				return "eos [9], bos 3"
			}
			return ""
		}},
		{"num_local_experts", `{` + strings.Replace(baseConfig, `"qwen3"`, `"qwen3_moe"`, 1) + `, "num_local_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}`, "", func(c *Config) string {
			if c.NumExperts != 8 || c.DecoderSparseStep != 1 || c.NormTopKProb || !c.IsMoELayer(1) {
				return "experts 8, step 1, norm_topk_prob default false for qwen3_moe"
			}
			return ""
		}},
		{"integral float", `{` + baseConfig + `, "max_position_embeddings": 4096.0}`, "", func(c *Config) string {
			if c.MaxPositionEmbeddings != 4096 {
				return "4096.0 read as 4096"
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gen []byte
			if tc.gen != "" {
				gen = []byte(tc.gen)
			}
			c, err := ParseConfig("config.json", []byte(tc.json), gen)
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(c); msg != "" {
				t.Errorf("want %s; got %+v", msg, *c)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	next := `"model_type": "qwen3_next", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
		"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "num_experts": 4, "num_experts_per_tok": 2,
		"moe_intermediate_size": 32, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
		"linear_num_key_heads": 2, "linear_num_value_heads": 4, "partial_rotary_factor": 0.25`
	for _, tc := range []struct {
		name, json, gen string
		want            []string
	}{
		{"invalid JSON", `{"model_type": `, "", []string{"invalid JSON"}},
		{"not object", `[1]`, "", []string{"invalid JSON"}},
		{"no model_type", `{"hidden_size": 4}`, "", []string{"model_type", "missing"}},
		{"unknown model_type", `{"model_type": "llama", "hidden_size": 4}`, "", []string{"model_type", `"llama"`}},
		{"missing hidden_size", `{` + strings.Replace(baseConfig, `"hidden_size": 64,`, ``, 1) + `}`, "", []string{"hidden_size", "missing"}},
		{"missing layers", `{` + strings.Replace(baseConfig, `"num_hidden_layers": 2,`, ``, 1) + `}`, "", []string{"num_hidden_layers"}},
		{"zero heads", `{` + strings.Replace(baseConfig, `"num_attention_heads": 4`, `"num_attention_heads": 0`, 1) + `}`, "", []string{"num_attention_heads"}},
		{"missing vocab", `{` + strings.Replace(baseConfig, `"vocab_size": 100,`, ``, 1) + `}`, "", []string{"vocab_size"}},
		{"missing intermediate", `{` + strings.Replace(baseConfig, `"intermediate_size": 128,`, ``, 1) + `}`, "", []string{"intermediate_size"}},
		{"kv not dividing", `{` + strings.Replace(baseConfig, `"num_key_value_heads": 2`, `"num_key_value_heads": 3`, 1) + `}`, "", []string{"num_key_value_heads", "does not divide"}},
		{"string number", `{` + baseConfig + `, "max_position_embeddings": "4096"}`, "", []string{"max_position_embeddings", "integer"}},
		{"fractional int", `{` + baseConfig + `, "max_position_embeddings": 40.5}`, "", []string{"max_position_embeddings", "integer"}},
		{"layer_types length", `{` + baseConfig + `, "layer_types": ["full_attention"]}`, "", []string{"layer_types", "1 entries"}},
		{"layer_types value", `{` + baseConfig + `, "layer_types": ["full_attention", "sliding_attention"]}`, "", []string{"layer_types[1]", "sliding_attention"}},
		{"linear in dense", `{` + baseConfig + `, "layer_types": ["full_attention", "linear_attention"]}`, "", []string{"layer_types[1]", "qwen3"}},
		{"bad eos", `{` + baseConfig + `, "eos_token_id": "x"}`, "", []string{"eos_token_id"}},
		{"bad generation eos", `{` + baseConfig + `}`, `{"eos_token_id": [1, "x"]}`, []string{"generation_config.json", "eos_token_id"}},
		{"generation JSON", `{` + baseConfig + `}`, `{`, []string{"generation_config.json", "invalid JSON"}},
		{"longrope", `{` + baseConfig + `, "rope_scaling": {"type": "longrope", "factor": 4}}`, "", []string{"rope_scaling.type", "longrope", "not supported"}},
		{"prf range", `{` + baseConfig + `, "partial_rotary_factor": 1.5}`, "", []string{"partial_rotary_factor"}},
		{"moe without experts", `{` + strings.Replace(baseConfig, `"qwen3"`, `"qwen3_moe"`, 1) + `}`, "", []string{"num_experts"}},
		{"top-k too big", `{` + strings.Replace(baseConfig, `"qwen3"`, `"qwen3_moe"`, 1) + `, "num_experts": 2, "num_experts_per_tok": 3, "moe_intermediate_size": 8}`, "", []string{"num_experts_per_tok"}},
		{"moe width", `{` + strings.Replace(baseConfig, `"qwen3"`, `"qwen3_moe"`, 1) + `, "num_experts": 2, "num_experts_per_tok": 1}`, "", []string{"moe_intermediate_size"}},
		{"mlp_only out of range", `{` + strings.Replace(baseConfig, `"qwen3"`, `"qwen3_moe"`, 1) + `, "num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 8, "mlp_only_layers": [7]}`, "", []string{"mlp_only_layers"}},
		{"next ok", `{` + next + `}`, "", nil},
		{"next missing linear", `{` + strings.Replace(next, `"linear_key_head_dim": 8,`, ``, 1) + `}`, "", []string{"linear_key_head_dim"}},
		{"next interval", `{` + next + `, "full_attention_interval": 0}`, "", []string{"full_attention_interval"}},
		{"text_config field named", `{"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_text", "hidden_size": "big"}}`, "", []string{"text_config.hidden_size"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gen []byte
			if tc.gen != "" {
				gen = []byte(tc.gen)
			}
			_, err := ParseConfig("dir/config.json", []byte(tc.json), gen)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			for _, w := range append(tc.want, "dir/config.json") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
