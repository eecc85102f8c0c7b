package gguf

// Qwen3-Next (qwen3next) and Qwen3.5 / Qwen3.5-MoE (qwen35, qwen35moe) GGUF
// files: the inverse of what llama.cpp's converter does to the Hugging Face
// tensors, so that Tensor gives back the canonical HF tensors that
// engine/qwen's hybrid model runs. What the converter does, read from
// llama.cpp's convert_hf_to_gguf (classes Qwen3NextModel,
// _LinearAttentionVReorderBase, Qwen3_5TextModel, Qwen3_5MoeTextModel,
// Qwen2MoeModel) and the loaders src/models/qwen3next.cpp / qwen35.cpp, is
// written down in docs/engine.md, "GGUF specifics" ("Hybrid architectures"):
//
//   - every `*norm.weight` except `linear_attn.norm.weight` is stored as 1+w
//     (input/post-attention/final norms and the attention q/k norms);
//   - `A_log` is stored as `ssm_a` = -exp(A_log); `dt_bias` as `ssm_dt.bias`;
//   - conv1d `[C,1,K]` is stored squeezed, `[C,K]`;
//   - qwen3next: `in_proj_qkvz` (grouped per key head) is split into
//     `attn_qkv` = [q all heads | k all heads | v all heads] and `attn_gate`
//     (z); legacy files keep it whole as `ssm_in`; `in_proj_ba` is kept as
//     `ssm_ba`;
//   - qwen35/qwen35moe with fewer key than value heads: the value heads of
//     in_proj_qkv (v rows), in_proj_z, in_proj_b/a, A_log, dt_bias, conv1d
//     (v channels) and out_proj (columns) are reordered from grouped
//     (by key head) to tiled order;
//   - MoE experts are stacked into `ffn_*_exps` as for qwen3moe; the shared
//     expert is `ffn_*_shexp`, its gate `ffn_gate_inp_shexp`.
//
// Tensors that need a change of values or order are materialised (copied)
// when asked for; all others stay views of the memory map.

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/macpool/macpool/engine/tensor"
)

// hybridArchs maps general.architecture to the Hugging Face model_type.
var hybridArchs = map[string]string{
	"qwen3next": "qwen3_next",
	"qwen35":    "qwen3_5_text",
	"qwen35moe": "qwen3_5_moe_text",
}

type xformKind int

const (
	xfNorm  xformKind = iota + 1 // stored 1+w → w (float32)
	xfALog                       // stored -exp(A_log), value heads tiled → A_log
	xfVec                        // per-value-head vector (dt_bias), tiled → grouped
	xfRowsV                      // matrix rows after `skip` hold tiled value heads of size hd
	xfConv                       // conv1d [C,K]: v channels tiled; → [C,1,K]
	xfColsV                      // out_proj: columns hold tiled value heads
	xfQKVZ                       // qwen3next attn_qkv + attn_gate → in_proj_qkvz
	xfRow                        // [H] → [1,H] (shared_expert_gate)
)

// linDims are the linear-attention sizes the transforms need.
type linDims struct {
	nk, nv, dk, dv int
	tiled          bool // value heads stored in tiled order (qwen35, qwen35moe)
}

// hybridXform says how a stored tensor becomes the HF one.
type hybridXform struct {
	kind  xformKind
	skip  int // xfRowsV: leading rows that are not value heads (in units of rows)
	hd    int // xfRowsV: rows per value head
	other int // xfQKVZ: directory index of attn_gate
	dims  *linDims
}

var blkAny = regexp.MustCompile(`^blk\.(\d+)\.([a-z_0-9]+?)(?:\.(weight|bias))?$`)

