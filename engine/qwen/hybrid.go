package qwen

// The MoE and hybrid Qwen decoders: Qwen3-MoE (qwen3_moe), Qwen3-Next (qwen3_next),
// Qwen3.5 (qwen3_5_text) and Qwen3.5/3.6-MoE (qwen3_5_moe_text); the multimodal
// qwen3_5 / qwen3_5_moe checkpoints arrive here as their text model types. The maths and
// its transformers sources: docs/hybrid-models.md. They need the backend's optional
// engine.DeltaNetOps (linear-attention layers) and engine.MoEOps (sparse layers).

import (
	"fmt"
	"math"

	"github.com/macpool/macpool/engine"
)

func init() {
	for _, mt := range []string{"qwen3_moe", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"} {
		engine.Register(mt, func(be engine.Backend, src engine.Source) (engine.Arch, error) {
			return newHybrid(be, src)
		})
	}
}

// Hybrid is a Qwen decoder whose layers mix full attention and Gated DeltaNet token
// mixers and dense and sparse MLPs.
type Hybrid struct {
	be  engine.Backend
	dn  engine.DeltaNetOps // nil when no layer is linear
	moe engine.MoEOps      // nil when no layer is sparse

	Hidden, Heads, KVHeads, HeadDim, Vocab int
	RotaryDim                              int
	Eps                                    float32
	Theta                                  float64
	// Rope holds the rotary tables (rope scaling applied), computed at
	// load; Heads is set per call.
	Rope engine.RopeParams
	// NormOffset is 1 for the zero-centred (1+w) RMSNorms of Qwen3-Next and Qwen3.5
	// (decoder, final and q/k norms), 0 for Qwen3-MoE.
	NormOffset float32
	// GatedAttention: q_proj yields a query and an output gate per head (Qwen3-Next/3.5).
	GatedAttention bool
	DeltaNet       engine.DeltaNetParams
	MoE            engine.MoEParams

	// Stage is the range of decoder layers bound (engine.StageOf); Layers[i]
	// is decoder layer Stage.First+i. Embed is bound on the first stage
	// only, Norm and LMHead on the last only.
	Stage engine.Stage

	Embed  engine.Weight
	Layers []HybridLayer
	Norm   engine.Weight
	LMHead engine.Weight

	weights []engine.Weight
	bytes   int64 // stored bytes of the weights (WeightBytes)
}

// HybridLayer is one decoder layer: exactly one of Attn / Linear, and one of MLP / Sparse.
type HybridLayer struct {
	InputNorm, PostAttnNorm engine.Weight
	Attn                    *HybridAttention
	Linear                  *LinearAttention
	MLP                     *engine.Expert // dense SwiGLU MLP
	Sparse                  *engine.MoEWeights
}

// HybridAttention is a full-attention layer (the gate half of Q only when the model's
// GatedAttention is set).
type HybridAttention struct {
	Q, K, V, O   engine.Weight // Q: [heads*hd*(2 if gated), hidden]
	QNorm, KNorm engine.Weight // [hd]
}

// LinearAttention is a Gated DeltaNet layer. Qwen3-Next stores the projections fused and
// grouped per key head (QKVZ, BA); Qwen3.5 separately (QKV, Z, B, A).
type LinearAttention struct {
	QKVZ, BA     engine.Weight
	QKV, Z, B, A engine.Weight
	W            engine.DeltaNetWeights
	Out          engine.Weight // [hidden, value_dim]
}

