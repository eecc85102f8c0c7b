// Package qwen holds the Qwen model architectures as plain structs with
// typed weight fields, registered with the engine by config.json
// model_type. This file: the dense decoders Qwen2 (QKV bias; also
// Qwen2.5) and Qwen3 (per-head QK RMSNorm).
package qwen

import (
	"fmt"
	"math"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/tensor"
)

func init() {
	engine.Register("qwen2", func(be engine.Backend, src engine.Source) (engine.Arch, error) {
		return newDense(be, src, denseOptions{qkvBias: true})
	})
	engine.Register("qwen3", func(be engine.Backend, src engine.Source) (engine.Arch, error) {
		return newDense(be, src, denseOptions{qkNorm: true, qkvBias: src.Config().AttentionBias})
	})
}

type denseOptions struct {
	qkvBias bool // Qwen2: q/k/v projections have biases
	qkNorm  bool // Qwen3: RMSNorm over each q and k head before rotary
}

// Dense is a Qwen2/Qwen3 dense decoder.
type Dense struct {
	be   engine.Backend
	opts denseOptions

	Hidden, Heads, KVHeads, HeadDim, Intermediate, Vocab int
	RotaryDim                                            int
	Eps                                                  float32
	Theta                                                float64
	// Rope holds the rotary tables (rope scaling applied), computed at
	// load; Heads is set per call.
	Rope engine.RopeParams

	// Stage is the range of decoder layers bound (engine.StageOf: the
	// whole model unless loaded as a pipeline stage); Layers[i] is decoder
	// layer Stage.First+i. Embed is bound on the first stage only, Norm and
	// LMHead on the last only.
	Stage engine.Stage

	Embed  engine.Weight // [vocab, hidden]
	Layers []DenseLayer
	Norm   engine.Weight // [hidden]
	LMHead engine.Weight // [vocab, hidden]; the embedding when tie_word_embeddings

	weights []engine.Weight // everything uploaded, for Close
	bytes   int64           // stored bytes of weights (WeightBytes)
}

// DenseLayer is one decoder layer.
type DenseLayer struct {
	InputNorm, PostAttnNorm engine.Weight // [hidden]
	Q, K, V, O              engine.Weight // [heads*hd, hidden], [kv*hd, hidden] ×2, [hidden, heads*hd]
	QBias, KBias, VBias     engine.Weight // Qwen2 only
	QNorm, KNorm            engine.Weight // Qwen3 only, [hd]
	Gate, Up, Down          engine.Weight // [inter, hidden] ×2, [hidden, inter]
}

// binder uploads tensors by canonical name, checking shapes; the first
// error sticks and names the tensor and the expected shape.
type binder struct {
	be      engine.Backend
	src     engine.Source
	err     error
	weights []engine.Weight
	bytes   int64 // stored bytes of the uploaded tensors
}

func (b *binder) bind(name string, shape ...int) engine.Weight {
	return b.upload(name, shape, nil)
}

// upload is the one body behind bind and bindAs (hybrid.go), shared so
// the sticky-error, shape-check and bookkeeping rules cannot drift apart:
// it checks the tensor's shape against shape and uploads it, viewed as
// shape as when as is non-nil (a copy of the header, the source's is left
// alone) or as stored when as is nil.
func (b *binder) upload(name string, shape, as []int) engine.Weight {
	if b.err != nil {
		return nil
	}
	h, err := b.src.Tensor(name)
	if err != nil {
		b.err = err
		return nil
	}
	if !sameShape(h.Shape, shape) {
		b.err = fmt.Errorf("tensor %s: shape %v, want %v", name, h.Shape, shape)
		return nil
	}
	if as != nil {
		v := *h
		v.Shape = as
		h = &v
	}
	w, err := b.be.Upload(h)
	if err != nil {
		b.err = fmt.Errorf("tensor %s: %w", name, err)
		return nil
	}
	b.weights = append(b.weights, w)
	b.bytes += hostBytes(h)
	return w
}

// hostBytes is a tensor's size as stored (with MLX scales and biases).
func hostBytes(h *tensor.Host) int64 {
	n := int64(len(h.Data))
	for _, p := range []*tensor.Host{h.Scales, h.Biases} {
		if p != nil {
			n += int64(len(p.Data))
		}
	}
	return n
}

