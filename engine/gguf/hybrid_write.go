package gguf

// Writing Qwen3-Next / Qwen3.5 / Qwen3.5-MoE (qwen3next, qwen35, qwen35moe)
// files: the transforms of llama.cpp's converter that hybrid.go undoes,
// applied to canonical (Hugging Face) tensors in the format they are stored
// in. Rows and whole storage blocks are moved, never re-encoded, so a
// quantized synthetic model is written as it is; only the 1-D tensors change
// value (norms stored as 1+w, A_log as -exp(A_log)) and are written as F32,
// as llama.cpp stores them. The metadata keys and tensor shapes are those
// ik_llama.cpp's loader reads (llama-hparams.cpp, llama-load-tensors.cpp:
// create_qwen3next_tensors, create_qwen35_tensors, create_qwen35moe_tensors).

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/macpool/macpool/engine/tensor"
)

// hybridArch is the GGUF architecture of a hybrid model type ("" if none).
func hybridArch(modelType string) string {
	for a, mt := range hybridArchs {
		if mt == modelType {
			return a
		}
	}
	return ""
}

// fullAttentionInterval is the n with layer i full attention exactly when
// (i+1) % n == 0, the only layer pattern llama.cpp's hybrid loaders
// express (qwen3next fixes n = 4); 0 if the layers follow no such n.
func fullAttentionInterval(types []string) int {
	for n := 1; n <= len(types)+1; n++ {
		ok := true
		for i, t := range types {
			if (t == "full_attention") != ((i+1)%n == 0) {
				ok = false
				break
			}
		}
		if ok {
			return n
		}
	}
	return 0
}

// HybridMeta is the metadata of a qwen3next, qwen35 or qwen35moe file for
// c (model types qwen3_next, qwen3_5_text, qwen3_5_moe_text), with the
// tokenizer left out as in DenseMeta.
func HybridMeta(c *Config) ([]Meta, error) {
	arch := hybridArch(c.ModelType)
	if arch == "" {
		return nil, fmt.Errorf("gguf metadata: model type %q: %w", c.ModelType, ErrUnsupportedArchitecture)
	}
	if len(c.LayerTypes) != c.NumHiddenLayers {
		return nil, fmt.Errorf("gguf metadata: %d layer types for %d layers", len(c.LayerTypes), c.NumHiddenLayers)
	}
	interval := fullAttentionInterval(c.LayerTypes)
	if arch == "qwen3next" {
		// llama.cpp's qwen3next loader fixes full attention to every 4th
		// layer and reads no interval.
		want := make([]string, len(c.LayerTypes))
		for i := range want {
			want[i] = map[bool]string{true: "full_attention", false: "linear_attention"}[(i+1)%4 == 0]
		}
		if !slices.Equal(c.LayerTypes, want) {
			return nil, fmt.Errorf("gguf metadata: qwen3next layer types %v: llama.cpp fixes full attention to every 4th layer", c.LayerTypes)
		}
		interval = 4
	}
	if interval == 0 {
		return nil, fmt.Errorf("gguf metadata: layer types %v: full attention is not every n-th layer, which is all %s stores", c.LayerTypes, arch)
	}
	nk, nv, dk, dv := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim
	switch {
	case nk < 1 || nv < 1 || dk < 1 || dv < 1 || nv%nk != 0:
		return nil, fmt.Errorf("gguf metadata: linear attention with %d key heads of %d and %d value heads of %d: heads must be positive and value heads a multiple of key heads", nk, dk, nv, dv)
	case arch != "qwen3next" && dk != dv:
		// create_qwen35*_tensors size the value heads by ssm.state_size.
		return nil, fmt.Errorf("gguf metadata: %s needs equal key and value head sizes (%d, %d)", arch, dk, dv)
	}
	d := *c
	d.ModelType, d.NumExperts = "qwen3", 0
	meta, err := DenseMeta(&d)
	if err != nil {
		return nil, err
	}
	for i := range meta {
		if k, ok := strings.CutPrefix(meta[i].Key, "qwen3."); ok {
			meta[i].Key = arch + "." + k
		}
		if meta[i].Key == "general.architecture" {
			meta[i].Value = arch
		}
	}
	u := func(v int) uint32 { return uint32(v) }
	rope := int(math.Round(float64(c.HeadDim) * c.PartialRotaryFactor))
	meta = append(meta,
		Meta{arch + ".rope.dimension_count", u(rope)},
		Meta{arch + ".ssm.conv_kernel", u(c.LinearConvKernelDim)},
		Meta{arch + ".ssm.state_size", u(dk)},
		Meta{arch + ".ssm.group_count", u(nk)},
		Meta{arch + ".ssm.time_step_rank", u(nv)},
		Meta{arch + ".ssm.inner_size", u(nv * dv)},
		Meta{arch + ".full_attention_interval", u(interval)},
	)
	if arch != "qwen3next" {
		// Multimodal rotary sections (required by the qwen35 loaders): for
		// text every section sees the same position, so any split of the
		// rotated pairs gives plain rotary; this is Qwen3.5's for 32 pairs
		// ([11, 11, 10]).
		pairs := rope / 2
		s := (pairs + 2) / 3
		meta = append(meta, Meta{arch + ".rope.dimension_sections", []int32{int32(s), int32(s), int32(pairs - 2*s), 0}})
	}
	if c.ModelType != "qwen3_5_text" {
		switch {
		case c.NumExperts < 1 || c.NumExpertsPerTok < 1 || c.NumExpertsPerTok > c.NumExperts || c.MoEIntermediateSize < 1:
			return nil, fmt.Errorf("gguf metadata: %d experts, %d per token, expert size %d: not a valid MoE", c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize)
		case !c.NormTopKProb:
			return nil, fmt.Errorf("gguf metadata: %s without renormalised top-k weights is not written", arch)
		case c.SharedExpertIntermediateSize < 1:
			return nil, fmt.Errorf("gguf metadata: %s needs a shared expert", arch)
		}
		meta = append(meta,
			Meta{arch + ".expert_count", u(c.NumExperts)},
			Meta{arch + ".expert_used_count", u(c.NumExpertsPerTok)},
			Meta{arch + ".expert_feed_forward_length", u(c.MoEIntermediateSize)},
			Meta{arch + ".expert_shared_feed_forward_length", u(c.SharedExpertIntermediateSize)},
		)
	}
	return meta, nil
}