func newHybrid(be engine.Backend, src engine.Source) (*Hybrid, error) {
	c := src.Config()
	m := &Hybrid{
		be:     be,
		Hidden: c.HiddenSize, Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads,
		HeadDim: c.HeadDim, Vocab: c.VocabSize,
		Eps: float32(c.RMSNormEps), Theta: c.RopeTheta,
		MoE: engine.MoEParams{TopK: c.NumExpertsPerTok, Normalize: c.NormTopKProb},
		DeltaNet: engine.DeltaNetParams{
			KeyHeads: c.LinearNumKeyHeads, ValueHeads: c.LinearNumValueHeads,
			KeyDim: c.LinearKeyHeadDim, ValueDim: c.LinearValueHeadDim,
			ConvKernel: c.LinearConvKernelDim, Eps: float32(c.RMSNormEps),
		},
	}
	hybrid := c.ModelType != "qwen3_moe"
	if hybrid {
		m.NormOffset, m.GatedAttention = 1, true
	}
	if c.ModelType == "qwen3_5_moe_text" {
		m.MoE.Normalize = true // its router always renormalises (no norm_topk_prob)
	}
	prf := attnDefaults(m.Hidden, m.Heads, &m.KVHeads, &m.HeadDim, c.PartialRotaryFactor)
	m.RotaryDim = int(float64(m.HeadDim) * prf) // int() truncation, as transformers
	if m.Hidden <= 0 || m.Heads <= 0 || m.HeadDim <= 0 || m.Vocab <= 0 || c.NumHiddenLayers <= 0 {
		return nil, fmt.Errorf("config: hidden_size %d, num_attention_heads %d, head_dim %d, vocab_size %d, num_hidden_layers %d must all be positive",
			m.Hidden, m.Heads, m.HeadDim, m.Vocab, c.NumHiddenLayers)
	}
	if err := checkAttn(m.Heads, m.KVHeads, m.HeadDim, m.RotaryDim, prf, m.Theta); err != nil {
		return nil, err
	}
	rope, err := engine.NewRopeParams(c, m.HeadDim, m.RotaryDim)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	m.Rope = rope
	if len(c.LayerTypes) != c.NumHiddenLayers {
		return nil, fmt.Errorf("config: field layer_types has %d entries, num_hidden_layers is %d", len(c.LayerTypes), c.NumHiddenLayers)
	}
	// The backend's optional ops are needed only for the stage's own layers.
	m.Stage = engine.StageOf(src)
	own := func(i int) bool { return i >= m.Stage.First && i < m.Stage.Last }
	linear, sparse := false, false
	for i, t := range c.LayerTypes {
		switch t {
		case "full_attention":
		case "linear_attention":
			if !hybrid {
				return nil, fmt.Errorf("config: field layer_types[%d]: %q is not supported by model_type %s", i, t, c.ModelType)
			}
			linear = linear || own(i)
		default:
			return nil, fmt.Errorf("config: field layer_types[%d]: unknown layer type %q (want full_attention or linear_attention)", i, t)
		}
		if c.ModelType == "qwen3_5_text" {
			continue // dense MLP on every layer
		}
		if own(i) && (c.ModelType == "qwen3_5_moe_text" || c.IsMoELayer(i)) {
			sparse = true
		}
	}
	if linear {
		dn, ok := be.(engine.DeltaNetOps)
		if !ok {
			return nil, fmt.Errorf("backend %s does not implement Gated DeltaNet (engine.DeltaNetOps)", be.Name())
		}
		m.dn = dn
		p := m.DeltaNet
		switch {
		case p.KeyHeads <= 0 || p.ValueHeads <= 0 || p.KeyDim <= 0 || p.ValueDim <= 0 || p.ConvKernel <= 0:
			return nil, fmt.Errorf("config: linear_num_key_heads %d, linear_num_value_heads %d, linear_key_head_dim %d, linear_value_head_dim %d, linear_conv_kernel_dim %d must all be positive",
				p.KeyHeads, p.ValueHeads, p.KeyDim, p.ValueDim, p.ConvKernel)
		case p.ValueHeads%p.KeyHeads != 0:
			return nil, fmt.Errorf("config: field linear_num_value_heads %d must be a multiple of linear_num_key_heads %d", p.ValueHeads, p.KeyHeads)
		}
	}
	if sparse {
		mo, ok := be.(engine.MoEOps)
		if !ok {
			return nil, fmt.Errorf("backend %s does not implement MoE (engine.MoEOps)", be.Name())
		}
		m.moe = mo
		switch {
		case c.NumExperts <= 0:
			return nil, fmt.Errorf("config: field num_experts %d must be positive", c.NumExperts)
		case m.MoE.TopK <= 0 || m.MoE.TopK > c.NumExperts:
			return nil, fmt.Errorf("config: field num_experts_per_tok %d must be in [1, num_experts %d]", m.MoE.TopK, c.NumExperts)
		case c.MoEIntermediateSize <= 0:
			return nil, fmt.Errorf("config: field moe_intermediate_size %d must be positive", c.MoEIntermediateSize)
		}
	}

	b := &binder{be: be, src: src}
	H, hd := m.Hidden, m.HeadDim
	if m.Stage.IsFirst() {
		m.Embed = b.bind("model.embed_tokens.weight", m.Vocab, H)
	}
	m.Layers = make([]HybridLayer, m.Stage.Last-m.Stage.First)
	for j := range m.Layers {
		l, i := &m.Layers[j], m.Stage.First+j
		p := fmt.Sprintf("model.layers.%d.", i)
		l.InputNorm = b.bind(p+"input_layernorm.weight", H)
		l.PostAttnNorm = b.bind(p+"post_attention_layernorm.weight", H)
		if c.LayerTypes[i] == "linear_attention" {
			l.Linear = m.bindLinear(b, src, p+"linear_attn.")
		} else {
			qRows := m.Heads * hd
			if m.GatedAttention {
				qRows *= 2
			}
			l.Attn = &HybridAttention{
				Q:     b.bind(p+"self_attn.q_proj.weight", qRows, H),
				K:     b.bind(p+"self_attn.k_proj.weight", m.KVHeads*hd, H),
				V:     b.bind(p+"self_attn.v_proj.weight", m.KVHeads*hd, H),
				O:     b.bind(p+"self_attn.o_proj.weight", H, m.Heads*hd),
				QNorm: b.bind(p+"self_attn.q_norm.weight", hd),
				KNorm: b.bind(p+"self_attn.k_norm.weight", hd),
			}
		}
		isSparse := c.ModelType == "qwen3_5_moe_text" || (c.ModelType != "qwen3_5_text" && c.IsMoELayer(i))
		if isSparse {
			l.Sparse = bindMoE(b, c, p+"mlp.")
		} else {
			l.MLP = bindMLP(b, p+"mlp.", c.IntermediateSize, H)
		}
	}
	if m.Stage.IsLast(c.NumHiddenLayers) {
		m.Norm = b.bind("model.norm.weight", H)
		m.LMHead = b.head(c.TieWordEmbeddings, m.Embed, m.Vocab, H, true)
	}
	m.weights, m.bytes = b.weights, b.bytes
	if b.err == nil {
		b.err = m.checkLinearLayout()
	}
	if b.err != nil {
		m.Close()
		return nil, b.err
	}
	return m, nil
}