// head binds the LM head of the last stage: lm_head.weight, or with
// tie_word_embeddings and no lm_head.weight the embedding (embed, when this
// stage bound it as the first stage, else bound here). It returns nil (no
// head: an embedding checkpoint) when neither applies and required is false.
func (b *binder) head(tied bool, embed engine.Weight, vocab, hidden int, required bool) engine.Weight {
	switch {
	case tied && !b.src.Has("lm_head.weight"):
		if embed != nil {
			return embed
		}
		return b.bind("model.embed_tokens.weight", vocab, hidden)
	case b.src.Has("lm_head.weight") || required:
		return b.bind("lm_head.weight", vocab, hidden)
	}
	return nil
}

// attnDefaults and checkAttn are the attention-config rules that newDense
// and newHybrid share (one copy, so the two families default and reject
// the same configs alike). attnDefaults fills a zero num_key_value_heads
// (= heads) and head_dim (= hidden/heads) and returns the
// partial_rotary_factor, 1 when unset; each caller rounds the rotary dim
// its own way.
func attnDefaults(hidden, heads int, kvHeads, headDim *int, partialRotary float64) float64 {
	if *kvHeads == 0 {
		*kvHeads = heads
	}
	if *headDim == 0 && heads > 0 {
		*headDim = hidden / heads
	}
	if partialRotary == 0 {
		partialRotary = 1
	}
	return partialRotary
}

// checkAttn runs after the caller's own all-positive check (so kvHeads is
// not zero): heads grouping, rotary dim and rope_theta.
func checkAttn(heads, kvHeads, headDim, rotaryDim int, prf, theta float64) error {
	switch {
	case heads%kvHeads != 0:
		return fmt.Errorf("config: num_attention_heads %d must be a multiple of num_key_value_heads %d", heads, kvHeads)
	case rotaryDim <= 0 || rotaryDim%2 != 0 || rotaryDim > headDim:
		return fmt.Errorf("config: rotary dim %d (head_dim %d × partial_rotary_factor %g) must be even and in (0, head_dim]", rotaryDim, headDim, prf)
	case theta <= 0:
		return fmt.Errorf("config: rope_theta %g must be positive", theta)
	}
	return nil
}

func sameShape(got, want []int) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func newDense(be engine.Backend, src engine.Source, opts denseOptions) (*Dense, error) {
	c := src.Config()
	m := &Dense{
		be: be, opts: opts,
		Hidden: c.HiddenSize, Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads,
		HeadDim: c.HeadDim, Intermediate: c.IntermediateSize, Vocab: c.VocabSize,
		Eps: float32(c.RMSNormEps), Theta: c.RopeTheta,
	}
	prf := attnDefaults(m.Hidden, m.Heads, &m.KVHeads, &m.HeadDim, c.PartialRotaryFactor)
	m.RotaryDim = int(math.Round(float64(m.HeadDim) * prf))
	if m.Hidden <= 0 || m.Heads <= 0 || m.HeadDim <= 0 || m.Intermediate <= 0 || m.Vocab <= 0 || c.NumHiddenLayers <= 0 {
		return nil, fmt.Errorf("config: hidden_size %d, num_attention_heads %d, head_dim %d, intermediate_size %d, vocab_size %d, num_hidden_layers %d must all be positive",
			m.Hidden, m.Heads, m.HeadDim, m.Intermediate, m.Vocab, c.NumHiddenLayers)
	}
	if err := checkAttn(m.Heads, m.KVHeads, m.HeadDim, m.RotaryDim, prf, m.Theta); err != nil {
		return nil, err
	}
	rope, err := engine.NewRopeParams(c, m.HeadDim, m.RotaryDim)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	m.Rope = rope
	for i, t := range c.LayerTypes {
		if t != "" && t != "full_attention" {
			return nil, fmt.Errorf("config: layer %d has type %q; dense %s supports full_attention only", i, t, c.ModelType)
		}
	}

	b := &binder{be: be, src: src}
	H, qd, kvd := m.Hidden, m.Heads*m.HeadDim, m.KVHeads*m.HeadDim
	m.Stage = engine.StageOf(src)
	if m.Stage.IsFirst() {
		m.Embed = b.bind("model.embed_tokens.weight", m.Vocab, H)
	}
	m.Layers = make([]DenseLayer, m.Stage.Last-m.Stage.First)
	for i := range m.Layers {
		l := &m.Layers[i]
		p := fmt.Sprintf("model.layers.%d.", m.Stage.First+i)
		l.InputNorm = b.bind(p+"input_layernorm.weight", H)
		l.PostAttnNorm = b.bind(p+"post_attention_layernorm.weight", H)
		l.Q = b.bind(p+"self_attn.q_proj.weight", qd, H)
		l.K = b.bind(p+"self_attn.k_proj.weight", kvd, H)
		l.V = b.bind(p+"self_attn.v_proj.weight", kvd, H)
		l.O = b.bind(p+"self_attn.o_proj.weight", H, qd)
		if opts.qkvBias {
			l.QBias = b.bind(p+"self_attn.q_proj.bias", qd)
			l.KBias = b.bind(p+"self_attn.k_proj.bias", kvd)
			l.VBias = b.bind(p+"self_attn.v_proj.bias", kvd)
		}
		if opts.qkNorm {
			l.QNorm = b.bind(p+"self_attn.q_norm.weight", m.HeadDim)
			l.KNorm = b.bind(p+"self_attn.k_norm.weight", m.HeadDim)
		}
		l.Gate = b.bind(p+"mlp.gate_proj.weight", m.Intermediate, H)
		l.Up = b.bind(p+"mlp.up_proj.weight", m.Intermediate, H)
		l.Down = b.bind(p+"mlp.down_proj.weight", H, m.Intermediate)
	}
	if m.Stage.IsLast(c.NumHiddenLayers) {
		m.Norm = b.bind("model.norm.weight", H)
		// Without a head: a base-model checkpoint (Qwen3-Embedding), no
		// logits, see embed.go.
		m.LMHead = b.head(c.TieWordEmbeddings, m.Embed, m.Vocab, H, false)
	}
	m.weights, m.bytes = b.weights, b.bytes
	if b.err != nil {
		m.Close()
		return nil, b.err
	}
	return m, nil
}

