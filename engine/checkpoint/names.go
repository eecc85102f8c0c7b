package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/macpool/macpool/engine/safetensors"
	"github.com/macpool/macpool/engine/tensor"
)

// ignoredPrefixes are weights a text engine never uses: vision towers of the
// image-text checkpoints and multi-token-prediction heads.
var ignoredPrefixes = []string{
	"model.visual.", "visual.", "vision_tower.", "model.vision_tower.",
	"language_model.vision_tower.", "mtp.", "model.mtp.",
}

// canonicalName maps a stored name to its canonical text-model name; ok is
// false for weights to ignore.
func canonicalName(raw string) (string, bool) {
	for _, p := range ignoredPrefixes {
		if strings.HasPrefix(raw, p) {
			return "", false
		}
	}
	name := raw
	switch {
	case strings.HasPrefix(name, "model.language_model."):
		name = "model." + strings.TrimPrefix(name, "model.language_model.")
	case strings.HasPrefix(name, "language_model.model."):
		name = "model." + strings.TrimPrefix(name, "language_model.model.")
	case strings.HasPrefix(name, "language_model.lm_head."):
		name = "lm_head." + strings.TrimPrefix(name, "language_model.lm_head.")
	case strings.HasPrefix(name, "language_model."):
		name = strings.TrimPrefix(name, "language_model.")
	}
	if strings.HasPrefix(name, "mtp.") || strings.HasPrefix(name, "model.mtp.") {
		return "", false
	}
	return name, true
}

// zeroCentredNormSuffixes are the RMSNorm weights that HF applies as 1+w in
// Qwen3-Next / Qwen3.5 and that MLX stores as bf16(1+w) (mlx-lm's sanitize).
// linear_attn.norm (the gated norm) is applied as w by both and is not here.
var zeroCentredNormSuffixes = []string{
	".input_layernorm.weight", ".post_attention_layernorm.weight",
	".self_attn.q_norm.weight", ".self_attn.k_norm.weight",
}