// checkLinearLayout rejects checkpoints mixing fused (in_proj_qkvz) and separate
// (in_proj_qkv) linear-attention projections: Forward shares scratch between layers.
func (m *Hybrid) checkLinearLayout() error {
	first := -1
	for i, l := range m.Layers {
		if l.Linear == nil {
			continue
		}
		if first < 0 {
			first = i
		} else if (l.Linear.QKVZ != nil) != (m.Layers[first].Linear.QKVZ != nil) {
			return fmt.Errorf("layers %d and %d: one has linear_attn.in_proj_qkvz, the other in_proj_qkv; mixed layouts are not supported", m.Stage.First+first, m.Stage.First+i)
		}
	}
	return nil
}

func bindMLP(b *binder, p string, inter, H int) *engine.Expert {
	if b.err == nil && inter <= 0 {
		b.err = fmt.Errorf("config: intermediate size %d of %s must be positive", inter, p)
	}
	return &engine.Expert{
		Gate: b.bind(p+"gate_proj.weight", inter, H),
		Up:   b.bind(p+"up_proj.weight", inter, H),
		Down: b.bind(p+"down_proj.weight", H, inter),
	}
}

func bindMoE(b *binder, c *engine.Config, p string) *engine.MoEWeights {
	H := c.HiddenSize
	w := &engine.MoEWeights{Router: b.bind(p+"gate.weight", c.NumExperts, H)}
	for e := 0; e < c.NumExperts; e++ {
		w.Experts = append(w.Experts, *bindMLP(b, fmt.Sprintf("%sexperts.%d.", p, e), c.MoEIntermediateSize, H))
	}
	if c.SharedExpertIntermediateSize > 0 {
		w.Shared = bindMLP(b, p+"shared_expert.", c.SharedExpertIntermediateSize, H)
		w.SharedGate = b.bind(p+"shared_expert_gate.weight", 1, H)
	}
	return w
}