// VocabSize is the number of logits per position.
func (m *Dense) VocabSize() int { return m.Vocab }

// Close releases the uploaded weights; safe to call twice.
func (m *Dense) Close() error { return releaseWeights(m.be, &m.weights) }

// NewCache makes one KV cache per layer.
func (m *Dense) NewCache() ([]engine.LayerCache, error) { return m.NewCacheKV(plainKV(m.be)) }

// releaseWeights is Close for Dense and Hybrid (shared: both keep every
// uploaded weight in one slice): it releases them and empties *ws, so a
// second call does nothing.
func releaseWeights(be engine.Backend, ws *[]engine.Weight) error {
	for _, w := range *ws {
		be.ReleaseWeight(w)
	}
	*ws = nil
	return nil
}

// plainKV is the newKV that Dense and Hybrid NewCache pass to NewCacheKV
// (shared: both make their unpaged KV caches straight from the backend).
func plainKV(be engine.Backend) func(layer, kvHeads, headDim int) (engine.KV, error) {
	return func(_, kvHeads, headDim int) (engine.KV, error) { return be.NewKV(kvHeads, headDim) }
}

// NewCacheKV is NewCache with the KV caches made by kv (engine.PagedArch).
func (m *Dense) NewCacheKV(newKV func(layer, kvHeads, headDim int) (engine.KV, error)) ([]engine.LayerCache, error) {
	out := make([]engine.LayerCache, len(m.Layers))
	for i := range out {
		kv, err := newKV(i, m.KVHeads, m.HeadDim)
		if err != nil {
			for _, c := range out[:i] {
				c.Free()
			}
			return nil, err
		}
		out[i] = kv
	}
	return out, nil
}

// ForwardHidden runs the decoder over all rows of the batch and returns the
// final-normed hidden states of the output rows (engine.HiddenArch, whole
// models); Forward (embed.go) applies the LM head to them.
func (m *Dense) ForwardHidden(bt *engine.Batch) (engine.Tensor, error) {
	x, err := m.layers(bt, nil)
	if err != nil {
		return nil, err
	}
	defer m.be.Release(x)
	return m.finalNorm(bt, x), nil
}

// finalNorm gathers the output rows of x and applies the final norm.
func (m *Dense) finalNorm(bt *engine.Batch, x engine.Tensor) engine.Tensor {
	sel := m.be.NewTensor(len(bt.Outputs), m.Hidden)
	m.be.Gather(sel, x, bt.Outputs)
	m.be.RMSNorm(sel, sel, m.Norm, engine.NormParams{Dim: m.Hidden, Eps: m.Eps})
	return sel
}

// addRMSNormer is implemented by backends that fuse the residual add with
// the norm after it (x += h, dst = RMSNorm(x); dst may be h) with the bits
// of Add then RMSNorm (cpu: each row normed while it is in cache).
type addRMSNormer interface {
	AddRMSNorm(dst, x, h engine.Tensor, w engine.Weight, p engine.NormParams)
}

// rmsNormRoper is implemented by backends that fuse a head norm with the
// rotation after it (RMSNorm(x, x) then Rope(x)) with the bits of the two
// ops.
type rmsNormRoper interface {
	RMSNormRope(x engine.Tensor, w engine.Weight, np engine.NormParams, pos []int, rp engine.RopeParams)
}