// hybridLayerNames maps per-layer GGUF names (without .weight/.bias) to HF
// names after "model.layers.N.". Names whose mapping depends on the
// architecture are handled in mapHybrid.
var hybridLayerNames = map[string]string{
	"attn_norm":           "input_layernorm",
	"post_attention_norm": "post_attention_layernorm",
	"attn_q":              "self_attn.q_proj",
	"attn_k":              "self_attn.k_proj",
	"attn_v":              "self_attn.v_proj",
	"attn_output":         "self_attn.o_proj",
	"attn_q_norm":         "self_attn.q_norm",
	"attn_k_norm":         "self_attn.k_norm",
	"ssm_in":              "linear_attn.in_proj_qkvz", // qwen3next legacy layout
	"ssm_ba":              "linear_attn.in_proj_ba",
	"ssm_beta":            "linear_attn.in_proj_b",
	"ssm_alpha":           "linear_attn.in_proj_a",
	"ssm_conv1d":          "linear_attn.conv1d",
	"ssm_dt":              "linear_attn.dt_bias", // ssm_dt.bias
	"ssm_a":               "linear_attn.A_log",   // no suffix
	"ssm_norm":            "linear_attn.norm",
	"ssm_out":             "linear_attn.out_proj",
	"ffn_gate":            "mlp.gate_proj",
	"ffn_up":              "mlp.up_proj",
	"ffn_down":            "mlp.down_proj",
	"ffn_gate_inp":        "mlp.gate",
	"ffn_gate_shexp":      "mlp.shared_expert.gate_proj",
	"ffn_up_shexp":        "mlp.shared_expert.up_proj",
	"ffn_down_shexp":      "mlp.shared_expert.down_proj",
	"ffn_gate_inp_shexp":  "mlp.shared_expert_gate",
	"ffn_gate_exps":       "gate_proj",
	"ffn_up_exps":         "up_proj",
	"ffn_down_exps":       "down_proj",
}

// hybridLinDims reads the linear-attention sizes (zero where missing; Config
// reports missing keys).
func (f *File) hybridLinDims() *linDims {
	a := f.arch
	d := &linDims{tiled: a != "qwen3next"}
	d.dk, _ = f.Int(a + ".ssm.state_size")
	d.nk, _ = f.Int(a + ".ssm.group_count")
	d.nv, _ = f.Int(a + ".ssm.time_step_rank")
	if inner, ok := f.Int(a + ".ssm.inner_size"); ok && d.nv > 0 {
		d.dv = inner / d.nv
	}
	return d
}

// hybridLayers is the number of decoder layers: block_count less the
// multi-token-prediction blocks appended after them (Qwen3.5 converters
// write them as extra blocks and set nextn_predict_layers).
func (f *File) hybridLayers() int {
	n, _ := f.Int(f.arch + ".block_count")
	if m, ok := f.Int(f.arch + ".nextn_predict_layers"); ok && m > 0 {
		n -= m
	}
	return n
}