func (m *Hybrid) bindLinear(b *binder, src engine.Source, p string) *LinearAttention {
	d := m.DeltaNet
	H := m.Hidden
	kd, vd, nv, C := d.KeyHeads*d.KeyDim, d.ValueHeads*d.ValueDim, d.ValueHeads, d.ConvDim()
	l := &LinearAttention{}
	if src.Has(p + "in_proj_qkvz.weight") {
		l.QKVZ = b.bind(p+"in_proj_qkvz.weight", 2*kd+2*vd, H)
		l.BA = b.bind(p+"in_proj_ba.weight", 2*nv, H)
	} else {
		l.QKV = b.bind(p+"in_proj_qkv.weight", C, H)
		l.Z = b.bind(p+"in_proj_z.weight", vd, H)
		l.B = b.bind(p+"in_proj_b.weight", nv, H)
		l.A = b.bind(p+"in_proj_a.weight", nv, H)
	}
	l.W = engine.DeltaNetWeights{
		Conv:   bindAs(b, p+"conv1d.weight", []int{C, 1, d.ConvKernel}, []int{C, d.ConvKernel}),
		ALog:   b.bind(p+"A_log", nv),
		DtBias: b.bind(p+"dt_bias", nv),
		Norm:   b.bind(p+"norm.weight", d.ValueDim),
	}
	l.Out = b.bind(p+"out_proj.weight", H, vd)
	return l
}

// bindAs uploads a tensor of shape `shape` viewed as shape `as` (same elements, same
// order: dropping unit axes).
func bindAs(b *binder, name string, shape, as []int) engine.Weight {
	return b.upload(name, shape, as)
}

// VocabSize is the number of logits per position.
func (m *Hybrid) VocabSize() int { return m.Vocab }

// Close releases the uploaded weights; safe to call twice.
func (m *Hybrid) Close() error { return releaseWeights(m.be, &m.weights) }

// NewCache makes a KV cache per full-attention layer and a recurrent state per
// linear-attention layer.
func (m *Hybrid) NewCache() ([]engine.LayerCache, error) {
	return m.NewCacheKV(plainKV(m.be))
}

// NewCacheKV is NewCache with the KV caches made by kv (engine.PagedArch).
func (m *Hybrid) NewCacheKV(newKV func(layer, kvHeads, headDim int) (engine.KV, error)) ([]engine.LayerCache, error) {
	out := make([]engine.LayerCache, len(m.Layers))
	for i, l := range m.Layers {
		var err error
		if l.Linear != nil {
			out[i], err = m.dn.NewDeltaNetState(m.DeltaNet)
		} else {
			out[i], err = newKV(i, m.KVHeads, m.HeadDim)
		}
		if err != nil {
			for _, c := range out[:i] {
				c.Free()
			}
			return nil, fmt.Errorf("layer %d cache: %w", m.Stage.First+i, err)
		}
	}
	return out, nil
}

// Forward runs the decoder over all rows of the batch and returns the logits of the
// output rows.
func (m *Hybrid) Forward(bt *engine.Batch) (engine.Tensor, error) { return m.ForwardStage(bt, nil) }

// HiddenSize is the width of a stage's hidden states.
func (m *Hybrid) HiddenSize() int { return m.Hidden }

// WeightBytes is the stored size of the weights bound (engine.WeightSizer).
func (m *Hybrid) WeightBytes() int64 { return m.bytes }

var (
	_ engine.StageArch   = (*Hybrid)(nil)
	_ engine.WeightSizer = (*Hybrid)(nil)
)