// hybridWriteNames maps canonical per-layer names (after
// "model.layers.N.") to GGUF stems, for tensors written with at most a
// row reorder; the others are handled in HybridTensors.
var hybridWriteNames = map[string]string{
	"self_attn.q_proj.weight":            "attn_q.weight",
	"self_attn.k_proj.weight":            "attn_k.weight",
	"self_attn.v_proj.weight":            "attn_v.weight",
	"self_attn.o_proj.weight":            "attn_output.weight",
	"linear_attn.in_proj_qkv.weight":     "attn_qkv.weight",
	"linear_attn.in_proj_z.weight":       "attn_gate.weight",
	"linear_attn.in_proj_b.weight":       "ssm_beta.weight",
	"linear_attn.in_proj_a.weight":       "ssm_alpha.weight",
	"linear_attn.in_proj_ba.weight":      "ssm_ba.weight",
	"linear_attn.out_proj.weight":        "ssm_out.weight",
	"linear_attn.norm.weight":            "ssm_norm.weight",
	"mlp.gate_proj.weight":               "ffn_gate.weight",
	"mlp.up_proj.weight":                 "ffn_up.weight",
	"mlp.down_proj.weight":               "ffn_down.weight",
	"mlp.gate.weight":                    "ffn_gate_inp.weight",
	"mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
	"mlp.shared_expert.up_proj.weight":   "ffn_up_shexp.weight",
	"mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
}

