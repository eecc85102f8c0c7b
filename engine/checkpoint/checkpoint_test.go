package checkpoint

import (
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

const testdata = "../../testdata"

// wantConfig is the part of Config each fixture pins down.
type wantConfig struct {
	modelType               string
	hidden, inter, layers   int
	heads, kv, headDim      int
	vocab                   int
	theta, prf              float64
	tied, bias              bool
	layerTypes              []string
	experts, topK, moeInter int
	shared                  int
	normTopK                bool
	convK, nk, nv, dk, dv   int
}

var (
	full3  = []string{FullAttention, FullAttention, FullAttention}
	hybrid = []string{LinearAttention, LinearAttention, LinearAttention, FullAttention}
)

var fixtureConfigs = map[string]wantConfig{
	"hf/qwen2":       {modelType: "qwen2", hidden: 128, inter: 256, layers: 3, heads: 4, kv: 2, headDim: 32, vocab: 1024, theta: 1e6, prf: 1, bias: true, layerTypes: full3},
	"hf/qwen3":       {modelType: "qwen3", hidden: 128, inter: 256, layers: 3, heads: 4, kv: 2, headDim: 32, vocab: 1024, theta: 1e6, prf: 1, layerTypes: full3},
	"hf/qwen3_tied":  {modelType: "qwen3", hidden: 96, inter: 192, layers: 2, heads: 3, kv: 1, headDim: 32, vocab: 1024, theta: 1e4, prf: 1, tied: true, layerTypes: full3[:2]},
	"hf/qwen3_moe":   {modelType: "qwen3_moe", hidden: 128, inter: 256, layers: 3, heads: 4, kv: 2, headDim: 32, vocab: 1024, theta: 1e6, prf: 1, layerTypes: full3, experts: 8, topK: 2, moeInter: 64, normTopK: true},
	"hf/qwen3_next":  {modelType: "qwen3_next", hidden: 128, inter: 256, layers: 4, heads: 4, kv: 2, headDim: 32, vocab: 1024, theta: 1e4, prf: 0.25, layerTypes: hybrid, experts: 8, topK: 2, moeInter: 64, shared: 64, normTopK: true, convK: 4, nk: 2, nv: 4, dk: 16, dv: 16},
	"hf/qwen3_5":     {modelType: "qwen3_5_text", hidden: 128, inter: 256, layers: 4, heads: 4, kv: 2, headDim: 32, vocab: 1024, theta: 1e4, prf: 0.25, layerTypes: hybrid, convK: 4, nk: 2, nv: 4, dk: 16, dv: 16},
	"hf/qwen3_5_moe": {modelType: "qwen3_5_moe_text", hidden: 128, inter: 256, layers: 4, heads: 4, kv: 2, headDim: 32, vocab: 1024, theta: 1e4, prf: 0.25, layerTypes: hybrid, experts: 8, topK: 2, moeInter: 64, shared: 64, normTopK: true, convK: 4, nk: 2, nv: 4, dk: 16, dv: 16},
}

func checkConfig(t *testing.T, c *Config, w wantConfig) {
	t.Helper()
	got := wantConfig{
		modelType: c.ModelType, hidden: c.HiddenSize, inter: c.IntermediateSize, layers: c.NumHiddenLayers,
		heads: c.NumAttentionHeads, kv: c.NumKeyValueHeads, headDim: c.HeadDim, vocab: c.VocabSize,
		theta: c.RopeTheta, prf: c.PartialRotaryFactor, tied: c.TieWordEmbeddings, bias: c.AttentionBias,
		layerTypes: c.LayerTypes, experts: c.NumExperts, topK: c.NumExpertsPerTok, moeInter: c.MoEIntermediateSize,
		shared: c.SharedExpertIntermediateSize, normTopK: c.NormTopKProb,
		convK: c.LinearConvKernelDim, nk: c.LinearNumKeyHeads, nv: c.LinearNumValueHeads, dk: c.LinearKeyHeadDim, dv: c.LinearValueHeadDim,
	}
	if !reflect.DeepEqual(got, w) {
		t.Errorf("config:\n got %+v\nwant %+v", got, w)
	}
	if c.MaxPositionEmbeddings != 4096 || c.RMSNormEps != 1e-6 || c.BOSTokenID != -1 || len(c.EOSTokenIDs) != 0 {
		t.Errorf("got max_pos %d eps %v bos %d eos %v, want 4096 1e-6 -1 []", c.MaxPositionEmbeddings, c.RMSNormEps, c.BOSTokenID, c.EOSTokenIDs)
	}
}

func TestOpenHF(t *testing.T) {
	for name, want := range fixtureConfigs {
		t.Run(name, func(t *testing.T) {
			ck, err := Open(filepath.Join(testdata, name))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			checkConfig(t, ck.Config(), want)
			checkTensors(t, ck)
		})
	}
}

// checkTensors asserts that every tensor the config implies exists with its
// shape, and that every tensor decodes.
func checkTensors(t *testing.T, ck *Checkpoint) {
	t.Helper()
	shapes := ck.Config().TensorShapes()
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		h, err := ck.TensorShape(n, shapes[n]...)
		if err != nil {
			t.Error(err)
			continue
		}
		if h.Name != n {
			t.Errorf("tensor %s: Name %q", n, h.Name)
		}
		row := make([]float32, h.Cols())
		if err := h.DecodeRow(h.Rows()-1, row); err != nil {
			t.Errorf("decode last row of %s: %v", n, err)
		}
	}
	if ck.Config().TieWordEmbeddings && ck.Has("lm_head.weight") {
		t.Errorf("tied checkpoint has lm_head.weight")
	}
	for _, n := range ck.Names() {
		if _, ok := shapes[n]; !ok {
			t.Errorf("unexpected tensor %s", n)
		}
	}
}
