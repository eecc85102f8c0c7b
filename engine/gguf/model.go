package gguf

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/macpool/macpool/engine/tensor"
)

// Config is a model's architecture read from GGUF metadata, with the field
// names and meanings of checkpoint.Config (which is built from it: this
// package cannot import checkpoint, which imports it).
type Config struct {
	ModelType             string // qwen2, qwen3, qwen3_moe, qwen3_next, qwen3_5_text, qwen3_5_moe_text
	HiddenSize            int
	IntermediateSize      int
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int
	HeadDim               int
	VocabSize             int
	MaxPositionEmbeddings int

	RMSNormEps          float64
	RopeTheta           float64
	PartialRotaryFactor float64

	TieWordEmbeddings bool
	AttentionBias     bool
	LayerTypes        []string

	BOSTokenID  int // -1 if none
	EOSTokenIDs []int

	NumExperts                   int
	NumExpertsPerTok             int
	MoEIntermediateSize          int
	SharedExpertIntermediateSize int
	DecoderSparseStep            int
	NormTopKProb                 bool
	MLPOnlyLayers                []int

	// Linear attention (qwen3next, qwen35, qwen35moe; hybrid.go).
	LinearConvKernelDim int
	LinearKeyHeadDim    int
	LinearValueHeadDim  int
	LinearNumKeyHeads   int
	LinearNumValueHeads int

	// RopeScaling is ARCH.rope.scaling.* (rope.go); zero: none.
	RopeScaling RopeScaling
}

// architectures maps general.architecture to the Hugging Face model_type.
// llama.cpp's converter writes these three with the Hugging Face tensors
// unchanged apart from names and (for experts) stacking: it permutes Q/K only
// for the llama family, and stores Qwen2/Qwen3 norms as-is (w, not 1+w).
// Qwen3-Next and Qwen3.5 GGUFs (qwen3next, qwen35, qwen35moe) change the
// stored values of several tensors (norms stored as 1+w, A_log, conv1d,
// fused projections, value-head order): hybridArchs in hybrid.go.
var architectures = map[string]string{
	"qwen2":    "qwen2",
	"qwen3":    "qwen3",
	"qwen3moe": "qwen3_moe",
}

// hfRef locates a canonical tensor in the file: a directory entry and, for
// one expert of a stacked tensor, its index (-1 otherwise).
type hfRef struct {
	info   int
	expert int
	// half is 1 (gate_proj: first half of the rows) or 2 (up_proj: second
	// half) of one expert of a merged ffn_gate_up_exps tensor, else 0.
	half int
	xf   *hybridXform // hybrid architectures: how the stored tensor becomes the HF one (nil: as stored)
}

// Architecture is general.architecture.
func (f *File) Architecture() string { return f.arch }

var (
	blkName = regexp.MustCompile(`^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$`)

	// Per-layer GGUF names → HF names (after "model.layers.N.").
	layerNames = map[string]string{
		"attn_norm":     "input_layernorm",
		"ffn_norm":      "post_attention_layernorm",
		"attn_q":        "self_attn.q_proj",
		"attn_k":        "self_attn.k_proj",
		"attn_v":        "self_attn.v_proj",
		"attn_output":   "self_attn.o_proj",
		"attn_q_norm":   "self_attn.q_norm",
		"attn_k_norm":   "self_attn.k_norm",
		"ffn_gate":      "mlp.gate_proj",
		"ffn_up":        "mlp.up_proj",
		"ffn_down":      "mlp.down_proj",
		"ffn_gate_inp":  "mlp.gate",
		"ffn_gate_exps": "gate_proj",
		"ffn_up_exps":   "up_proj",
		"ffn_down_exps": "down_proj",
	}
	globalNames = map[string]string{
		"token_embd.weight":  "model.embed_tokens.weight",
		"output_norm.weight": "model.norm.weight",
		"output.weight":      "lm_head.weight",
	}
)