// mapHybrid fills the HF name index of a qwen3next/qwen35/qwen35moe file.
func (f *File) mapHybrid() {
	d := f.hybridLinDims()
	nLayers := f.hybridLayers()
	f.hf = make(map[string]hfRef, len(f.infos))
	gates := map[string]int{} // qwen3next: layer → attn_gate index
	for i := range f.infos {
		if m := blkAny.FindStringSubmatch(f.infos[i].Name); m != nil && m[2] == "attn_gate" {
			gates[m[1]] = i
		}
	}
	norm := &hybridXform{kind: xfNorm}
	for i := range f.infos {
		ti := &f.infos[i]
		switch ti.Name {
		case "token_embd.weight":
			f.hf["model.embed_tokens.weight"] = hfRef{info: i, expert: -1}
			continue
		case "output.weight":
			f.hf["lm_head.weight"] = hfRef{info: i, expert: -1}
			continue
		case "output_norm.weight":
			f.hf["model.norm.weight"] = hfRef{info: i, expert: -1, xf: norm}
			continue
		}
		m := blkAny.FindStringSubmatch(ti.Name)
		if m == nil {
			continue
		}
		layer, err := strconv.Atoi(m[1])
		if err != nil || layer >= nLayers {
			continue // multi-token-prediction blocks are not used
		}
		stem, suffix := m[2], m[3]
		prefix := "model.layers." + m[1] + "."
		if stem == mergedGateUp && suffix == "weight" {
			f.mapGateUp(i, prefix, suffix)
			continue
		}
		ref := hfRef{info: i, expert: -1}
		hf, ok := hybridLayerNames[stem]
		switch {
		case stem == "attn_qkv" && d.tiled:
			hf, ok = "linear_attn.in_proj_qkv", true
			ref.xf = &hybridXform{kind: xfRowsV, skip: 2 * d.nk * d.dk, hd: d.dv, dims: d}
		case stem == "attn_qkv":
			g, has := gates[m[1]]
			if !has {
				continue // reported as missing in_proj_qkvz
			}
			hf, ok = "linear_attn.in_proj_qkvz", true
			ref.xf = &hybridXform{kind: xfQKVZ, other: g, dims: d}
		case stem == "attn_gate" && d.tiled:
			hf, ok = "linear_attn.in_proj_z", true
			ref.xf = &hybridXform{kind: xfRowsV, hd: d.dv, dims: d}
		case stem == "attn_gate":
			continue // part of in_proj_qkvz
		case !ok:
			continue
		case stem == "ssm_a":
			if suffix != "" {
				continue
			}
			ref.xf = &hybridXform{kind: xfALog, dims: d}
		case suffix == "":
			continue
		case stem == "ssm_dt":
			if suffix != "bias" {
				continue
			}
			ref.xf = &hybridXform{kind: xfVec, dims: d}
		case stem == "attn_norm" || stem == "post_attention_norm" || stem == "attn_q_norm" || stem == "attn_k_norm":
			ref.xf = norm
		case stem == "ssm_conv1d":
			ref.xf = &hybridXform{kind: xfConv, dims: d}
		case (stem == "ssm_beta" || stem == "ssm_alpha") && d.tiled:
			ref.xf = &hybridXform{kind: xfRowsV, hd: 1, dims: d}
		case stem == "ssm_out" && d.tiled:
			ref.xf = &hybridXform{kind: xfColsV, dims: d}
		case stem == "ffn_gate_inp_shexp":
			ref.xf = &hybridXform{kind: xfRow}
		}
		switch stem {
		case "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps":
			if len(ti.Dims) != 3 {
				continue
			}
			for e := 0; e < int(ti.Dims[2]); e++ {
				f.hf[prefix+"mlp.experts."+strconv.Itoa(e)+"."+hf+".weight"] = hfRef{info: i, expert: e}
			}
			continue
		case "ssm_a", "ssm_dt":
			f.hf[prefix+hf] = ref // HF names without .weight: A_log, dt_bias
			continue
		}
		name := prefix + hf + "."
		if suffix == "" {
			name += "weight"
		} else {
			name += suffix
		}
		f.hf[name] = ref
	}
}

// applyXform turns the stored tensor h (already named and shaped as stored)
// into the HF tensor.
func (f *File) applyXform(ref hfRef, h *tensor.Host) (*tensor.Host, error) {
	x := ref.xf
	d := x.dims
	fail := func(format string, args ...any) (*tensor.Host, error) {
		return nil, fmt.Errorf("gguf %s: tensor %s (%s): %s", f.path, h.Name, f.infos[ref.info].Name, fmt.Sprintf(format, args...))
	}
	if d != nil && (d.nk <= 0 || d.nv <= 0 || d.dk <= 0 || d.dv <= 0 || d.nv%d.nk != 0) {
		return fail("linear-attention sizes (ssm.group_count %d, ssm.time_step_rank %d, ssm.state_size %d, value head %d) are not valid", d.nk, d.nv, d.dk, d.dv)
	}
	switch x.kind {
	case xfNorm:
		v, err := h.Float32s()
		if err != nil {
			return nil, fmt.Errorf("gguf %s: %w", f.path, err)
		}
		for i := range v {
			v[i] -= 1
		}
		return f32Host(h, v, h.Shape), nil
	case xfALog, xfVec:
		v, err := h.Float32s()
		if err != nil {
			return nil, fmt.Errorf("gguf %s: %w", f.path, err)
		}
		if len(v) != d.nv {
			return fail("%d values, want %d (one per value head)", len(v), d.nv)
		}
		if x.kind == xfALog {
			for i, a := range v {
				if !(a < 0) {
					return fail("ssm_a[%d] = %g, but llama.cpp stores -exp(A_log) < 0", i, a)
				}
				v[i] = float32(math.Log(-float64(a)))
			}
		}
		if d.tiled {
			v = untileF32(v, d, 1)
		}
		return f32Host(h, v, []int{d.nv}), nil
	case xfRow:
		if len(h.Shape) == 1 {
			out := *h
			out.Shape = []int{1, h.Shape[0]}
			return &out, nil
		}
		return h, nil
	case xfRowsV:
		if h.Rows() != x.skip+d.nv*x.hd {
			return fail("%d rows, want %d", h.Rows(), x.skip+d.nv*x.hd)
		}
		return untileRows(h, x.skip, x.hd, d)
	case xfConv:
		if len(h.Shape) != 2 || h.Shape[0] != 2*d.nk*d.dk+d.nv*d.dv {
			return fail("shape %v, want [%d, K]", h.Shape, 2*d.nk*d.dk+d.nv*d.dv)
		}
		out := h
		if d.tiled {
			var err error
			if out, err = untileRows(h, 2*d.nk*d.dk, d.dv, d); err != nil {
				return nil, err
			}
		}
		c := *out
		c.Shape = []int{h.Shape[0], 1, h.Shape[1]}
		return &c, nil
	case xfColsV:
		if len(h.Shape) != 2 || h.Shape[1] != d.nv*d.dv {
			return fail("shape %v, want [H, %d]", h.Shape, d.nv*d.dv)
		}
		return untileCols(h, d)
	case xfQKVZ:
		gi := &f.infos[x.other]
		g, err := f.host(gi, h.Name)
		if err != nil {
			return nil, err
		}
		return qkvzFromSplit(h, g, d)
	}
	return fail("unknown transform %d", x.kind)
}

