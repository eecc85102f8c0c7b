// Package ggufconv writes a Hugging Face Qwen3-Next / Qwen3.5 / Qwen3.5-MoE
// checkpoint as a GGUF file the way llama.cpp's converter lays it out, for
// tests of engine/gguf's inverse mapping (hybrid.go). It is our reading of
// llama.cpp's convert_hf_to_gguf (Qwen3NextModel.modify_tensors and
// set_gguf_parameters, _LinearAttentionVReorderBase.modify_tensors,
// Qwen2MoeModel expert stacking, gguf-py constants/tensor_mapping names),
// written from that source's behaviour, not its code; docs/engine.md, "GGUF specifics"
// lists the transformations. No llama.cpp-produced hybrid file was available
// to check it against, so agreement with it is what the tests show, and a
// real file remains the final check.
package ggufconv

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/gguf"
	"github.com/macpool/macpool/engine/tensor"
)

// Arch is the GGUF architecture llama.cpp writes for a model type.
func Arch(modelType string) (string, error) {
	switch modelType {
	case "qwen3_next":
		return "qwen3next", nil
	case "qwen3_5_text":
		return "qwen35", nil
	case "qwen3_5_moe_text":
		return "qwen35moe", nil
	}
	return "", fmt.Errorf("ggufconv: model type %q is not a hybrid Qwen model", modelType)
}

// Options change what Convert writes.
type Options struct {
	// LegacyQKVZ writes Qwen3-Next's in_proj_qkvz whole as ssm_in (older
	// converters; llama.cpp still loads it) instead of attn_qkv + attn_gate.
	LegacyQKVZ bool
	// FakeQuant stores every matrix as float32 after a round trip through
	// format (quantize, dequantize): the same weights as a quantized file,
	// as a reference for it.
	FakeQuant bool
	// NoRopeScaling leaves out the rope.scaling.* keys of the config's
	// rope scaling (a file that must miss a scaled reference).
	NoRopeScaling bool
	// MergedGateUp writes gate and up experts as one ffn_gate_up_exps
	// tensor (newer llama.cpp converters, some MoE models).
	MergedGateUp bool
}