// mapArchitecture fills the HF name index for supported architectures and
// records why not otherwise.
func (f *File) mapArchitecture() {
	arch, ok := f.String("general.architecture")
	f.arch = arch
	if !ok {
		f.archErr = fmt.Errorf("gguf %s: no general.architecture: %w", f.path, ErrUnsupportedArchitecture)
		return
	}
	if _, ok := hybridArchs[arch]; ok {
		f.mapHybrid()
		return
	}
	if _, ok := architectures[arch]; !ok {
		f.archErr = fmt.Errorf("gguf %s: architecture %q (supported: qwen2, qwen3, qwen3moe, qwen3next, qwen35, qwen35moe): %w", f.path, arch, ErrUnsupportedArchitecture)
		return
	}
	f.hf = make(map[string]hfRef, len(f.infos))
	for i := range f.infos {
		ti := &f.infos[i]
		if hf, ok := globalNames[ti.Name]; ok {
			f.hf[hf] = hfRef{info: i, expert: -1}
			continue
		}
		m := blkName.FindStringSubmatch(ti.Name)
		if m == nil {
			continue // e.g. rope_freqs: not a Hugging Face weight
		}
		if m[2] == mergedGateUp {
			f.mapGateUp(i, "model.layers."+m[1]+".", m[3])
			continue
		}
		part, ok := layerNames[m[2]]
		if !ok {
			continue
		}
		prefix := "model.layers." + m[1] + "."
		switch m[2] {
		case "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps":
			if len(ti.Dims) != 3 {
				continue // reported by Tensors/Config as missing
			}
			for e := 0; e < int(ti.Dims[2]); e++ {
				f.hf[prefix+"mlp.experts."+strconv.Itoa(e)+"."+part+"."+m[3]] = hfRef{info: i, expert: e}
			}
		default:
			f.hf[prefix+part+"."+m[3]] = hfRef{info: i, expert: -1}
		}
	}
}

// Names lists the canonical names of the tensors the file provides, sorted.
func (f *File) Names() []string { return sortedKeys(f.hf) }

// Has says whether the file provides the tensor with canonical name name.
func (f *File) Has(name string) bool {
	_, ok := f.hf[name]
	return ok
}

// Source tells which directory entry serves the canonical tensor name, and
// for one expert of a stacked tensor its index (-1 otherwise).
func (f *File) Source(name string) (ggufName string, expert int, ok bool) {
	ref, ok := f.hf[name]
	if !ok {
		return "", 0, false
	}
	return f.infos[ref.info].Name, ref.expert, true
}

// Tensor returns a tensor by canonical Hugging Face name with its logical
// shape. One expert of a stacked tensor is a view of the stacked bytes.
func (f *File) Tensor(name string) (*tensor.Host, error) {
	if f.archErr != nil {
		return nil, f.archErr
	}
	ref, ok := f.hf[name]
	if !ok {
		return nil, fmt.Errorf("gguf %s: no tensor %s", f.path, name)
	}
	ti := &f.infos[ref.info]
	h, err := f.host(ti, name)
	if err == nil && ref.xf != nil {
		return f.applyXform(ref, h)
	}
	if err != nil || ref.expert < 0 {
		return h, err
	}
	per := ti.Size / ti.Dims[2]
	h.Shape = h.Shape[1:]
	off := uint64(ref.expert) * per
	if ref.half > 0 {
		// ffn_gate_up_exps: each expert's rows are gate_proj then up_proj
		// (llama.cpp's build_moe_ffn views the first and second half of the
		// product); a row is whole blocks, so each half is a byte range.
		per /= 2
		off += uint64(ref.half-1) * per
		h.Shape[0] /= 2
	}
	h.Data = h.Data[off : off+per : off+per]
	return h, nil
}

// mergedGateUp is the GGUF stem of gate and up experts stacked in one tensor
// ([E, 2·F, H]: per expert F gate rows, then F up rows), which newer
// llama.cpp converters write for some MoE models and llama.cpp loads in
// place of ffn_gate_exps + ffn_up_exps.
const mergedGateUp = "ffn_gate_up_exps"

// mapGateUp indexes the per-expert gate_proj and up_proj views of the
// merged tensor at directory entry i (prefix: "model.layers.N.").
func (f *File) mapGateUp(i int, prefix, suffix string) {
	ti := &f.infos[i]
	if len(ti.Dims) != 3 || ti.Dims[1]%2 != 0 {
		return // the views are then missing: reported by Config
	}
	for e := 0; e < int(ti.Dims[2]); e++ {
		pe := prefix + "mlp.experts." + strconv.Itoa(e) + "."
		f.hf[pe+"gate_proj."+suffix] = hfRef{info: i, expert: e, half: 1}
		f.hf[pe+"up_proj."+suffix] = hfRef{info: i, expert: e, half: 2}
	}
}

// expertShape is the logical shape of the view ref gives of a stacked tensor.
func expertShape(ti *TensorInfo, ref hfRef) []int {
	s := ti.Shape()[1:]
	if ref.half > 0 {
		s[0] /= 2
	}
	return s
}

// Tensors returns every canonical tensor of the file (see Tensor).
func (f *File) Tensors() (map[string]*tensor.Host, error) {
	if f.archErr != nil {
		return nil, f.archErr
	}
	out := make(map[string]*tensor.Host, len(f.hf))
	for name := range f.hf {
		h, err := f.Tensor(name)
		if err != nil {
			return nil, err
		}
		out[name] = h
	}
	return out, nil
}