func f32Host(h *tensor.Host, v []float32, shape []int) *tensor.Host {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return &tensor.Host{Name: h.Name, Format: tensor.F32, Shape: slices.Clone(shape), Data: b, Source: h.Source}
}

// srcHead is the stored (tiled) index of grouped value head j: the converter
// views the heads as [nk, r] and transposes them to [r, nk].
func srcHead(j int, d *linDims) int {
	r := d.nv / d.nk
	return (j%r)*d.nk + j/r
}

func untileF32(v []float32, d *linDims, hd int) []float32 {
	out := make([]float32, len(v))
	for j := 0; j < d.nv; j++ {
		s := srcHead(j, d)
		copy(out[j*hd:(j+1)*hd], v[s*hd:(s+1)*hd])
	}
	return out
}

// rowBytes is the size of one stored row of h.
func rowBytes(h *tensor.Host) (int, error) {
	rb, err := tensor.RowBytes(h.Format, h.Cols())
	if err != nil {
		return 0, fmt.Errorf("tensor %s: %w", h.Name, err)
	}
	if len(h.Data) != rb*h.Rows() {
		return 0, fmt.Errorf("tensor %s: %d bytes for %v %v, want %d", h.Name, len(h.Data), h.Format, h.Shape, rb*h.Rows())
	}
	return rb, nil
}

// untileRows copies h with the value-head rows (hd rows each, after the
// first skip rows) put back in grouped order. Rows are moved whole, so any
// row format works.
func untileRows(h *tensor.Host, skip, hd int, d *linDims) (*tensor.Host, error) {
	if d.nv == d.nk {
		return h, nil
	}
	return moveHeadRows(h, skip, hd, d, false)
}

// moveHeadRows copies h with its value-head rows (hd rows each, after the
// first skip rows) moved between the file's tiled order and the grouped
// one: grouped head j is tiled head srcHead(j); toTiled picks the direction.
func moveHeadRows(h *tensor.Host, skip, hd int, d *linDims, toTiled bool) (*tensor.Host, error) {
	rb, err := rowBytes(h)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(h.Data))
	copy(out, h.Data[:skip*rb])
	hb := hd * rb
	for j := 0; j < d.nv; j++ {
		dst, src := j, srcHead(j, d)
		if toTiled {
			dst, src = src, dst
		}
		copy(out[skip*rb+dst*hb:skip*rb+(dst+1)*hb], h.Data[skip*rb+src*hb:skip*rb+(src+1)*hb])
	}
	c := *h
	c.Shape = slices.Clone(h.Shape)
	c.Data = out
	return &c, nil
}