// HybridTensors maps the canonical tensors of a hybrid model (names, each
// fetched with get) to the tensors of its GGUF file, in names' order with
// stacked experts after the rest. c is the model's config (as for
// HybridMeta).
func HybridTensors(c *Config, names []string, get func(string) (*tensor.Host, error)) ([]WriteTensor, error) {
	arch := hybridArch(c.ModelType)
	if arch == "" {
		return nil, fmt.Errorf("gguf tensors: model type %q: %w", c.ModelType, ErrUnsupportedArchitecture)
	}
	d := &linDims{nk: c.LinearNumKeyHeads, nv: c.LinearNumValueHeads, dk: c.LinearKeyHeadDim, dv: c.LinearValueHeadDim, tiled: arch != "qwen3next"}
	if d.nk <= 0 || d.nv <= 0 || d.dk <= 0 || d.dv <= 0 || d.nv%d.nk != 0 {
		return nil, fmt.Errorf("gguf tensors: linear-attention sizes %d/%d/%d/%d are not valid", d.nk, d.nv, d.dk, d.dv)
	}
	var out []WriteTensor
	stacks := map[string][]*tensor.Host{}
	var order []string
	add := func(name string, h *tensor.Host) {
		c := *h
		c.Name = name
		out = append(out, WriteTensor{Name: name, Host: &c})
	}
	for _, hf := range names {
		h, err := get(hf)
		if err != nil {
			return nil, err
		}
		fail := func(err error) ([]WriteTensor, error) { return nil, fmt.Errorf("gguf tensors: %s: %w", hf, err) }
		switch hf {
		case "model.embed_tokens.weight":
			add("token_embd.weight", h)
			continue
		case "lm_head.weight":
			add("output.weight", h)
			continue
		case "model.norm.weight":
			v, err := plusOne(h)
			if err != nil {
				return fail(err)
			}
			add("output_norm.weight", v)
			continue
		}
		if g, e, ok := ExpertGGUFName(hf); ok {
			if _, seen := stacks[g]; !seen {
				order = append(order, g)
			}
			for len(stacks[g]) <= e {
				stacks[g] = append(stacks[g], nil)
			}
			stacks[g][e] = h
			continue
		}
		rest, ok := strings.CutPrefix(hf, "model.layers.")
		num, rest, _ := strings.Cut(rest, ".")
		if _, err := strconv.Atoi(num); !ok || err != nil {
			return nil, fmt.Errorf("gguf tensors: tensor %s has no GGUF name", hf)
		}
		b := "blk." + num + "."
		var w *tensor.Host
		stem := hybridWriteNames[rest]
		switch rest {
		case "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight":
			stem = map[string]string{"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
				"self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight"}[rest]
			w, err = plusOne(h)
		case "linear_attn.norm.weight":
			w, err = asF32(h, h.Shape)
		case "linear_attn.A_log", "linear_attn.dt_bias":
			var v []float32
			if v, err = h.Float32s(); err != nil {
				break
			}
			if len(v) != d.nv {
				err = fmt.Errorf("%d values, want %d (one per value head)", len(v), d.nv)
				break
			}
			stem = "ssm_dt.bias"
			if rest == "linear_attn.A_log" {
				stem = "ssm_a"
				for i, a := range v {
					v[i] = -float32(math.Exp(float64(a)))
				}
			}
			if d.tiled {
				v = tileF32(v, d, 1)
			}
			w = f32Host(h, v, []int{d.nv})
		case "linear_attn.conv1d.weight":
			if len(h.Shape) != 3 || h.Shape[1] != 1 || h.Shape[0] != 2*d.nk*d.dk+d.nv*d.dv {
				err = fmt.Errorf("shape %v, want [%d, 1, K]", h.Shape, 2*d.nk*d.dk+d.nv*d.dv)
				break
			}
			stem = "ssm_conv1d.weight"
			if w, err = asF32(h, []int{h.Shape[0], h.Shape[2]}); err == nil && d.tiled {
				w, err = tileRows(w, 2*d.nk*d.dk, d.dv, d)
			}
		case "linear_attn.in_proj_qkv.weight":
			w, err = tileRows(h, 2*d.nk*d.dk, d.dv, d)
		case "linear_attn.in_proj_z.weight":
			w, err = tileRows(h, 0, d.dv, d)
		case "linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight":
			w, err = tileRows(h, 0, 1, d)
		case "linear_attn.out_proj.weight":
			w, err = tileCols(h, d)
		case "linear_attn.in_proj_qkvz.weight":
			var qkv, z *tensor.Host
			if qkv, z, err = splitQKVZ(h, d); err == nil {
				add(b+"attn_qkv.weight", qkv)
				add(b+"attn_gate.weight", z)
				continue
			}
		case "mlp.shared_expert_gate.weight":
			stem = "ffn_gate_inp_shexp.weight"
			if len(h.Shape) == 2 && h.Shape[0] == 1 {
				c := *h
				c.Shape = []int{h.Shape[1]}
				w = &c
			} else {
				err = fmt.Errorf("shape %v, want [1, H]", h.Shape)
			}
		default:
			if stem == "" {
				return nil, fmt.Errorf("gguf tensors: tensor %s has no GGUF name", hf)
			}
			w = h
		}
		if err != nil {
			return fail(err)
		}
		add(b+stem, w)
	}
	for _, g := range order {
		h, err := StackExperts(g, stacks[g])
		if err != nil {
			return nil, fmt.Errorf("gguf tensors: %w", err)
		}
		out = append(out, WriteTensor{Name: g, Host: h})
	}
	return out, nil
}

// plusOne is a zero-centred norm as llama.cpp stores it: 1+w, F32.
func plusOne(h *tensor.Host) (*tensor.Host, error) {
	v, err := h.Float32s()
	if err != nil {
		return nil, err
	}
	for i := range v {
		v[i]++
	}
	return f32Host(h, v, h.Shape), nil
}