// ForwardStage runs the stage's layers (engine.StageArch) over all rows of the batch:
// from in (nil on the first stage: the embedded tokens) to the residual stream of every
// row on a stage that is not the last, to the logits of the output rows on the last.
func (m *Hybrid) ForwardStage(bt *engine.Batch, in engine.Tensor) (engine.Tensor, error) {
	be := m.be
	T := len(bt.Tokens)
	H := m.Hidden
	norm := engine.NormParams{Dim: H, Eps: m.Eps, Offset: m.NormOffset}
	last := m.Norm != nil

	var temps []engine.Tensor
	newT := func(rows, cols int) engine.Tensor {
		t := be.NewTensor(rows, cols)
		temps = append(temps, t)
		return t
	}
	defer func() {
		for _, t := range temps {
			be.Release(t)
		}
	}()
	// x is the residual stream: in, or the embedded tokens; it is the result of a stage
	// that is not the last, so it is not among the temporaries.
	x := in
	if x == nil {
		if m.Embed == nil {
			return nil, fmt.Errorf("stage %v has no token embedding: it takes hidden states", m.Stage)
		}
		x = be.NewTensor(T, H)
		be.Embed(x, m.Embed, bt.Tokens)
	}
	fail := func(err error) (engine.Tensor, error) {
		if x != in {
			be.Release(x)
		}
		return nil, err
	}
	h, y := newT(T, H), newT(T, H)
	var attn *attnScratch
	var lin *linScratch
	var mlp *mlpScratch
	addNorm, _ := be.(addRMSNormer)
	for li := range m.Layers {
		l := &m.Layers[li]
		if li == 0 || addNorm == nil { // else the last layer's AddRMSNorm did it
			be.RMSNorm(h, x, l.InputNorm, norm)
		}
		if l.Linear != nil {
			if lin == nil {
				lin = m.newLinScratch(newT, T, l.Linear.QKVZ != nil)
			}
			if err := m.linearAttention(lin, l.Linear, li, h, y, bt); err != nil {
				return fail(err)
			}
		} else {
			if attn == nil {
				attn = m.newAttnScratch(newT, T)
			}
			if err := m.attention(attn, l.Attn, li, h, y, bt); err != nil {
				return fail(err)
			}
		}
		if addNorm != nil {
			addNorm.AddRMSNorm(h, x, y, l.PostAttnNorm, norm)
		} else {
			be.Add(x, x, y)
			be.RMSNorm(h, x, l.PostAttnNorm, norm)
		}
		if l.Sparse != nil {
			m.moe.MoE(y, h, l.Sparse, m.MoE)
		} else {
			mlp = mlp.grow(newT, T, l.MLP.Gate.Rows())
			m.matMulShared([]engine.Tensor{mlp.gate, mlp.up}, h, []engine.Weight{l.MLP.Gate, l.MLP.Up}, false)
			be.SwiGLU(mlp.gate, mlp.gate, mlp.up)
			be.MatMul(y, mlp.gate, l.MLP.Down, nil)
		}
		if addNorm != nil && li+1 < len(m.Layers) {
			addNorm.AddRMSNorm(h, x, y, m.Layers[li+1].InputNorm, norm)
		} else {
			be.Add(x, x, y)
		}
	}
	if !last {
		return x, nil
	}
	if x != in {
		temps = append(temps, x)
	}
	sel := newT(len(bt.Outputs), H)
	be.Gather(sel, x, bt.Outputs)
	be.RMSNorm(sel, sel, m.Norm, norm)
	logits := be.NewTensor(len(bt.Outputs), m.Vocab)
	be.MatMul(logits, sel, m.LMHead, nil)
	return logits, nil
}

// mlpScratch holds a dense MLP's gate and up outputs, shared by the layers of a pass.
type mlpScratch struct {
	inter    int
	gate, up engine.Tensor
}

// grow returns s, or new scratch when s is nil or made for another intermediate size
// (the dense layers of a checkpoint share theirs: one allocation per pass).
func (s *mlpScratch) grow(newT func(int, int) engine.Tensor, T, inter int) *mlpScratch {
	if s != nil && s.inter == inter {
		return s
	}
	return &mlpScratch{inter: inter, gate: newT(T, inter), up: newT(T, inter)}
}

type attnScratch struct {
	qg, q, gate, k, v, a engine.Tensor
	seqs                 []engine.AttnSeq
}

func (m *Hybrid) newAttnScratch(newT func(int, int) engine.Tensor, T int) *attnScratch {
	qd, kvd := m.Heads*m.HeadDim, m.KVHeads*m.HeadDim
	s := &attnScratch{q: newT(T, qd), k: newT(T, kvd), v: newT(T, kvd), a: newT(T, qd)}
	if m.GatedAttention {
		s.qg, s.gate = newT(T, 2*qd), newT(T, qd)
	}
	return s
}