// untileCols puts the value-head columns of out_proj back in grouped order.
// Where a head is a whole number of storage blocks the blocks are moved;
// otherwise (e.g. K-quants with 128-wide heads) the matrix is dequantized
// to float32.
func untileCols(h *tensor.Host, d *linDims) (*tensor.Host, error) {
	if d.nv == d.nk {
		return h, nil
	}
	rb, err := rowBytes(h)
	if err != nil {
		return nil, err
	}
	vals, bb, _ := tensor.BlockLayout(h.Format)
	rows := h.Rows()
	if d.dv%vals == 0 {
		hb := d.dv / vals * bb
		out := make([]byte, len(h.Data))
		for r := 0; r < rows; r++ {
			row, dst := h.Data[r*rb:(r+1)*rb], out[r*rb:(r+1)*rb]
			for j := 0; j < d.nv; j++ {
				s := srcHead(j, d)
				copy(dst[j*hb:(j+1)*hb], row[s*hb:(s+1)*hb])
			}
		}
		c := *h
		c.Shape = slices.Clone(h.Shape)
		c.Data = out
		return &c, nil
	}
	cols := h.Cols()
	v := make([]float32, rows*cols)
	row := make([]float32, cols)
	for r := 0; r < rows; r++ {
		if err := h.DecodeRow(r, row); err != nil {
			return nil, err
		}
		copy(v[r*cols:(r+1)*cols], untileF32(row, d, d.dv))
	}
	return f32Host(h, v, h.Shape), nil
}

// qkvzFromSplit rebuilds Qwen3-Next's in_proj_qkvz (per key head g:
// [q_g | k_g | v_g | z_g]) from attn_qkv ([q | k | v], heads in order) and
// attn_gate (z), moving whole rows. Both must have the same row format.
func qkvzFromSplit(qkv, gate *tensor.Host, d *linDims) (*tensor.Host, error) {
	kd, vd, r := d.nk*d.dk, d.nv*d.dv, d.nv/d.nk
	if qkv.Rows() != 2*kd+vd || gate.Rows() != vd || qkv.Cols() != gate.Cols() || qkv.Format != gate.Format {
		return nil, fmt.Errorf("tensor %s: attn_qkv %v %v and attn_gate %v %v do not fit %d key heads of %d and %d value heads of %d",
			qkv.Name, qkv.Format, qkv.Shape, gate.Format, gate.Shape, d.nk, d.dk, d.nv, d.dv)
	}
	rb, err := rowBytes(qkv)
	if err != nil {
		return nil, err
	}
	if _, err := rowBytes(gate); err != nil {
		return nil, err
	}
	out := make([]byte, 0, (2*kd+2*vd)*rb)
	rows := func(t *tensor.Host, from, n int) []byte { return t.Data[from*rb : (from+n)*rb] }
	for g := 0; g < d.nk; g++ {
		out = append(out, rows(qkv, g*d.dk, d.dk)...)
		out = append(out, rows(qkv, kd+g*d.dk, d.dk)...)
		out = append(out, rows(qkv, 2*kd+g*r*d.dv, r*d.dv)...)
		out = append(out, rows(gate, g*r*d.dv, r*d.dv)...)
	}
	return &tensor.Host{Name: qkv.Name, Format: qkv.Format, Shape: []int{2*kd + 2*vd, qkv.Cols()}, Data: out, Source: qkv.Source}, nil
}

