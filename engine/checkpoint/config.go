package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Layer kinds of Config.LayerTypes.
const (
	FullAttention   = "full_attention"
	LinearAttention = "linear_attention"
)

// Config is the architecture of a Qwen text model, normalised over the
// spellings of transformers 4.x/5.x, MLX and the image-text wrappers.
type Config struct {
	// ModelType is the text model's type: qwen2, qwen3, qwen3_moe,
	// qwen3_next, qwen3_5_text or qwen3_5_moe_text (the image-text
	// qwen3_5 / qwen3_5_moe map to the last two).
	ModelType             string
	HiddenSize            int
	IntermediateSize      int // dense MLP width (0 when every layer is MoE)
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int
	HeadDim               int
	VocabSize             int
	MaxPositionEmbeddings int

	RMSNormEps          float64
	RopeTheta           float64
	PartialRotaryFactor float64 // fraction of HeadDim that is rotated; 1 if absent
	// RopeScaling is the rotary scaling of rope_parameters (transformers 5)
	// or rope_scaling (4.x); its Type is "" for none (default, mrope).
	RopeScaling RopeScaling

	TieWordEmbeddings bool
	AttentionBias     bool // q/k/v projections have biases (always for qwen2)

	// LayerTypes has one entry per layer: FullAttention or LinearAttention.
	LayerTypes []string

	BOSTokenID  int   // -1 if none
	EOSTokenIDs []int // config.json then generation_config.json, deduplicated

	// Mixture of experts (zero for dense models).
	NumExperts                   int
	NumExpertsPerTok             int
	MoEIntermediateSize          int
	SharedExpertIntermediateSize int // 0: no shared expert
	DecoderSparseStep            int // layer i is MoE when (i+1)%step == 0 (and not in MLPOnlyLayers)
	NormTopKProb                 bool
	MLPOnlyLayers                []int

	// Gated DeltaNet linear attention (qwen3_next, qwen3_5*).
	LinearConvKernelDim int
	LinearKeyHeadDim    int
	LinearValueHeadDim  int
	LinearNumKeyHeads   int
	LinearNumValueHeads int
}

// IsMoELayer says whether layer i uses the sparse MoE block.
func (c *Config) IsMoELayer(i int) bool {
	if c.NumExperts <= 0 || slices.Contains(c.MLPOnlyLayers, i) {
		return false
	}
	step := c.DecoderSparseStep
	if step <= 0 {
		step = 1
	}
	return (i+1)%step == 0
}

// IsLinearAttention says whether layer i is a Gated DeltaNet layer.
func (c *Config) IsLinearAttention(i int) bool {
	return i >= 0 && i < len(c.LayerTypes) && c.LayerTypes[i] == LinearAttention
}

// RotaryDim is the number of rotated dimensions of a head.
func (c *Config) RotaryDim() int {
	return int(math.Round(float64(c.HeadDim) * c.PartialRotaryFactor))
}

// hasLinearAttention reports model types with Gated DeltaNet layers.
func hasLinearAttention(modelType string) bool {
	return modelType == "qwen3_next" || modelType == "qwen3_5_text" || modelType == "qwen3_5_moe_text"
}

// zeroCentredNorms reports model types whose RMSNorms are applied as 1+w.
func zeroCentredNorms(modelType string) bool { return hasLinearAttention(modelType) }

// maxLayers and maxExperts bound what a config may ask for, so a corrupt
// value fails cleanly instead of allocating per-layer tables of billions.
const (
	maxLayers  = 4096
	maxExperts = 1 << 16
)

// modelTypes maps every accepted model_type to the text model type.
var modelTypes = map[string]string{
	"qwen2":            "qwen2",
	"qwen3":            "qwen3",
	"qwen3_moe":        "qwen3_moe",
	"qwen3_next":       "qwen3_next",
	"qwen3_5_text":     "qwen3_5_text",
	"qwen3_5_moe_text": "qwen3_5_moe_text",
	"qwen3_5":          "qwen3_5_text",
	"qwen3_5_moe":      "qwen3_5_moe_text",
}