// attention is the full-attention token mixer: y = o_proj(attn(h) [* sigmoid(gate)]).
func (m *Hybrid) attention(s *attnScratch, l *HybridAttention, li int, h, y engine.Tensor, bt *engine.Batch) error {
	be := m.be
	hd := m.HeadDim
	s.seqs = s.seqs[:0]
	for i, sq := range bt.Seqs {
		kv, ok := sq.Layers[li].(engine.KV)
		if !ok {
			return fmt.Errorf("layer %d: sequence %d cache is %T, not a KV cache", m.Stage.First+li, i, sq.Layers[li])
		}
		s.seqs = append(s.seqs, engine.AttnSeq{KV: kv, Row: sq.Row, N: sq.N, Pos: sq.Pos, GEMMRows: sq.GEMMRows})
	}
	q := s.q
	if m.GatedAttention {
		q = s.qg
	}
	if sm, ok := be.(sharedMatMuler); ok {
		sm.MatMulShared([]engine.Tensor{q, s.k, s.v}, h, []engine.Weight{l.Q, l.K, l.V}, false)
	} else {
		// In this order: Metal fuses the de-interleave into the q projection's store.
		be.MatMul(q, h, l.Q, nil)
	}
	if m.GatedAttention {
		// q_proj rows are [q_0 | gate_0 | q_1 | gate_1 | ...], head_dim each.
		be.Deinterleave(s.q, s.gate, s.qg, hd)
	}
	if _, ok := be.(sharedMatMuler); !ok {
		be.MatMul(s.k, h, l.K, nil)
		be.MatMul(s.v, h, l.V, nil)
	}
	headNorm := engine.NormParams{Dim: hd, Eps: m.Eps, Offset: m.NormOffset}
	rope := m.Rope
	if nr, ok := be.(rmsNormRoper); ok {
		rope.Heads = m.Heads
		nr.RMSNormRope(s.q, l.QNorm, headNorm, bt.Positions, rope)
		rope.Heads = m.KVHeads
		nr.RMSNormRope(s.k, l.KNorm, headNorm, bt.Positions, rope)
	} else {
		be.RMSNorm(s.q, s.q, l.QNorm, headNorm)
		be.RMSNorm(s.k, s.k, l.KNorm, headNorm)
		rope.Heads = m.Heads
		be.Rope(s.q, bt.Positions, rope)
		rope.Heads = m.KVHeads
		be.Rope(s.k, bt.Positions, rope)
	}
	be.StoreKV(s.k, s.v, s.seqs)
	be.Attention(s.a, s.q, s.seqs, engine.AttnParams{Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd)))})
	if m.GatedAttention {
		be.SigmoidMul(s.a, s.a, s.gate)
	}
	be.MatMul(y, s.a, l.O, nil)
	return nil
}

type linScratch struct {
	qkvz, ba, qkv, z, b, a, core engine.Tensor
	seqs                         []engine.DeltaNetSeq
}

func (m *Hybrid) newLinScratch(newT func(int, int) engine.Tensor, T int, fused bool) *linScratch {
	d := m.DeltaNet
	kd, vd, nv := d.KeyHeads*d.KeyDim, d.ValueHeads*d.ValueDim, d.ValueHeads
	s := &linScratch{qkv: newT(T, d.ConvDim()), z: newT(T, vd), b: newT(T, nv), a: newT(T, nv), core: newT(T, vd)}
	if fused { // every linear layer of a checkpoint has the same layout
		s.qkvz, s.ba = newT(T, 2*kd+2*vd), newT(T, 2*nv)
	}
	return s
}

// preciseMatMuler is implemented by backends that can multiply one weight
// with float32 activations where their MatMul quantizes them (cpu, with
// engine.Options.PreciseHybrid).
type preciseMatMuler interface {
	MatMulPrecise(dst, x engine.Tensor, w engine.Weight)
}

// sharedMatMuler is implemented by backends that run several products of one input as
// one job (cpu: quantizing the input once), with the bits of one MatMul each, or
// MatMulPrecise's with precise.
type sharedMatMuler interface {
	MatMulShared(dsts []engine.Tensor, x engine.Tensor, ws []engine.Weight, precise bool)
}