// hybridConfig maps the metadata of a qwen3next/qwen35/qwen35moe file.
func (f *File) hybridConfig() (*Config, error) {
	a := f.arch
	c := &Config{ModelType: hybridArchs[a], PartialRotaryFactor: 1, BOSTokenID: -1}
	md := &metaReader{f: f, a: a}
	req := md.req
	md.attention(c, func() int { req("block_count"); return f.hybridLayers() })
	c.LinearConvKernelDim = req("ssm.conv_kernel")
	c.LinearKeyHeadDim = req("ssm.state_size")
	c.LinearNumKeyHeads = req("ssm.group_count")
	c.LinearNumValueHeads = req("ssm.time_step_rank")
	inner := req("ssm.inner_size")
	if c.LinearNumValueHeads > 0 && c.LinearNumKeyHeads > 0 {
		if inner%c.LinearNumValueHeads != 0 || c.LinearNumValueHeads%c.LinearNumKeyHeads != 0 {
			md.errs = append(md.errs, fmt.Sprintf("%s.ssm.inner_size %d / time_step_rank %d / group_count %d do not divide", a, inner, c.LinearNumValueHeads, c.LinearNumKeyHeads))
		} else {
			c.LinearValueHeadDim = inner / c.LinearNumValueHeads
		}
	}
	if c.ModelType != "qwen3_5_text" {
		md.experts(c)
		c.SharedExpertIntermediateSize = req("expert_shared_feed_forward_length")
	}
	if c.NumHiddenLayers <= 0 {
		md.errs = append(md.errs, fmt.Sprintf("%s.block_count less nextn_predict_layers is %d", a, c.NumHiddenLayers))
	}
	md.bounds(c)
	if err := md.err(); err != nil {
		return nil, err
	}

	emb, ok := f.Info("token_embd.weight")
	if !ok || len(emb.Dims) != 2 {
		return nil, fmt.Errorf("gguf %s: no 2-D token_embd.weight", f.path)
	}
	c.VocabSize = int(emb.Dims[1])
	_, hasOut := f.Info("output.weight")
	c.TieWordEmbeddings = !hasOut
	// Layer kinds follow the tensors (llama.cpp derives them from
	// full_attention_interval or attention.recurrent_layers; a file whose
	// tensors disagree with those does not load there either).
	c.LayerTypes = make([]string, c.NumHiddenLayers)
	for i := range c.LayerTypes {
		_, lin := f.Info(fmt.Sprintf("blk.%d.ssm_out.weight", i))
		_, full := f.Info(fmt.Sprintf("blk.%d.attn_output.weight", i))
		switch {
		case lin && !full:
			c.LayerTypes[i] = "linear_attention"
		case full && !lin:
			c.LayerTypes[i] = "full_attention"
		default:
			return nil, fmt.Errorf("gguf %s: layer %d has %s", f.path, i, map[bool]string{true: "both ssm_out and attn_output", false: "neither ssm_out nor attn_output"}[lin])
		}
	}
	if v, ok := f.Int("tokenizer.ggml.bos_token_id"); ok {
		c.BOSTokenID = v
	}
	c.EOSTokenIDs = f.eosIDs()
	if err := f.checkHybridShapes(c); err != nil {
		return nil, err
	}
	return c, nil
}

// checkHybridShapes verifies that every weight the config implies is present
// with the HF shape (after the transforms).
func (f *File) checkHybridShapes(c *Config) error {
	h := c.HiddenSize
	q, kv := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	nk, nv, dk, dv := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim
	conv := 2*nk*dk + nv*dv
	want := map[string][]int{
		"model.embed_tokens.weight": {c.VocabSize, h},
		"model.norm.weight":         {h},
	}
	if !c.TieWordEmbeddings {
		want["lm_head.weight"] = []int{c.VocabSize, h}
	}
	for i := 0; i < c.NumHiddenLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		want[p+"input_layernorm.weight"] = []int{h}
		want[p+"post_attention_layernorm.weight"] = []int{h}
		if c.LayerTypes[i] == "full_attention" {
			want[p+"self_attn.q_proj.weight"] = []int{2 * q, h}
			want[p+"self_attn.k_proj.weight"] = []int{kv, h}
			want[p+"self_attn.v_proj.weight"] = []int{kv, h}
			want[p+"self_attn.o_proj.weight"] = []int{h, q}
			want[p+"self_attn.q_norm.weight"] = []int{c.HeadDim}
			want[p+"self_attn.k_norm.weight"] = []int{c.HeadDim}
		} else {
			la := p + "linear_attn."
			if c.ModelType == "qwen3_next" {
				want[la+"in_proj_qkvz.weight"] = []int{2*nk*dk + 2*nv*dv, h}
				want[la+"in_proj_ba.weight"] = []int{2 * nv, h}
			} else {
				want[la+"in_proj_qkv.weight"] = []int{conv, h}
				want[la+"in_proj_z.weight"] = []int{nv * dv, h}
				want[la+"in_proj_b.weight"] = []int{nv, h}
				want[la+"in_proj_a.weight"] = []int{nv, h}
			}
			want[la+"conv1d.weight"] = []int{conv, 1, c.LinearConvKernelDim}
			want[la+"A_log"] = []int{nv}
			want[la+"dt_bias"] = []int{nv}
			want[la+"norm.weight"] = []int{dv}
			want[la+"out_proj.weight"] = []int{h, nv * dv}
		}
		if c.NumExperts > 0 {
			m := c.MoEIntermediateSize
			want[p+"mlp.gate.weight"] = []int{c.NumExperts, h}
			for e := 0; e < c.NumExperts; e++ {
				pe := fmt.Sprintf("%smlp.experts.%d.", p, e)
				want[pe+"gate_proj.weight"] = []int{m, h}
				want[pe+"up_proj.weight"] = []int{m, h}
				want[pe+"down_proj.weight"] = []int{h, m}
			}
			s := c.SharedExpertIntermediateSize
			want[p+"mlp.shared_expert.gate_proj.weight"] = []int{s, h}
			want[p+"mlp.shared_expert.up_proj.weight"] = []int{s, h}
			want[p+"mlp.shared_expert.down_proj.weight"] = []int{h, s}
			want[p+"mlp.shared_expert_gate.weight"] = []int{1, h}
		} else {
			m := c.IntermediateSize
			want[p+"mlp.gate_proj.weight"] = []int{m, h}
			want[p+"mlp.up_proj.weight"] = []int{m, h}
			want[p+"mlp.down_proj.weight"] = []int{h, m}
		}
	}
	for _, name := range sortedKeys(want) {
		ref, ok := f.hf[name]
		if !ok {
			return fmt.Errorf("gguf %s: tensor %s is missing (%s)", f.path, name, hybridSourceHint(name))
		}
		ti := &f.infos[ref.info]
		if _, ok := ti.Type.Format(); !ok {
			return fmt.Errorf("gguf %s: tensor %s (%s) has type %v, which the engine cannot decode", f.path, name, ti.Name, ti.Type)
		}
		got := hybridShape(ti, ref, c)
		if !slices.Equal(got, want[name]) {
			return fmt.Errorf("gguf %s: tensor %s (%s) has shape %v, want %v", f.path, name, ti.Name, got, want[name])
		}
		if ref.xf != nil && ref.xf.kind == xfQKVZ {
			gi := &f.infos[ref.xf.other]
			if gs := gi.Shape(); len(gs) != 2 || gs[0] != nv*dv || gs[1] != h || gi.Type != ti.Type {
				return fmt.Errorf("gguf %s: tensor %s (%s) has type %v shape %v, want %v [%d %d] like attn_qkv", f.path, name, gi.Name, gi.Type, gs, ti.Type, nv*dv, h)
			}
		}
	}
	return nil
}