func asF32(h *tensor.Host, shape []int) (*tensor.Host, error) {
	v, err := h.Float32s()
	if err != nil {
		return nil, err
	}
	return f32Host(h, v, shape), nil
}

// tileF32 is untileF32's inverse: grouped value head j goes to srcHead(j).
func tileF32(v []float32, d *linDims, hd int) []float32 {
	out := make([]float32, len(v))
	for j := 0; j < d.nv; j++ {
		s := srcHead(j, d)
		copy(out[s*hd:(s+1)*hd], v[j*hd:(j+1)*hd])
	}
	return out
}

// tileRows is untileRows' inverse (rows after skip, value heads of hd rows,
// grouped → tiled).
func tileRows(h *tensor.Host, skip, hd int, d *linDims) (*tensor.Host, error) {
	if !d.tiled || d.nv == d.nk {
		return h, nil
	}
	if h.Rows() != skip+d.nv*hd {
		return nil, fmt.Errorf("%d rows, want %d", h.Rows(), skip+d.nv*hd)
	}
	return moveHeadRows(h, skip, hd, d, true)
}

// tileCols is untileCols' inverse for out_proj. A value head must be a whole
// number of storage blocks (any float format; Q8_0/Q4_0 with heads of 32k):
// quantized blocks are not re-encoded.
func tileCols(h *tensor.Host, d *linDims) (*tensor.Host, error) {
	if len(h.Shape) != 2 || h.Shape[1] != d.nv*d.dv {
		return nil, fmt.Errorf("shape %v, want [H, %d]", h.Shape, d.nv*d.dv)
	}
	if !d.tiled || d.nv == d.nk {
		return h, nil
	}
	rb, err := rowBytes(h)
	if err != nil {
		return nil, err
	}
	vals, bb, _ := tensor.BlockLayout(h.Format)
	if d.dv%vals != 0 {
		return nil, fmt.Errorf("value heads of %d columns are not whole %v blocks of %d", d.dv, h.Format, vals)
	}
	hb := d.dv / vals * bb
	out := make([]byte, len(h.Data))
	for r := 0; r < h.Rows(); r++ {
		row, dst := h.Data[r*rb:(r+1)*rb], out[r*rb:(r+1)*rb]
		for j := 0; j < d.nv; j++ {
			s := srcHead(j, d)
			copy(dst[s*hb:(s+1)*hb], row[j*hb:(j+1)*hb])
		}
	}
	c := *h
	c.Shape = slices.Clone(h.Shape)
	c.Data = out
	return &c, nil
}

// splitQKVZ is qkvzFromSplit's inverse: Qwen3-Next's in_proj_qkvz (per key
// head g: [q_g | k_g | v_g | z_g]) → attn_qkv ([q | k | v]) and attn_gate (z).
func splitQKVZ(h *tensor.Host, d *linDims) (qkv, z *tensor.Host, err error) {
	kd, vd, r := d.nk*d.dk, d.nv*d.dv, d.nv/d.nk
	if len(h.Shape) != 2 || h.Rows() != 2*kd+2*vd {
		return nil, nil, fmt.Errorf("shape %v, want [%d, H]", h.Shape, 2*kd+2*vd)
	}
	rb, err := rowBytes(h)
	if err != nil {
		return nil, nil, err
	}
	group := 2*d.dk + 2*r*d.dv
	rows := func(g, off, n int) []byte { return h.Data[(g*group+off)*rb : (g*group+off+n)*rb] }
	var q, k, v, zz []byte
	for g := 0; g < d.nk; g++ {
		q = append(q, rows(g, 0, d.dk)...)
		k = append(k, rows(g, d.dk, d.dk)...)
		v = append(v, rows(g, 2*d.dk, r*d.dv)...)
		zz = append(zz, rows(g, 2*d.dk+r*d.dv, r*d.dv)...)
	}
	cols := h.Shape[1]
	qkv = &tensor.Host{Format: h.Format, Shape: []int{2*kd + vd, cols}, Data: append(append(q, k...), v...), Source: h.Source}
	z = &tensor.Host{Format: h.Format, Shape: []int{vd, cols}, Data: zz, Source: h.Source}
	return qkv, z, nil
}

// IsHybrid reports whether a model type is written as a hybrid GGUF
// architecture (HybridMeta, HybridTensors).
func IsHybrid(modelType string) bool { return hybridArch(modelType) != "" }