// matMulShared sets dsts[i] = x·ws[i]ᵀ, through the backend's MatMulShared where it has
// one; precise: the projections of the linear-attention layers (MatMulPrecise).
func (m *Hybrid) matMulShared(dsts []engine.Tensor, x engine.Tensor, ws []engine.Weight, precise bool) {
	if sm, ok := m.be.(sharedMatMuler); ok {
		sm.MatMulShared(dsts, x, ws, precise)
		return
	}
	pm, ok := m.be.(preciseMatMuler)
	for i, w := range ws {
		if precise && ok {
			pm.MatMulPrecise(dsts[i], x, w)
		} else {
			m.be.MatMul(dsts[i], x, w, nil)
		}
	}
}

// linearAttention is the Gated DeltaNet token mixer: y = out_proj(core(h)).
func (m *Hybrid) linearAttention(s *linScratch, l *LinearAttention, li int, h, y engine.Tensor, bt *engine.Batch) error {
	be := m.be
	d := m.DeltaNet
	T := len(bt.Tokens)
	s.seqs = s.seqs[:0]
	for i, sq := range bt.Seqs {
		st, ok := sq.Layers[li].(engine.DeltaNetState)
		if !ok {
			return fmt.Errorf("layer %d: sequence %d cache is %T, not a Gated DeltaNet state", m.Stage.First+li, i, sq.Layers[li])
		}
		if st.Len() != sq.Pos {
			return fmt.Errorf("layer %d: sequence %d recurrent state holds %d positions, batch starts at %d", m.Stage.First+li, i, st.Len(), sq.Pos)
		}
		// Rows from Pos+GEMMRows on are generated (engine.Seq.PromptEnd); when all rows are
		// prompt rows, Pos+N says as much to the op.
		promptEnd := 0
		if sq.GEMMRows >= 0 {
			promptEnd = sq.Pos + sq.GEMMRows
		}
		s.seqs = append(s.seqs, engine.DeltaNetSeq{State: st, Row: sq.Row, N: sq.N, Pos: sq.Pos, PromptEnd: promptEnd})
	}
	// The projections into and out of the recurrence go through
	// MatMulPrecise where the backend has it: float32 activations there when
	// the backend is told (engine.Options.PreciseHybrid), since their int8
	// rounding is what makes the hybrids' default path drift 3-4× further
	// from the exact result than the rest (docs/engine.md, "Fast-path accuracy").
	mm := func(dst, x engine.Tensor, w engine.Weight) { be.MatMul(dst, x, w, nil) }
	if ex, ok := be.(preciseMatMuler); ok {
		mm = ex.MatMulPrecise
	}
	shared := func(dsts []engine.Tensor, ws []engine.Weight) { m.matMulShared(dsts, h, ws, true) }
	if l.QKVZ != nil {
		// Qwen3-Next: per key head g the fused output is [q_g | k_g | v_g | z_g] (v_g, z_g
		// hold the r = ValueHeads/KeyHeads value heads of the group), and BA is [b_g | a_g]
		// per group; rearrange into the Qwen3.5 order [q all | k all | v all], z, b, a.
		dk, dv, nk := d.KeyDim, d.ValueDim, d.KeyHeads
		r := d.ValueHeads / nk
		kd := nk * dk
		gw := 2*dk + 2*r*dv
		shared([]engine.Tensor{s.qkvz, s.ba}, []engine.Weight{l.QKVZ, l.BA})
		for g := 0; g < nk; g++ {
			be.Copy(s.qkv, 0, g*dk, s.qkvz, 0, g*gw, T, dk)
			be.Copy(s.qkv, 0, kd+g*dk, s.qkvz, 0, g*gw+dk, T, dk)
			be.Copy(s.qkv, 0, 2*kd+g*r*dv, s.qkvz, 0, g*gw+2*dk, T, r*dv)
			be.Copy(s.z, 0, g*r*dv, s.qkvz, 0, g*gw+2*dk+r*dv, T, r*dv)
			be.Copy(s.b, 0, g*r, s.ba, 0, g*2*r, T, r)
			be.Copy(s.a, 0, g*r, s.ba, 0, g*2*r+r, T, r)
		}
	} else {
		shared([]engine.Tensor{s.qkv, s.z, s.b, s.a}, []engine.Weight{l.QKV, l.Z, l.B, l.A})
	}
	m.dn.GatedDeltaNet(s.core, s.qkv, s.z, s.b, s.a, l.W, s.seqs, d)
	mm(y, s.core, l.Out)
	return nil
}