// jsonObj is a decoded JSON object with numbers kept as json.Number.
type jsonObj map[string]any

// fields reads a config with a primary object (text_config when present)
// and a fallback (the top level) for keys the primary lacks.
type fields struct {
	file      string
	primary   jsonObj
	fallback  jsonObj
	primaryAt string // "text_config." or ""
	err       error
}

func (f *fields) lookup(key string) (any, string, bool) {
	if v, ok := f.primary[key]; ok && v != nil {
		return v, f.primaryAt + key, true
	}
	if f.fallback != nil {
		if v, ok := f.fallback[key]; ok && v != nil {
			return v, key, true
		}
	}
	return nil, key, false
}

func (f *fields) fail(format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf("%s: "+format, append([]any{f.file}, args...)...)
	}
}

// int reads the first present key of keys; def if none is present.
func (f *fields) int(def int, keys ...string) int {
	for _, k := range keys {
		v, at, ok := f.lookup(k)
		if !ok {
			continue
		}
		n, isNum := v.(json.Number)
		if !isNum {
			f.fail("field %s: want an integer, got %v", at, v)
			return def
		}
		i, err := n.Int64()
		if err != nil || i < math.MinInt32 || i > math.MaxInt32 {
			fl, ferr := n.Float64()
			if ferr != nil || fl != math.Trunc(fl) || math.Abs(fl) > math.MaxInt32 {
				f.fail("field %s: want an integer, got %s", at, n)
				return def
			}
			i = int64(fl)
		}
		return int(i)
	}
	return def
}

func (f *fields) float(def float64, keys ...string) float64 {
	for _, k := range keys {
		v, at, ok := f.lookup(k)
		if !ok {
			continue
		}
		n, isNum := v.(json.Number)
		if !isNum {
			f.fail("field %s: want a number, got %v", at, v)
			return def
		}
		x, err := n.Float64()
		if err != nil {
			f.fail("field %s: want a number, got %s", at, n)
			return def
		}
		return x
	}
	return def
}

func (f *fields) bool(def bool, key string) bool {
	v, at, ok := f.lookup(key)
	if !ok {
		return def
	}
	b, isBool := v.(bool)
	if !isBool {
		f.fail("field %s: want true or false, got %v", at, v)
		return def
	}
	return b
}

// ints reads an integer or a list of integers (eos_token_id, mlp_only_layers).
func (f *fields) ints(key string) []int {
	v, at, ok := f.lookup(key)
	if !ok {
		return nil
	}
	return toInts(v, at, f.fail)
}

func toInts(v any, at string, fail func(string, ...any)) []int {
	one := func(x any) (int, bool) {
		n, ok := x.(json.Number)
		if !ok {
			return 0, false
		}
		i, err := n.Int64()
		if err != nil || i < math.MinInt32 || i > math.MaxInt32 {
			return 0, false
		}
		return int(i), true
	}
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		out := make([]int, 0, len(x))
		for _, e := range x {
			i, ok := one(e)
			if !ok {
				fail("field %s: want integers, got %v", at, e)
				return nil
			}
			out = append(out, i)
		}
		return out
	default:
		i, ok := one(x)
		if !ok {
			fail("field %s: want an integer or a list of integers, got %v", at, v)
			return nil
		}
		return []int{i}
	}
}

func (f *fields) strings(key string) []string {
	v, at, ok := f.lookup(key)
	if !ok {
		return nil
	}
	list, isList := v.([]any)
	if !isList {
		f.fail("field %s: want a list of strings, got %v", at, v)
		return nil
	}
	out := make([]string, len(list))
	for i, e := range list {
		s, isStr := e.(string)
		if !isStr {
			f.fail("field %s: want a list of strings, got %v", at, e)
			return nil
		}
		out[i] = s
	}
	return out
}

// sub returns a nested object (rope_parameters, rope_scaling) or nil.
func (f *fields) sub(key string) jsonObj {
	v, _, ok := f.lookup(key)
	if !ok {
		return nil
	}
	m, _ := v.(map[string]any)
	return m
}

