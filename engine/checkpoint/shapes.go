package checkpoint

import "fmt"

// TensorShapes lists every tensor a model of this config reads, by
// canonical name, with its logical shape ([out, in] for matrices). It is the
// loader's view of the architectures; model code binds the same names.
// Optional tensors that a config does not imply (e.g. biases when
// attention_bias is false) are not listed.
func (c *Config) TensorShapes() map[string][]int {
	h, v := c.HiddenSize, c.VocabSize
	m := map[string][]int{
		"model.embed_tokens.weight": {v, h},
		"model.norm.weight":         {h},
	}
	if !c.TieWordEmbeddings {
		m["lm_head.weight"] = []int{v, h}
	}
	gated := hasLinearAttention(c.ModelType) // q_proj also yields the output gate
	for i := 0; i < c.NumHiddenLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		m[p+"input_layernorm.weight"] = []int{h}
		m[p+"post_attention_layernorm.weight"] = []int{h}
		if c.IsLinearAttention(i) {
			la := p + "linear_attn."
			nk, nv, dk, dv := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim
			conv := 2*nk*dk + nv*dv
			if c.ModelType == "qwen3_next" {
				m[la+"in_proj_qkvz.weight"] = []int{2*nk*dk + 2*nv*dv, h}
				m[la+"in_proj_ba.weight"] = []int{2 * nv, h}
			} else {
				m[la+"in_proj_qkv.weight"] = []int{conv, h}
				m[la+"in_proj_z.weight"] = []int{nv * dv, h}
				m[la+"in_proj_b.weight"] = []int{nv, h}
				m[la+"in_proj_a.weight"] = []int{nv, h}
			}
			m[la+"conv1d.weight"] = []int{conv, 1, c.LinearConvKernelDim}
			m[la+"A_log"] = []int{nv}
			m[la+"dt_bias"] = []int{nv}
			m[la+"norm.weight"] = []int{dv}
			m[la+"out_proj.weight"] = []int{h, nv * dv}
		} else {
			sa := p + "self_attn."
			q, kv := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
			qOut := q
			if gated {
				qOut = 2 * q
			}
			m[sa+"q_proj.weight"] = []int{qOut, h}
			m[sa+"k_proj.weight"] = []int{kv, h}
			m[sa+"v_proj.weight"] = []int{kv, h}
			m[sa+"o_proj.weight"] = []int{h, q}
			if c.AttentionBias {
				m[sa+"q_proj.bias"] = []int{qOut}
				m[sa+"k_proj.bias"] = []int{kv}
				m[sa+"v_proj.bias"] = []int{kv}
			}
			if c.ModelType != "qwen2" {
				m[sa+"q_norm.weight"] = []int{c.HeadDim}
				m[sa+"k_norm.weight"] = []int{c.HeadDim}
			}
		}
		mlp := p + "mlp."
		if c.IsMoELayer(i) {
			mi := c.MoEIntermediateSize
			m[mlp+"gate.weight"] = []int{c.NumExperts, h}
			for e := 0; e < c.NumExperts; e++ {
				ep := fmt.Sprintf("%sexperts.%d.", mlp, e)
				m[ep+"gate_proj.weight"] = []int{mi, h}
				m[ep+"up_proj.weight"] = []int{mi, h}
				m[ep+"down_proj.weight"] = []int{h, mi}
			}
			if si := c.SharedExpertIntermediateSize; si > 0 {
				m[mlp+"shared_expert.gate_proj.weight"] = []int{si, h}
				m[mlp+"shared_expert.up_proj.weight"] = []int{si, h}
				m[mlp+"shared_expert.down_proj.weight"] = []int{h, si}
				m[mlp+"shared_expert_gate.weight"] = []int{1, h}
			}
		} else {
			m[mlp+"gate_proj.weight"] = []int{c.IntermediateSize, h}
			m[mlp+"up_proj.weight"] = []int{c.IntermediateSize, h}
			m[mlp+"down_proj.weight"] = []int{h, c.IntermediateSize}
		}
	}
	return m
}