func isZeroCentredNorm(name string) bool {
	if name == "model.norm.weight" {
		return true
	}
	for _, s := range zeroCentredNormSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// mapTensors turns the stored tensors of a safetensors set into canonical
// tensors (see the package comment).
func mapTensors(cfg *Config, quant *mlxQuant, set *safetensors.Set) (map[string]*tensor.Host, error) {
	out := map[string]*tensor.Host{}
	put := func(name string, h *tensor.Host) error {
		if _, dup := out[name]; dup {
			return fmt.Errorf("two stored tensors map to %s (second from %s)", name, h.Source)
		}
		h.Name = name
		out[name] = h
		return nil
	}

	mlxLayout := detectMLXLayout(set)
	bare := bareLayout(set) // Qwen3Model layout: add "model." (bare.go)
	consumed := map[string]bool{}

	// MLX quantized triples first: X.weight (U32) + X.scales + X.biases.
	for _, raw := range set.Names() {
		base, ok := strings.CutSuffix(raw, ".scales")
		if !ok {
			continue
		}
		if _, keep := canonicalName(raw); !keep {
			consumed[raw] = true
			consumed[base+".weight"] = true
			consumed[base+".biases"] = true
			continue
		}
		h, err := quantizedHost(set, quant, base)
		if err != nil {
			return nil, err
		}
		consumed[raw], consumed[base+".weight"], consumed[base+".biases"] = true, true, true
		name, _ := canonicalName(base + ".weight")
		if bare {
			name = withModelPrefix(name)
		}
		if err := place(name, h, cfg, mlxLayout, put); err != nil {
			return nil, err
		}
	}
	for _, raw := range set.Names() {
		if consumed[raw] {
			continue
		}
		name, keep := canonicalName(raw)
		if !keep {
			continue
		}
		if bare {
			name = withModelPrefix(name)
		}
		h, err := set.Host(raw)
		if err != nil {
			return nil, err
		}
		if err := place(name, h, cfg, mlxLayout, put); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// detectMLXLayout says whether the weights went through mlx-lm's sanitize
// (conv1d as [C, K, 1], norms stored as 1+w). mlx-lm decides by the conv1d
// layout; without conv1d weights the file metadata decides.
func detectMLXLayout(set *safetensors.Set) bool {
	for _, raw := range set.Names() {
		if !strings.HasSuffix(raw, ".linear_attn.conv1d.weight") {
			continue
		}
		t, _, _ := set.Info(raw)
		if len(t.Shape) == 3 {
			return t.Shape[2] == 1 && t.Shape[1] != 1
		}
	}
	return set.Metadata()["format"] == "mlx"
}

// place applies the layout conversions of one tensor under its canonical
// name and stores the result with put.
func place(name string, h *tensor.Host, cfg *Config, mlxLayout bool, put func(string, *tensor.Host) error) error {
	// Stacked experts: MLX switch_mlp [E, out, in].
	if pre, proj, ok := splitStacked(name, ".mlp.switch_mlp.", ".weight"); ok {
		return putExperts(pre, proj, h, 0, 1, put)
	}
	// Fused HF experts of Qwen3.5-MoE: gate_up_proj [E, 2I, H] (gate rows
	// first), down_proj [E, H, I]; nn.Parameters, usually without ".weight".
	fused := strings.TrimSuffix(name, ".weight")
	if pre, ok := strings.CutSuffix(fused, ".mlp.experts.gate_up_proj"); ok {
		if want := []int{cfg.NumExperts, 2 * cfg.MoEIntermediateSize, cfg.HiddenSize}; !equalShape(h.Shape, want) {
			return fmt.Errorf("tensor %s (in %s): shape %v, want [experts, 2*moe_intermediate, hidden] = %v", name, h.Source, h.Shape, want)
		}
		if err := putExperts(pre+".mlp.experts", "gate_proj", h, 0, 2, put); err != nil {
			return err
		}
		return putExperts(pre+".mlp.experts", "up_proj", h, 1, 2, put)
	}
	if pre, ok := strings.CutSuffix(fused, ".mlp.experts.down_proj"); ok {
		if want := []int{cfg.NumExperts, cfg.HiddenSize, cfg.MoEIntermediateSize}; !equalShape(h.Shape, want) {
			return fmt.Errorf("tensor %s (in %s): shape %v, want [experts, hidden, moe_intermediate] = %v", name, h.Source, h.Shape, want)
		}
		return putExperts(pre+".mlp.experts", "down_proj", h, 0, 1, put)
	}
	if strings.HasSuffix(name, ".linear_attn.conv1d.weight") && len(h.Shape) == 3 && h.Shape[2] == 1 && h.Shape[1] != 1 {
		// MLX [C, K, 1] -> HF [C, 1, K]: the same bytes in the same order.
		h.Shape = []int{h.Shape[0], 1, h.Shape[1]}
	}
	if mlxLayout && zeroCentredNorms(cfg.ModelType) && isZeroCentredNorm(name) {
		w, err := minusOne(h)
		if err != nil {
			return err
		}
		h = w
	}
	return put(name, h)
}

// splitStacked matches "<pre><mid><proj><suffix>" (e.g.
// model.layers.0 + .mlp.switch_mlp. + gate_proj + .weight) and returns pre
// with ".mlp.experts" appended, and proj.
func splitStacked(name, mid, suffix string) (pre, proj string, ok bool) {
	i := strings.Index(name, mid)
	if i < 0 || !strings.HasSuffix(name, suffix) {
		return "", "", false
	}
	proj = strings.TrimSuffix(name[i+len(mid):], suffix)
	switch proj {
	case "gate_proj", "up_proj", "down_proj":
		return name[:i] + ".mlp.experts", proj, true
	}
	return "", "", false
}

// putExperts slices a stacked [E, rows, cols] tensor into per-expert views
// "<pre>.E.<proj>.weight". Each expert's rows are split into `parts` equal
// blocks and block `part` is taken (for fused gate_up: part 0 gate, 1 up).
func putExperts(pre, proj string, h *tensor.Host, part, parts int, put func(string, *tensor.Host) error) error {
	if len(h.Shape) != 3 || h.Shape[0] <= 0 || h.Shape[1]%parts != 0 {
		return fmt.Errorf("tensor %s (in %s): shape %v, want stacked experts [experts, out, in]", h.Name, h.Source, h.Shape)
	}
	e := h.Shape[0]
	blocks := e * parts
	for i := 0; i < e; i++ {
		v, err := sliceBlock(h, blocks, i*parts+part)
		if err != nil {
			return err
		}
		if err := put(pre+"."+strconv.Itoa(i)+"."+proj+".weight", v); err != nil {
			return err
		}
	}
	return nil
}

// sliceBlock views block k of `blocks` equal consecutive row blocks of a
// [E, rows, cols] tensor as a [rows*E/blocks, cols] tensor, without copying.
func sliceBlock(h *tensor.Host, blocks, k int) (*tensor.Host, error) {
	rows := h.Shape[0] * h.Shape[1] / blocks
	v := &tensor.Host{
		Name: h.Name, Format: h.Format, Shape: []int{rows, h.Shape[2]},
		Bits: h.Bits, GroupSize: h.GroupSize, Source: h.Source,
	}
	data, err := blockBytes(h.Data, blocks, k, h.Name)
	if err != nil {
		return nil, err
	}
	v.Data = data
	for _, sb := range []struct{ src, dst **tensor.Host }{{&h.Scales, &v.Scales}, {&h.Biases, &v.Biases}} {
		s := *sb.src
		if s == nil {
			continue
		}
		b, err := blockBytes(s.Data, blocks, k, s.Name)
		if err != nil {
			return nil, err
		}
		*sb.dst = &tensor.Host{Name: s.Name, Format: s.Format, Shape: []int{rows, s.Shape[len(s.Shape)-1]}, Data: b, Source: s.Source}
	}
	return v, nil
}

func blockBytes(b []byte, blocks, k int, name string) ([]byte, error) {
	if len(b)%blocks != 0 {
		return nil, fmt.Errorf("tensor %s: %d bytes do not split into %d expert blocks", name, len(b), blocks)
	}
	n := len(b) / blocks
	return b[k*n : (k+1)*n : (k+1)*n], nil
}

// minusOne returns float32(w) - 1 as a new F32 tensor (MLX stores the
// zero-centred norms as 1+w).
func minusOne(h *tensor.Host) (*tensor.Host, error) {
	if h.Numel() == 0 || h.Cols() == 0 {
		return nil, fmt.Errorf("norm %s (in %s): empty shape %v", h.Name, h.Source, h.Shape)
	}
	vals, err := h.Float32s()
	if err != nil {
		return nil, fmt.Errorf("norm %s (in %s): %w", h.Name, h.Source, err)
	}
	data := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v-1))
	}
	return &tensor.Host{Name: h.Name, Format: tensor.F32, Shape: h.Shape, Data: data, Source: h.Source}, nil
}