func decodeObj(data []byte) (jsonObj, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

// LoadConfig reads dir/config.json (and dir/generation_config.json for
// extra end-of-sequence ids) and validates the result.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint config: %w", err)
	}
	var gen []byte
	if b, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil {
		gen = b
	}
	return ParseConfig(path, data, gen)
}

// ParseConfig parses a config.json (name is used in errors) and an optional
// generation_config.json (nil if absent).
func ParseConfig(name string, data, generation []byte) (*Config, error) {
	top, err := decodeObj(data)
	if err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %v", name, err)
	}
	f := &fields{file: name, primary: top}
	if tc, ok := top["text_config"].(map[string]any); ok {
		f.primary, f.fallback, f.primaryAt = tc, top, "text_config."
	}
	c := &Config{}
	mt, _, _ := f.lookup("model_type")
	mts, _ := mt.(string)
	if mts == "" {
		return nil, fmt.Errorf("%s: field model_type is missing", name)
	}
	c.ModelType = modelTypes[mts]
	if c.ModelType == "" {
		return nil, fmt.Errorf("%s: unsupported model_type %q (want one of qwen2, qwen3, qwen3_moe, qwen3_next, qwen3_5, qwen3_5_moe, qwen3_5_text, qwen3_5_moe_text)", name, mts)
	}

	c.HiddenSize = f.int(0, "hidden_size")
	c.IntermediateSize = f.int(0, "intermediate_size")
	c.NumHiddenLayers = f.int(0, "num_hidden_layers")
	c.NumAttentionHeads = f.int(0, "num_attention_heads")
	c.NumKeyValueHeads = f.int(c.NumAttentionHeads, "num_key_value_heads")
	c.VocabSize = f.int(0, "vocab_size")
	c.MaxPositionEmbeddings = f.int(0, "max_position_embeddings")
	c.HeadDim = f.int(0, "head_dim")
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	c.RMSNormEps = f.float(1e-6, "rms_norm_eps")

	// transformers 5 moves rope_theta (and partial_rotary_factor) into
	// rope_parameters; 4.x keeps them at the top level.
	rope := &fields{file: name, primary: f.sub("rope_parameters"), primaryAt: f.primaryAt + "rope_parameters."}
	c.RopeTheta = f.float(0, "rope_theta")
	if c.RopeTheta == 0 {
		c.RopeTheta = rope.float(10000, "rope_theta")
	}
	c.PartialRotaryFactor = f.float(0, "partial_rotary_factor")
	if c.PartialRotaryFactor == 0 {
		c.PartialRotaryFactor = rope.float(1, "partial_rotary_factor")
	}
	if rope.err != nil {
		return nil, rope.err
	}
	if c.RopeScaling, err = parseRopeScaling(f, name, c.MaxPositionEmbeddings); err != nil {
		return nil, err
	}

	c.TieWordEmbeddings = f.bool(false, "tie_word_embeddings")
	c.AttentionBias = f.bool(c.ModelType == "qwen2", "attention_bias")
	if c.ModelType == "qwen2" {
		c.AttentionBias = true // Qwen2 always has q/k/v biases
	}

	c.BOSTokenID = -1
	if ids := f.ints("bos_token_id"); len(ids) > 0 {
		c.BOSTokenID = ids[0]
	}
	c.EOSTokenIDs = f.ints("eos_token_id")

	c.NumExperts = f.int(0, "num_experts", "num_local_experts")
	if c.NumExperts > 0 {
		c.NumExpertsPerTok = f.int(0, "num_experts_per_tok")
		c.MoEIntermediateSize = f.int(0, "moe_intermediate_size")
		c.SharedExpertIntermediateSize = f.int(0, "shared_expert_intermediate_size")
		c.DecoderSparseStep = f.int(1, "decoder_sparse_step")
		// transformers defaults: Qwen3-MoE false; Qwen3-Next true; Qwen3.5-MoE
		// always normalises the top-k weights.
		c.NormTopKProb = f.bool(c.ModelType != "qwen3_moe", "norm_topk_prob")
		if c.ModelType == "qwen3_5_moe_text" {
			c.NormTopKProb = true
		}
		c.MLPOnlyLayers = f.ints("mlp_only_layers")
	}

	if hasLinearAttention(c.ModelType) {
		c.LinearConvKernelDim = f.int(0, "linear_conv_kernel_dim")
		c.LinearKeyHeadDim = f.int(0, "linear_key_head_dim")
		c.LinearValueHeadDim = f.int(0, "linear_value_head_dim")
		c.LinearNumKeyHeads = f.int(0, "linear_num_key_heads")
		c.LinearNumValueHeads = f.int(0, "linear_num_value_heads")
	}
	if c.NumHiddenLayers > maxLayers {
		return nil, fmt.Errorf("%s: field num_hidden_layers: %d exceeds %d", name, c.NumHiddenLayers, maxLayers)
	}
	c.LayerTypes = f.strings("layer_types")
	if c.LayerTypes == nil && c.NumHiddenLayers > 0 {
		c.LayerTypes = make([]string, c.NumHiddenLayers)
		interval := 0
		if hasLinearAttention(c.ModelType) {
			interval = f.int(4, "full_attention_interval")
			if interval <= 0 {
				return nil, fmt.Errorf("%s: field full_attention_interval: %d must be positive", name, interval)
			}
		}
		for i := range c.LayerTypes {
			c.LayerTypes[i] = FullAttention
			if interval > 0 && (i+1)%interval != 0 {
				c.LayerTypes[i] = LinearAttention
			}
		}
	}
	if f.err != nil {
		return nil, f.err
	}

	if generation != nil {
		g, err := decodeObj(generation)
		if err != nil {
			return nil, fmt.Errorf("generation_config.json next to %s: invalid JSON: %v", name, err)
		}
		gf := &fields{file: "generation_config.json next to " + name, primary: g}
		for _, id := range gf.ints("eos_token_id") {
			if !slices.Contains(c.EOSTokenIDs, id) {
				c.EOSTokenIDs = append(c.EOSTokenIDs, id)
			}
		}
		if c.BOSTokenID < 0 {
			if ids := gf.ints("bos_token_id"); len(ids) > 0 {
				c.BOSTokenID = ids[0]
			}
		}
		if gf.err != nil {
			return nil, gf.err
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

// Validate checks that the architecture is complete and consistent. Errors
// name the config.json field at fault.
func (c *Config) Validate() error {
	if _, ok := modelTypes[c.ModelType]; !ok {
		return fmt.Errorf("unsupported model_type %q", c.ModelType)
	}
	positive := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize},
		{"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads},
		{"head_dim", c.HeadDim},
		{"vocab_size", c.VocabSize},
	}
	for _, p := range positive {
		if p.v <= 0 {
			return fmt.Errorf("field %s is missing or not positive (got %d)", p.name, p.v)
		}
	}
	if c.NumHiddenLayers > maxLayers {
		return fmt.Errorf("field num_hidden_layers: %d exceeds %d", c.NumHiddenLayers, maxLayers)
	}
	if c.NumExperts > maxExperts {
		return fmt.Errorf("field num_experts: %d exceeds %d", c.NumExperts, maxExperts)
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("field num_key_value_heads: %d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if !(c.RMSNormEps > 0) {
		return fmt.Errorf("field rms_norm_eps: %v must be positive", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) {
		return fmt.Errorf("field rope_theta: %v must be positive", c.RopeTheta)
	}
	if !(c.PartialRotaryFactor > 0 && c.PartialRotaryFactor <= 1) {
		return fmt.Errorf("field partial_rotary_factor: %v must be in (0, 1]", c.PartialRotaryFactor)
	}
	if rd := float64(c.HeadDim) * c.PartialRotaryFactor; rd != math.Trunc(rd) || int(rd)%2 != 0 {
		return fmt.Errorf("field partial_rotary_factor: %v of head_dim %d is not an even number of dimensions", c.PartialRotaryFactor, c.HeadDim)
	}
	if len(c.LayerTypes) != c.NumHiddenLayers {
		return fmt.Errorf("field layer_types has %d entries, num_hidden_layers is %d", len(c.LayerTypes), c.NumHiddenLayers)
	}
	linear := false
	for i, t := range c.LayerTypes {
		switch t {
		case FullAttention:
		case LinearAttention:
			linear = true
			if !hasLinearAttention(c.ModelType) {
				return fmt.Errorf("field layer_types[%d]: %q is not supported by model_type %s", i, t, c.ModelType)
			}
		default:
			return fmt.Errorf("field layer_types[%d]: unknown layer type %q", i, t)
		}
	}
	if linear {
		lin := []struct {
			name string
			v    int
		}{
			{"linear_conv_kernel_dim", c.LinearConvKernelDim},
			{"linear_key_head_dim", c.LinearKeyHeadDim},
			{"linear_value_head_dim", c.LinearValueHeadDim},
			{"linear_num_key_heads", c.LinearNumKeyHeads},
			{"linear_num_value_heads", c.LinearNumValueHeads},
		}
		for _, p := range lin {
			if p.v <= 0 {
				return fmt.Errorf("field %s is missing or not positive (got %d)", p.name, p.v)
			}
		}
		if c.LinearNumValueHeads%c.LinearNumKeyHeads != 0 {
			return fmt.Errorf("field linear_num_key_heads: %d does not divide linear_num_value_heads %d", c.LinearNumKeyHeads, c.LinearNumValueHeads)
		}
	}
	if c.ModelType == "qwen3_moe" || c.ModelType == "qwen3_next" || c.ModelType == "qwen3_5_moe_text" {
		if c.NumExperts <= 0 {
			return fmt.Errorf("field num_experts (or num_local_experts) is missing or not positive (got %d)", c.NumExperts)
		}
	}
	dense := false
	for i := 0; i < c.NumHiddenLayers; i++ {
		if !c.IsMoELayer(i) {
			dense = true
		}
	}
	if c.NumExperts > 0 {
		if c.NumExpertsPerTok <= 0 || c.NumExpertsPerTok > c.NumExperts {
			return fmt.Errorf("field num_experts_per_tok: %d must be in [1, num_experts %d]", c.NumExpertsPerTok, c.NumExperts)
		}
		if c.MoEIntermediateSize <= 0 {
			return fmt.Errorf("field moe_intermediate_size is missing or not positive (got %d)", c.MoEIntermediateSize)
		}
		if c.DecoderSparseStep <= 0 {
			return fmt.Errorf("field decoder_sparse_step: %d must be positive", c.DecoderSparseStep)
		}
		for _, l := range c.MLPOnlyLayers {
			if l < 0 || l >= c.NumHiddenLayers {
				return fmt.Errorf("field mlp_only_layers: layer %d out of range [0, %d)", l, c.NumHiddenLayers)
			}
		}
		if c.SharedExpertIntermediateSize < 0 {
			return fmt.Errorf("field shared_expert_intermediate_size: %d is negative", c.SharedExpertIntermediateSize)
		}
	}
	if dense && c.IntermediateSize <= 0 {
		return fmt.Errorf("field intermediate_size is missing or not positive (got %d)", c.IntermediateSize)
	}
	if c.MaxPositionEmbeddings < 0 {
		return fmt.Errorf("field max_position_embeddings: %d is negative", c.MaxPositionEmbeddings)
	}
	return c.RopeScaling.Validate()
}

// String summarises the architecture for logs.
func (c *Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d layers, hidden %d, heads %d/%d x %d, vocab %d", c.ModelType,
		c.NumHiddenLayers, c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.VocabSize)
	if c.NumExperts > 0 {
		fmt.Fprintf(&b, ", %d experts (top %d, width %d)", c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize)
	}
	return b.String()
}