// Config maps the metadata of a qwen2, qwen3 or qwen3moe file to a Config
// and checks that the tensors it implies are present with the right shapes.
func (f *File) Config() (*Config, error) {
	if f.archErr != nil {
		return nil, f.archErr
	}
	if n, ok := f.Int("split.count"); ok && n > 1 {
		return nil, fmt.Errorf("gguf %s: file is part of a split GGUF of %d files, which is not supported (merge them with llama-gguf-split --merge)", f.path, n)
	}
	if _, ok := hybridArchs[f.arch]; ok {
		return f.hybridConfig()
	}
	a := f.arch
	c := &Config{ModelType: architectures[a], PartialRotaryFactor: 1, BOSTokenID: -1}
	md := &metaReader{f: f, a: a}
	md.attention(c, func() int { return md.req("block_count") })
	if c.ModelType == "qwen3_moe" {
		md.experts(c)
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
	_, c.AttentionBias = f.Info("blk.0.attn_q.bias")
	c.LayerTypes = make([]string, c.NumHiddenLayers)
	for i := range c.LayerTypes {
		c.LayerTypes[i] = "full_attention"
	}
	if v, ok := f.Int("tokenizer.ggml.bos_token_id"); ok {
		c.BOSTokenID = v
	}
	c.EOSTokenIDs = f.eosIDs()
	if c.NumExperts > 0 {
		for i := 0; i < c.NumHiddenLayers; i++ {
			_, merged := f.Info(fmt.Sprintf("blk.%d.%s.weight", i, mergedGateUp))
			if _, ok := f.Info(fmt.Sprintf("blk.%d.ffn_gate_exps.weight", i)); !ok && !merged {
				if _, dense := f.Info(fmt.Sprintf("blk.%d.ffn_gate.weight", i)); dense {
					c.MLPOnlyLayers = append(c.MLPOnlyLayers, i)
				}
			}
		}
	}
	if err := f.checkShapes(c); err != nil {
		return nil, err
	}
	return c, nil
}

// eosIDs are the ids that end generation: eos, then eot and eom if set.
func (f *File) eosIDs() []int {
	var ids []int
	for _, k := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		if v, ok := f.Int(k); ok && !slices.Contains(ids, v) {
			ids = append(ids, v)
		}
	}
	return ids
}

func joinErrs(errs []string) string {
	s := errs[0]
	for _, e := range errs[1:] {
		s += "; " + e
	}
	return s
}

// checkShapes verifies that every weight the config implies is present with
// the logical shape the engine expects, so a wrong file fails at open and
// not in the middle of a forward pass.
func (f *File) checkShapes(c *Config) error {
	h, q, kv := c.HiddenSize, c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
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
		want[p+"self_attn.q_proj.weight"] = []int{q, h}
		want[p+"self_attn.k_proj.weight"] = []int{kv, h}
		want[p+"self_attn.v_proj.weight"] = []int{kv, h}
		want[p+"self_attn.o_proj.weight"] = []int{h, q}
		if c.AttentionBias {
			want[p+"self_attn.q_proj.bias"] = []int{q}
			want[p+"self_attn.k_proj.bias"] = []int{kv}
			want[p+"self_attn.v_proj.bias"] = []int{kv}
		}
		if c.ModelType != "qwen2" {
			want[p+"self_attn.q_norm.weight"] = []int{c.HeadDim}
			want[p+"self_attn.k_norm.weight"] = []int{c.HeadDim}
		}
		if c.NumExperts > 0 && !slices.Contains(c.MLPOnlyLayers, i) {
			m := c.MoEIntermediateSize
			want[p+"mlp.gate.weight"] = []int{c.NumExperts, h}
			for e := 0; e < c.NumExperts; e++ {
				pe := fmt.Sprintf("%smlp.experts.%d.", p, e)
				want[pe+"gate_proj.weight"] = []int{m, h}
				want[pe+"up_proj.weight"] = []int{m, h}
				want[pe+"down_proj.weight"] = []int{h, m}
			}
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
			return fmt.Errorf("gguf %s: tensor %s (%s) is missing", f.path, name, ggufName(name))
		}
		ti := &f.infos[ref.info]
		got := ti.Shape()
		if ref.expert >= 0 {
			got = expertShape(ti, ref)
		}
		if !slices.Equal(got, want[name]) {
			return fmt.Errorf("gguf %s: tensor %s (%s) has shape %v, want %v", f.path, name, ti.Name, got, want[name])
		}
		if _, ok := ti.Type.Format(); !ok {
			return fmt.Errorf("gguf %s: tensor %s (%s) has type %v, which the engine cannot decode", f.path, name, ti.Name, ti.Type)
		}
	}
	return nil
}