// layers returns the residual stream [T, hidden] after the stage's last
// layer: from the embedded tokens on the first stage, else from in (which
// it then updates in place and returns). The caller releases the result.
func (m *Dense) layers(bt *engine.Batch, in engine.Tensor) (engine.Tensor, error) {
	be := m.be
	T := len(bt.Tokens)
	H, qd, kvd := m.Hidden, m.Heads*m.HeadDim, m.KVHeads*m.HeadDim
	seqs := make([]engine.AttnSeq, len(bt.Seqs))
	attn := engine.AttnParams{Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim, Scale: float32(1 / math.Sqrt(float64(m.HeadDim)))}
	rope := m.Rope
	norm := engine.NormParams{Dim: H, Eps: m.Eps}
	headNorm := engine.NormParams{Dim: m.HeadDim, Eps: m.Eps}
	shared, _ := be.(sharedMatMuler)
	addNorm, _ := be.(addRMSNormer)
	normRope, _ := be.(rmsNormRoper)

	x := in
	if x == nil {
		if m.Embed == nil {
			return nil, fmt.Errorf("stage %v has no token embedding: it takes hidden states", m.Stage)
		}
		x = be.NewTensor(T, H)
		be.Embed(x, m.Embed, bt.Tokens)
	}
	h := be.NewTensor(T, H)
	q, k, v := be.NewTensor(T, qd), be.NewTensor(T, kvd), be.NewTensor(T, kvd)
	a := be.NewTensor(T, qd)
	gate, up := be.NewTensor(T, m.Intermediate), be.NewTensor(T, m.Intermediate)
	defer func() {
		for _, t := range []engine.Tensor{h, q, k, v, a, gate, up} {
			be.Release(t)
		}
	}()
	for li := range m.Layers {
		l := &m.Layers[li]
		for i, s := range bt.Seqs {
			kv, ok := s.Layers[li].(engine.KV)
			if !ok {
				if x != in {
					be.Release(x)
				}
				return nil, fmt.Errorf("layer %d: cache is %T, not a KV cache", m.Stage.First+li, s.Layers[li])
			}
			seqs[i] = engine.AttnSeq{KV: kv, Row: s.Row, N: s.N, Pos: s.Pos, GEMMRows: s.GEMMRows}
		}
		if li == 0 || addNorm == nil { // else the last layer's AddRMSNorm did it
			be.RMSNorm(h, x, l.InputNorm, norm)
		}
		if shared != nil && l.QBias == nil && l.KBias == nil && l.VBias == nil {
			shared.MatMulShared([]engine.Tensor{q, k, v}, h, []engine.Weight{l.Q, l.K, l.V}, false)
		} else {
			be.MatMul(q, h, l.Q, l.QBias)
			be.MatMul(k, h, l.K, l.KBias)
			be.MatMul(v, h, l.V, l.VBias)
		}
		if m.opts.qkNorm && normRope != nil {
			rope.Heads = m.Heads
			normRope.RMSNormRope(q, l.QNorm, headNorm, bt.Positions, rope)
			rope.Heads = m.KVHeads
			normRope.RMSNormRope(k, l.KNorm, headNorm, bt.Positions, rope)
		} else {
			if m.opts.qkNorm {
				be.RMSNorm(q, q, l.QNorm, headNorm)
				be.RMSNorm(k, k, l.KNorm, headNorm)
			}
			rope.Heads = m.Heads
			be.Rope(q, bt.Positions, rope)
			rope.Heads = m.KVHeads
			be.Rope(k, bt.Positions, rope)
		}
		be.StoreKV(k, v, seqs)
		be.Attention(a, q, seqs, attn)
		be.MatMul(h, a, l.O, nil)
		if addNorm != nil {
			addNorm.AddRMSNorm(h, x, h, l.PostAttnNorm, norm)
		} else {
			be.Add(x, x, h)
			be.RMSNorm(h, x, l.PostAttnNorm, norm)
		}
		if shared != nil {
			shared.MatMulShared([]engine.Tensor{gate, up}, h, []engine.Weight{l.Gate, l.Up}, false)
		} else {
			be.MatMul(gate, h, l.Gate, nil)
			be.MatMul(up, h, l.Up, nil)
		}
		be.SwiGLU(gate, gate, up)
		be.MatMul(h, gate, l.Down, nil)
		if addNorm != nil && li+1 < len(m.Layers) {
			addNorm.AddRMSNorm(h, x, h, m.Layers[li+1].InputNorm, norm)
		} else {
			be.Add(x, x, h)
		}
	}
	return x, nil
}