// hybridShape is the HF shape a directory entry gives after its transform.
func hybridShape(ti *TensorInfo, ref hfRef, c *Config) []int {
	s := ti.Shape()
	if ref.expert >= 0 {
		return expertShape(ti, ref)
	}
	if ref.xf == nil {
		return s
	}
	switch ref.xf.kind {
	case xfConv:
		if len(s) == 2 {
			return []int{s[0], 1, s[1]}
		}
	case xfRow:
		if len(s) == 1 {
			return []int{1, s[0]}
		}
	case xfQKVZ:
		if len(s) == 2 {
			return []int{s[0] + c.LinearNumValueHeads*c.LinearValueHeadDim, s[1]}
		}
	}
	return s
}

// hybridSourceHint names the GGUF tensor(s) a canonical name comes from.
func hybridSourceHint(hf string) string {
	var n int
	var rest string
	if _, err := fmt.Sscanf(hf, "model.layers.%d.%s", &n, &rest); err != nil {
		return "global tensor"
	}
	switch rest {
	case "linear_attn.in_proj_qkvz.weight":
		return fmt.Sprintf("blk.%d.attn_qkv.weight + blk.%d.attn_gate.weight, or blk.%d.ssm_in.weight", n, n, n)
	case "linear_attn.in_proj_qkv.weight":
		return fmt.Sprintf("blk.%d.attn_qkv.weight", n)
	case "linear_attn.in_proj_z.weight":
		return fmt.Sprintf("blk.%d.attn_gate.weight", n)
	}
	for g, h := range hybridLayerNames {
		switch {
		case rest == h+".weight" || rest == h || rest == h+".bias":
			return fmt.Sprintf("blk.%d.%s", n, g)
		case strings.HasSuffix(g, "_exps") && strings.HasPrefix(rest, "mlp.experts.") && strings.HasSuffix(rest, "."+h+".weight"):
			return fmt.Sprintf("blk.%d.%s.weight", n, g)
		}
	}
	return "?"
}