// Convert writes the HF checkpoint in dir as a GGUF file at out with its
// matrices stored in format (F32, F16, BF16, Q8_0 or Q4_0); 1-D tensors are
// F32, as llama.cpp keeps them, and so is conv1d (rows of K=4 values).
func Convert(dir, out string, format tensor.Format, opt Options) error {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return err
	}
	defer ck.Close()
	c := ck.Config()
	arch, err := Arch(c.ModelType)
	if err != nil {
		return err
	}
	meta := metadata(arch, c, !opt.NoRopeScaling)
	f32 := func(name string) ([]float32, []int, error) {
		h, err := ck.Tensor(name)
		if err != nil {
			return nil, nil, err
		}
		v, err := h.Float32s() // the converter upcasts bf16 to float32 first
		return v, slices.Clone(h.Shape), err
	}
	var ts []gguf.WriteTensor
	add := func(name string, v []float32, shape []int) error {
		fm := format
		if len(shape) == 1 || strings.Contains(name, "ssm_conv1d") {
			fm = tensor.F32
		}
		h, err := encode(name, v, shape, fm)
		if err != nil {
			return err
		}
		if opt.FakeQuant && fm != tensor.F32 {
			if v, err = h.Float32s(); err != nil {
				return err
			}
			if h, err = encode(name, v, shape, tensor.F32); err != nil {
				return err
			}
		}
		ts = append(ts, gguf.WriteTensor{Name: name, Host: h})
		return nil
	}
	nk, nv, dk, dv := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim
	tiled := arch != "qwen3next" && nk != nv
	for _, g := range [][2]string{{"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"}, {"lm_head.weight", "output.weight"}} {
		if !ck.Has(g[0]) {
			continue
		}
		v, s, err := f32(g[0])
		if err != nil {
			return err
		}
		if strings.HasSuffix(g[0], "norm.weight") {
			plusOne(v)
		}
		if err := add(g[1], v, s); err != nil {
			return err
		}
	}
	for i := 0; i < c.NumHiddenLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		b := fmt.Sprintf("blk.%d.", i)
		simple := [][2]string{
			{"input_layernorm.weight", "attn_norm.weight"},
			{"post_attention_layernorm.weight", "post_attention_norm.weight"},
			{"self_attn.q_proj.weight", "attn_q.weight"},
			{"self_attn.k_proj.weight", "attn_k.weight"},
			{"self_attn.v_proj.weight", "attn_v.weight"},
			{"self_attn.o_proj.weight", "attn_output.weight"},
			{"self_attn.q_norm.weight", "attn_q_norm.weight"},
			{"self_attn.k_norm.weight", "attn_k_norm.weight"},
			{"linear_attn.in_proj_ba.weight", "ssm_ba.weight"},
			{"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
			{"linear_attn.in_proj_z.weight", "attn_gate.weight"},
			{"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
			{"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
			{"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
			{"linear_attn.dt_bias", "ssm_dt.bias"},
			{"linear_attn.A_log", "ssm_a"},
			{"linear_attn.norm.weight", "ssm_norm.weight"},
			{"linear_attn.out_proj.weight", "ssm_out.weight"},
			{"mlp.gate_proj.weight", "ffn_gate.weight"},
			{"mlp.up_proj.weight", "ffn_up.weight"},
			{"mlp.down_proj.weight", "ffn_down.weight"},
			{"mlp.gate.weight", "ffn_gate_inp.weight"},
			{"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
			{"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
			{"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
			{"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
		}
		for _, s := range simple {
			hf, name := p+s[0], b+s[1]
			if !ck.Has(hf) {
				continue
			}
			v, shape, err := f32(hf)
			if err != nil {
				return err
			}
			// _LinearAttentionVReorderBase: value heads grouped → tiled.
			if tiled {
				switch s[0] {
				case "linear_attn.in_proj_qkv.weight":
					tileRows(v, shape, 2*nk*dk, dv, nk, nv)
				case "linear_attn.in_proj_z.weight":
					tileRows(v, shape, 0, dv, nk, nv)
				case "linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight", "linear_attn.A_log", "linear_attn.dt_bias":
					tileRows(v, shape, 0, 1, nk, nv)
				case "linear_attn.conv1d.weight":
					tileRows(v, []int{shape[0], shape[len(shape)-1]}, 2*nk*dk, dv, nk, nv)
				case "linear_attn.out_proj.weight":
					tileCols(v, shape, dv, nk, nv)
				}
			}
			// Qwen3NextModel.modify_tensors.
			switch {
			case s[0] == "linear_attn.A_log":
				for j, a := range v {
					v[j] = -float32(math.Exp(float64(a)))
				}
			case s[0] == "linear_attn.conv1d.weight":
				shape = []int{shape[0], shape[len(shape)-1]} // squeeze [C,1,K]
			case strings.HasSuffix(s[0], "norm.weight") && s[0] != "linear_attn.norm.weight":
				plusOne(v)
			}
			if err := add(name, v, shape); err != nil {
				return err
			}
		}
		if hf := p + "linear_attn.in_proj_qkvz.weight"; ck.Has(hf) {
			v, shape, err := f32(hf)
			if err != nil {
				return err
			}
			if opt.LegacyQKVZ {
				err = add(b+"ssm_in.weight", v, shape)
			} else {
				qkv, z := splitQKVZ(v, shape[1], nk, nv, dk, dv)
				if err = add(b+"attn_qkv.weight", qkv, []int{2*nk*dk + nv*dv, shape[1]}); err == nil {
					err = add(b+"attn_gate.weight", z, []int{nv * dv, shape[1]})
				}
			}
			if err != nil {
				return err
			}
		}
		// Qwen2MoeModel: experts stacked into [E, out, in]; with
		// MergedGateUp, gate and up in one [E, 2·out, in] (per expert its
		// gate rows, then its up rows, as llama.cpp's build_moe_ffn splits it).
		stacks := [][]string{{"gate_proj", "ffn_gate_exps.weight"}, {"up_proj", "ffn_up_exps.weight"}, {"down_proj", "ffn_down_exps.weight"}}
		if opt.MergedGateUp {
			stacks = [][]string{{"gate_proj", "ffn_gate_up_exps.weight", "up_proj"}, {"down_proj", "ffn_down_exps.weight"}}
		}
		for _, w := range stacks {
			if c.NumExperts == 0 {
				break
			}
			var all []float32
			var shape []int
			for e := 0; e < c.NumExperts; e++ {
				for _, part := range append([]string{w[0]}, w[2:]...) {
					v, s, err := f32(p + "mlp.experts." + strconv.Itoa(e) + "." + part + ".weight")
					if err != nil {
						return err
					}
					all, shape = append(all, v...), s
				}
			}
			shape = append([]int{c.NumExperts}, shape...)
			shape[1] *= len(w) - 1
			if err := add(b+w[1], all, shape); err != nil {
				return err
			}
		}
	}
	return gguf.Write(out, meta, ts)
}

// metadata is what Qwen3NextModel.set_gguf_parameters (with the TextModel and
// Qwen2MoeModel parts) writes, and the keys llama.cpp needs to load a file
// without a vocabulary (tokenizer model "none" and the vocabulary size).
func metadata(arch string, c *checkpoint.Config, scaling bool) []gguf.Meta {
	u := func(v int) uint32 { return uint32(v) }
	m := []gguf.Meta{
		{Key: "general.architecture", Value: arch},
		{Key: arch + ".block_count", Value: u(c.NumHiddenLayers)},
		{Key: arch + ".context_length", Value: u(c.MaxPositionEmbeddings)},
		{Key: arch + ".embedding_length", Value: u(c.HiddenSize)},
		{Key: arch + ".feed_forward_length", Value: u(c.IntermediateSize)},
		{Key: arch + ".attention.head_count", Value: u(c.NumAttentionHeads)},
		{Key: arch + ".attention.head_count_kv", Value: u(c.NumKeyValueHeads)},
		{Key: arch + ".attention.key_length", Value: u(c.HeadDim)},
		{Key: arch + ".attention.value_length", Value: u(c.HeadDim)},
		{Key: arch + ".attention.layer_norm_rms_epsilon", Value: float32(c.RMSNormEps)},
		{Key: arch + ".rope.freq_base", Value: float32(c.RopeTheta)},
		{Key: arch + ".rope.dimension_count", Value: u(int(float64(c.HeadDim) * c.PartialRotaryFactor))},
		{Key: arch + ".ssm.conv_kernel", Value: u(c.LinearConvKernelDim)},
		{Key: arch + ".ssm.state_size", Value: u(c.LinearKeyHeadDim)},
		{Key: arch + ".ssm.group_count", Value: u(c.LinearNumKeyHeads)},
		{Key: arch + ".ssm.time_step_rank", Value: u(c.LinearNumValueHeads)},
		{Key: arch + ".ssm.inner_size", Value: u(c.LinearValueHeadDim * c.LinearNumValueHeads)},
		{Key: arch + ".full_attention_interval", Value: u(4)},
		{Key: "tokenizer.ggml.model", Value: "none"},
		{Key: arch + ".vocab_size", Value: u(c.VocabSize)},
	}
	if arch != "qwen3next" { // Qwen3.5's mrope_section, padded to 4; for text any split works
		pairs := int(float64(c.HeadDim)*c.PartialRotaryFactor) / 2
		m = append(m, gguf.Meta{Key: arch + ".rope.dimension_sections", Value: []int32{int32(pairs - pairs/2), int32(pairs / 2), 0, 0}})
	}
	if rs := c.RopeScaling; scaling { // the keys TextModel.set_gguf_parameters writes for linear / yarn
		m = append(m, gguf.RopeMeta(arch, gguf.RopeScaling{Type: rs.Type, Factor: rs.Factor, OriginalContextLength: rs.OriginalMaxPositionEmbeddings,
			AttentionFactor: rs.AttentionFactor, BetaFast: rs.BetaFast, BetaSlow: rs.BetaSlow})...)
	}
	if c.NumExperts > 0 {
		m = append(m,
			gguf.Meta{Key: arch + ".expert_count", Value: u(c.NumExperts)},
			gguf.Meta{Key: arch + ".expert_used_count", Value: u(c.NumExpertsPerTok)},
			gguf.Meta{Key: arch + ".expert_feed_forward_length", Value: u(c.MoEIntermediateSize)},
			gguf.Meta{Key: arch + ".expert_shared_feed_forward_length", Value: u(c.SharedExpertIntermediateSize)},
		)
	}
	return m
}

func plusOne(v []float32) {
	for i := range v {
		v[i] += 1
	}
}

// tileRows reorders, in place, the rows after skip of a [rows, cols] matrix
// (or a vector, cols 1) holding nv value heads of hd rows from grouped
// order (head g*r+i) to tiled order (position i*nk+g).
func tileRows(v []float32, shape []int, skip, hd, nk, nv int) {
	cols := 1
	if len(shape) > 1 {
		cols = shape[len(shape)-1]
	}
	r := nv / nk
	part := v[skip*cols:]
	src := slices.Clone(part)
	n := hd * cols
	for g := 0; g < nk; g++ {
		for i := 0; i < r; i++ {
			to, from := i*nk+g, g*r+i
			copy(part[to*n:(to+1)*n], src[from*n:(from+1)*n])
		}
	}
}

// tileCols reorders the columns of a [rows, nv*hd] matrix the same way.
func tileCols(v []float32, shape []int, hd, nk, nv int) {
	cols := shape[1]
	for row := 0; row < shape[0]; row++ {
		tileRows(v[row*cols:(row+1)*cols], []int{cols}, 0, hd, nk, nv)
	}
}

// splitQKVZ de-interleaves in_proj_qkvz (per key head g: q_g, k_g, v_g, z_g)
// into [q all | k all | v all] and z, as Qwen3NextModel.modify_tensors does.
func splitQKVZ(v []float32, cols, nk, nv, dk, dv int) (qkv, z []float32) {
	r := nv / nk
	group := 2*dk + 2*r*dv
	rows := func(g, off, n int) []float32 { return v[(g*group+off)*cols : (g*group+off+n)*cols] }
	var q, k, vv []float32
	for g := 0; g < nk; g++ {
		q = append(q, rows(g, 0, dk)...)
		k = append(k, rows(g, dk, dk)...)
		vv = append(vv, rows(g, 2*dk, r*dv)...)
		z = append(z, rows(g, 2*dk+r*dv, r*dv)...)
	}
	qkv = append(append(q, k...), vv...)
	return qkv, z
}

// encode stores v (row-major, shape) in format.
func encode(name string, v []float32, shape []int, format tensor.Format) (*tensor.Host, error) {
	le := binary.LittleEndian
	var b []byte
	switch format {
	case tensor.F32:
		for _, x := range v {
			b = le.AppendUint32(b, math.Float32bits(x))
		}
	case tensor.F16:
		for _, x := range v {
			b = le.AppendUint16(b, tensor.F32ToF16(x))
		}
	case tensor.BF16:
		for _, x := range v {
			b = le.AppendUint16(b, tensor.F32ToBF16(x))
		}
	case tensor.Q8_0, tensor.Q4_0:
		if len(v)%32 != 0 || shape[len(shape)-1]%32 != 0 {
			return nil, fmt.Errorf("ggufconv: %s %v: rows are not whole blocks of 32", name, shape)
		}
		for i := 0; i < len(v); i += 32 {
			if format == tensor.Q8_0 {
				b = q8Block(b, v[i:i+32])
			} else {
				b = q4Block(b, v[i:i+32])
			}
		}
	default:
		return nil, fmt.Errorf("ggufconv: format %v not supported", format)
	}
	return &tensor.Host{Name: name, Format: format, Shape: shape, Data: b}, nil
}

// q8Block is ggml's quantize_row_q8_0_ref for one block.
func q8Block(b []byte, x []float32) []byte {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	b = binary.LittleEndian.AppendUint16(b, tensor.F32ToF16(d))
	for _, v := range x {
		b = append(b, byte(int8(math.Round(float64(v*id)))))
	}
	return b
}

// q4Block is ggml's quantize_row_q4_0_ref for one block.
func q4Block(b []byte, x []float32) []byte {
	var amax, mx float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, mx = a, v
		}
	}
	d := mx / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	b = binary.LittleEndian.AppendUint16(b, tensor.F32ToF16(d))
	for j := 0; j < 16; j++ {
		q0 := min(15, int(int8(x[j]*id+8.5)))
		q1 := min(15, int(int8(x[16+j]*id+8.5)))
		b = append(b, byte(q0)|byte(q1)<<4)
	}
	return b
}
