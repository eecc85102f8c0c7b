package engine_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
)

// ropeCase is one table of testdata/rope/inv_freq.json: the inverse
// frequencies and attention factor transformers 5.17 holds for a config.
type ropeCase struct {
	Name            string         `json:"name"`
	HeadDim         int            `json:"head_dim"`
	Partial         float64        `json:"partial_rotary_factor"`
	Theta           float64        `json:"rope_theta"`
	MaxPos          int            `json:"max_position_embeddings"`
	Params          map[string]any `json:"params"`
	InvFreq         []float64      `json:"inv_freq"`
	AttentionFactor float64        `json:"attention_factor"`
	Error           string         `json:"error"`
}

// TestRopeFrequenciesMatchTransformers parses each case's rope parameters
// through checkpoint.ParseConfig (as rope_parameters and as legacy
// rope_scaling) and compares engine.NewRopeParams with transformers' table.
func TestRopeFrequenciesMatchTransformers(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "testdata", "rope", "inv_freq.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []ropeCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) < 10 {
		t.Fatalf("%d cases, want at least 10", len(ref.Cases))
	}
	for _, rc := range ref.Cases {
		for _, key := range []string{"rope_parameters", "rope_scaling"} {
			t.Run(rc.Name+"/"+key, func(t *testing.T) {
				if rc.Error != "" {
					t.Fatalf("reference failed: %s", rc.Error)
				}
				params := map[string]any{}
				for k, v := range rc.Params {
					params[k] = v
				}
				cfg := map[string]any{
					"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
					"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": rc.HeadDim, "vocab_size": 16,
					"max_position_embeddings": rc.MaxPos, "rope_theta": rc.Theta, "partial_rotary_factor": rc.Partial,
					key: params,
				}
				if key == "rope_scaling" { // 4.x spelling: "type"
					params["type"] = params["rope_type"]
					delete(params, "rope_type")
				}
				js, _ := json.Marshal(cfg)
				c, err := checkpoint.ParseConfig("config.json", js, nil)
				if err != nil {
					t.Fatal(err)
				}
				p, err := engine.NewRopeParams(c, c.HeadDim, c.RotaryDim())
				if err != nil {
					t.Fatal(err)
				}
				inv, af := p.Tables()
				if len(inv) != len(rc.InvFreq) {
					t.Fatalf("%d frequencies, want %d", len(inv), len(rc.InvFreq))
				}
				worst := 0.0
				for i, w := range rc.InvFreq {
					worst = max(worst, math.Abs(float64(inv[i])-w)/w)
				}
				t.Logf("worst relative error %.3g, attention factor %v", worst, af)
				// float32 tables: equal up to the last bit of pow.
				if worst > 2.5e-7 {
					t.Errorf("inverse frequencies: worst relative error %.3g\n got %v\nwant %v", worst, inv, rc.InvFreq)
				}
				if math.Abs(float64(af)-rc.AttentionFactor) > 1e-7*rc.AttentionFactor {
					t.Errorf("attention factor %v, want %v", af, rc.AttentionFactor)
				}
			})
		}
	}
}

func TestRopeFrequenciesErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    checkpoint.RopeScaling
		want string
	}{
		{"unknown", checkpoint.RopeScaling{Type: "llama3", Factor: 8}, `rope_scaling.rope_type: "llama3" is not supported`},
		{"factor", checkpoint.RopeScaling{Type: "linear", Factor: 0.5}, "rope_scaling.factor"},
		{"nan factor", checkpoint.RopeScaling{Type: "yarn", Factor: math.NaN(), OriginalMaxPositionEmbeddings: 32}, "rope_scaling.factor"},
		{"original", checkpoint.RopeScaling{Type: "yarn", Factor: 4}, "rope_scaling.original_max_position_embeddings"},
		{"beta", checkpoint.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 32, BetaFast: -1}, "rope_scaling.beta_fast"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := engine.RopeFrequencies(1e6, 64, tc.s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
	if _, _, err := engine.RopeFrequencies(1e6, 63, checkpoint.RopeScaling{}); err == nil {
		t.Fatal("odd rotary dim accepted")
	}
}
