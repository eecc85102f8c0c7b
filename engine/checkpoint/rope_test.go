package checkpoint

import (
	"strings"
	"testing"
)

func TestRopeScalingParse(t *testing.T) {
	textCfg := `"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 128,
		"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "head_dim": 16,
		"linear_conv_kernel_dim": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8, "linear_num_key_heads": 2,
		"linear_num_value_heads": 4, "max_position_embeddings": 262144,
		"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 65536, "rope_theta": 1e7,
		"partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10]}}`
	for _, tc := range []struct {
		name, json string
		want       RopeScaling
		field      string
	}{
		{"none", `{` + baseConfig + `}`, RopeScaling{}, "rope_scaling"},
		{"null", `{` + baseConfig + `, "rope_scaling": null}`, RopeScaling{}, "rope_scaling"},
		{"default", `{` + baseConfig + `, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}`, RopeScaling{}, "rope_scaling"},
		{"mrope", `{` + baseConfig + `, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}`, RopeScaling{}, "rope_scaling"},
		{"qwen card (4.x)", `{` + baseConfig + `, "max_position_embeddings": 40960, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}`,
			RopeScaling{Type: RopeYaRN, Factor: 4, OriginalMaxPositionEmbeddings: 32768}, "rope_scaling"},
		{"qwen2.5 card (type)", `{` + baseConfig + `, "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}}`,
			RopeScaling{Type: RopeYaRN, Factor: 4, OriginalMaxPositionEmbeddings: 32768}, "rope_scaling"},
		{"transformers 5", `{` + baseConfig + `, "max_position_embeddings": 4096, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 2, "beta_fast": 16, "beta_slow": 2, "mscale": 1, "mscale_all_dim": 0.5, "attention_factor": 1.1, "truncate": false}}`,
			RopeScaling{Type: RopeYaRN, Factor: 2, OriginalMaxPositionEmbeddings: 4096, BetaFast: 16, BetaSlow: 2, MScale: 1, MScaleAllDim: 0.5, AttentionFactor: 1.1, NoTruncate: true}, "rope_parameters"},
		{"yarn factor from ratio", `{` + baseConfig + `, "max_position_embeddings": 131072, "rope_parameters": {"rope_type": "yarn", "original_max_position_embeddings": 32768}}`,
			RopeScaling{Type: RopeYaRN, Factor: 4, OriginalMaxPositionEmbeddings: 32768}, "rope_parameters"},
		{"both agree", `{` + baseConfig + `, "rope_scaling": {"type": "linear", "factor": 3}, "rope_parameters": {"rope_type": "linear", "factor": 2}}`,
			RopeScaling{Type: RopeLinear, Factor: 2}, "rope_parameters"},
		{"legacy under default params", `{` + baseConfig + `, "rope_scaling": {"type": "linear", "factor": 3}, "rope_parameters": {"rope_type": "default"}}`,
			RopeScaling{Type: RopeLinear, Factor: 3}, "rope_scaling"},
		{"text_config", `{` + textCfg + `}`, RopeScaling{Type: RopeYaRN, Factor: 4, OriginalMaxPositionEmbeddings: 65536}, "text_config.rope_parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("config.json", []byte(tc.json), nil)
			if err != nil {
				t.Fatal(err)
			}
			got := c.RopeScaling
			if got.Field() != tc.field {
				t.Errorf("field %q, want %q", got.Field(), tc.field)
			}
			got.at = ""
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	c, err := ParseConfig("config.json", []byte(`{`+textCfg+`}`), nil)
	if err != nil || c.RopeTheta != 1e7 || c.PartialRotaryFactor != 0.25 {
		t.Errorf("text_config rope_theta/partial: %v %+v", err, c)
	}
}

func TestRopeScalingErrors(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       []string
	}{
		{"llama3", `"rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1}`, []string{"field rope_scaling.rope_type", `"llama3"`, "not supported"}},
		{"longrope v5", `"rope_parameters": {"rope_type": "longrope", "long_factor": [1]}`, []string{"field rope_parameters.rope_type", `"longrope"`}},
		{"dynamic", `"rope_scaling": {"type": "dynamic", "factor": 2}`, []string{"field rope_scaling.type", `"dynamic"`}},
		{"conflict", `"rope_scaling": {"type": "linear", "factor": 2}, "rope_parameters": {"rope_type": "yarn", "factor": 2}`, []string{"rope_scaling.type", "conflicts", "rope_parameters.rope_type"}},
		{"linear no factor", `"rope_scaling": {"type": "linear"}`, []string{"rope_scaling.factor", "missing"}},
		{"factor below 1", `"rope_scaling": {"type": "yarn", "factor": 0.5}`, []string{"rope_scaling.factor", "0.5"}},
		{"factor string", `"rope_scaling": {"type": "yarn", "factor": "4"}`, []string{"rope_scaling.factor", "number"}},
		{"original string", `"rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": "big"}`, []string{"rope_scaling.original_max_position_embeddings", "integer"}},
		{"original zero", `"rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 0}`, []string{"rope_scaling.original_max_position_embeddings", "positive"}},
		{"attention_factor zero", `"rope_scaling": {"type": "yarn", "factor": 4, "attention_factor": 0}`, []string{"rope_scaling.attention_factor", "positive"}},
		{"beta negative", `"rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 64, "beta_fast": -3}`, []string{"rope_scaling.beta_fast"}},
		{"truncate string", `"rope_scaling": {"type": "yarn", "factor": 4, "truncate": "no"}`, []string{"rope_scaling.truncate", "true or false"}},
		{"type number", `"rope_scaling": {"type": 3}`, []string{"rope_scaling.type", "string"}},
		{"not object", `"rope_scaling": "yarn"`, []string{"rope_scaling", "object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("dir/config.json", []byte(`{`+baseConfig+`, `+tc.json+`}`), nil)
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
	// Validate on a hand-built config names the field too.
	c := &Config{RopeScaling: RopeScaling{Type: "llama3"}}
	if err := c.RopeScaling.Validate(); err == nil || !strings.Contains(err.Error(), "rope_scaling.rope_type") {
		t.Errorf("Validate: %v", err)
	}
}

func TestContextLength(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want int
	}{
		{Config{MaxPositionEmbeddings: 40960}, 40960},
		{Config{MaxPositionEmbeddings: 40960, RopeScaling: RopeScaling{Type: RopeYaRN, Factor: 4, OriginalMaxPositionEmbeddings: 32768}}, 131072},
		{Config{MaxPositionEmbeddings: 262144, RopeScaling: RopeScaling{Type: RopeYaRN, Factor: 2, OriginalMaxPositionEmbeddings: 32768}}, 262144},
		{Config{MaxPositionEmbeddings: 4096, RopeScaling: RopeScaling{Type: RopeLinear, Factor: 4}}, 4096},
	} {
		if got := tc.c.ContextLength(); got != tc.want {
			t.Errorf("%+v: context %d, want %d", tc.c.RopeScaling, got, tc.want)
		}
	}
}