// ggufName gives the GGUF spelling of a canonical name, for error messages.
func ggufName(hf string) string {
	for g, h := range globalNames {
		if h == hf {
			return g
		}
	}
	var n int
	var rest string
	if _, err := fmt.Sscanf(hf, "model.layers.%d.%s", &n, &rest); err != nil {
		return "?"
	}
	for g, h := range layerNames {
		if rest == h+".weight" || rest == h+".bias" {
			return fmt.Sprintf("blk.%d.%s.%s", n, g, rest[len(h)+1:])
		}
	}
	var e int
	var part string
	if _, err := fmt.Sscanf(rest, "mlp.experts.%d.%s", &e, &part); err == nil {
		for g, h := range layerNames {
			if part == h+".weight" {
				return fmt.Sprintf("blk.%d.%s.weight[%d]", n, g, e)
			}
		}
	}
	return "?"
}

// metaReader reads the metadata keys of one architecture (a), collecting
// every missing or bad key so that one error names them all.
type metaReader struct {
	f    *File
	a    string
	errs []string
}

// req is a required positive integer key.
func (r *metaReader) req(key string) int {
	v, ok := r.f.Int(r.a + "." + key)
	if !ok || v <= 0 {
		r.errs = append(r.errs, fmt.Sprintf("%s.%s missing or not a positive integer", r.a, key))
	}
	return v
}

// opt is an optional integer key.
func (r *metaReader) opt(key string, def int) int {
	if v, ok := r.f.Int(r.a + "." + key); ok {
		return v
	}
	return def
}

// attention fills what every Qwen architecture's metadata holds: sizes,
// heads, rotary and norm settings; layers gives the number of layers.
func (r *metaReader) attention(c *Config, layers func() int) {
	a := r.a
	c.HiddenSize = r.req("embedding_length")
	c.NumHiddenLayers = layers()
	c.NumAttentionHeads = r.req("attention.head_count")
	c.MaxPositionEmbeddings = r.opt("context_length", 0)
	c.IntermediateSize = r.opt("feed_forward_length", 0)
	c.NumKeyValueHeads = r.opt("attention.head_count_kv", c.NumAttentionHeads)
	if c.NumAttentionHeads > 0 {
		c.HeadDim = r.opt("attention.key_length", c.HiddenSize/c.NumAttentionHeads)
	}
	if v := r.opt("attention.value_length", c.HeadDim); v != c.HeadDim {
		r.errs = append(r.errs, fmt.Sprintf("%s.attention.value_length %d differs from key_length %d", a, v, c.HeadDim))
	}
	if rd, ok := r.f.Int(a + ".rope.dimension_count"); ok && c.HeadDim > 0 {
		c.PartialRotaryFactor = float64(rd) / float64(c.HeadDim)
	}
	var ok bool
	if c.RMSNormEps, ok = r.f.Float(a + ".attention.layer_norm_rms_epsilon"); !ok {
		r.errs = append(r.errs, a+".attention.layer_norm_rms_epsilon missing")
	}
	if c.RopeTheta, ok = r.f.Float(a + ".rope.freq_base"); !ok {
		c.RopeTheta = 10000 // llama.cpp's default
	}
	r.ropeScaling(c)
}

// experts fills the MoE sizes. llama.cpp's qwen3moe, qwen3next and
// qwen35moe graphs renormalise the top-k weights unless the file says not.
func (r *metaReader) experts(c *Config) {
	c.NumExperts = r.req("expert_count")
	c.NumExpertsPerTok = r.req("expert_used_count")
	c.MoEIntermediateSize = r.req("expert_feed_forward_length")
	c.DecoderSparseStep = 1
	c.NormTopKProb = true
	if v, ok := r.f.Bool(r.a + ".expert_weights_norm"); ok {
		c.NormTopKProb = v
	}
}

// bounds checks that counts which size loops and allocations are backed by
// tensors: every layer has several, every expert of every layer three views.
func (r *metaReader) bounds(c *Config) {
	if c.NumHiddenLayers > len(r.f.infos) {
		r.errs = append(r.errs, fmt.Sprintf("%s.block_count %d exceeds the %d tensors in the file", r.a, c.NumHiddenLayers, len(r.f.infos)))
	}
	if c.NumExperts > 0 && c.NumHiddenLayers > 0 && c.NumExperts > len(r.f.hf)/c.NumHiddenLayers {
		r.errs = append(r.errs, fmt.Sprintf("%s.expert_count %d exceeds the expert tensors in the file", r.a, c.NumExperts))
	}
}

// err is every problem found, or nil.
func (r *metaReader) err() error {
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("gguf %s: %s", r.f.path, joinErrs(r.errs))
}
