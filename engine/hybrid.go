package engine

// Optional backend ops of the hybrid and MoE Qwen models (Qwen3-MoE, Qwen3-Next,
// Qwen3.5/3.6). A model that needs them checks at load time that the backend implements
// the interface (`be.(engine.DeltaNetOps)`), so a backend without them fails with a clear
// error. docs/hybrid-models.md gives the maths.

// DeltaNetParams are the sizes of a Gated DeltaNet (linear attention) layer.
type DeltaNetParams struct {
	KeyHeads, ValueHeads int     // linear_num_key_heads, linear_num_value_heads
	KeyDim, ValueDim     int     // linear_key_head_dim, linear_value_head_dim
	ConvKernel           int     // linear_conv_kernel_dim
	Eps                  float32 // epsilon of the gated RMSNorm (rms_norm_eps)
}

// ConvDim is the number of conv channels: q and k of all key heads, v of all value heads.
func (p DeltaNetParams) ConvDim() int { return 2*p.KeyHeads*p.KeyDim + p.ValueHeads*p.ValueDim }

// DeltaNetState is the recurrent state of one linear-attention layer of one sequence:
// the conv state (last ConvKernel-1 inputs) and the delta-rule state
// [ValueHeads, KeyDim, ValueDim], after Len tokens. It cannot go back to an arbitrary
// position: Truncate accepts the current length, 0 (reset), and the length before the last
// GatedDeltaNet call (undo of a failed forward pass).
type DeltaNetState interface {
	LayerCache
	Len() int
}

// DeltaNetChunk is the chunk length of the chunked (prefill) gated delta rule. With a
// PromptEnd (DeltaNetSeq), prompt chunks start at positions that are multiples of it and
// the recurrent state is rounded to float32 at their ends, so a sequence split into calls
// at such positions (or at its prompt's end) gets the bits of one call: the serving
// scheduler ends hybrid prompt chunks and takes snapshots only there.
const DeltaNetChunk = 64

// DeltaNetSeq is one sequence of a batch for GatedDeltaNet: its new tokens are rows
// [Row, Row+N) of the batch tensors; State holds Pos tokens before the call.
type DeltaNetSeq struct {
	State DeltaNetState
	Row   int
	N     int
	Pos   int
	// PromptEnd, if > 0, makes the rows' bits independent of how the sequence is split
	// into calls (as AttnSeq.GEMMRows does for attention; from engine.Seq.PromptEnd):
	// rows at positions < PromptEnd run the chunked rule in chunks aligned to absolute
	// multiples of DeltaNetChunk, rows at positions ≥ PromptEnd (generated tokens, also
	// when a resume prefills them) run the recurrent rule one token at a time exactly as
	// decode steps do. A value ≥ Pos+N means every row is a prompt row. 0: chunked when
	// N > 1, recurrent when N = 1, chunks counted from the call's first row.
	PromptEnd int
}

// DeltaNetWeights are the per-layer weights GatedDeltaNet uses (the projections are
// ordinary MatMuls done by the model).
type DeltaNetWeights struct {
	Conv   Weight // [ConvDim, ConvKernel] (HF conv1d.weight [C,1,K] without the middle axis)
	ALog   Weight // [ValueHeads]
	DtBias Weight // [ValueHeads]
	Norm   Weight // [ValueDim], gated RMSNorm weight (applied as w, not 1+w)
}

// DeltaNetOps is implemented by backends that run Gated DeltaNet layers.
type DeltaNetOps interface {
	// NewDeltaNetState allocates a zero state for one layer of one sequence.
	NewDeltaNetState(p DeltaNetParams) (DeltaNetState, error)
	// GatedDeltaNet runs the token mixer of a linear-attention layer from its projections
	// to the input of out_proj. qkv is [T, ConvDim] before the conv, channels ordered
	// [q of all key heads | k | v of all value heads] (Qwen3.5 in_proj_qkv order); z is
	// [T, ValueHeads*ValueDim]; b and a are [T, ValueHeads]. For each sequence: causal
	// conv1d + SiLU continuing its conv state, beta = sigmoid(b), g = -exp(A_log) *
	// softplus(a + dt_bias), the gated delta rule on L2-normalised q, k continuing its
	// state (chunked when N > 1, recurrent when N = 1; with a PromptEnd as DeltaNetSeq
	// says), then the gated RMSNorm with z.
	// dst is [T, ValueHeads*ValueDim]; every state advances by its N.
	GatedDeltaNet(dst, qkv, z, b, a Tensor, w DeltaNetWeights, seqs []DeltaNetSeq, p DeltaNetParams)
}

// Expert is one SwiGLU expert: down(silu(gate x) * up x).
type Expert struct {
	Gate, Up Weight // [inter, hidden]
	Down     Weight // [hidden, inter]
}

// MoEWeights are the weights of one sparse MoE block.
type MoEWeights struct {
	Router     Weight   // [experts, hidden] (mlp.gate.weight)
	Experts    []Expert // one per expert, in expert order
	Shared     *Expert  // shared expert, nil if none (Qwen3-MoE)
	SharedGate Weight   // [1, hidden], with Shared
}

// MoEParams configure the routing.
type MoEParams struct {
	TopK      int  // num_experts_per_tok
	Normalize bool // divide the top-k probabilities by their sum
}

// MoEOps is implemented by backends that run sparse MoE blocks.
type MoEOps interface {
	// MoE sets dst[t] = sum_i w_i expert_{e_i}(x[t]) (+ sigmoid(SharedGate x[t]) *
	// Shared(x[t])), with (e_i, w_i) the top-k of softmax(Router x[t]) (ties: lower expert
	// first), renormalised if p.Normalize. x and dst are [T, hidden].
	MoE(dst, x Tensor, w *MoEWeights, p MoEParams)
}

// PrefillAlign is the position multiple at which a prompt chunk of this model may end
// without changing the bits of any logits (with engine.Seq.PromptEnd): DeltaNetChunk for
// models with Gated DeltaNet (linear attention) layers, 1 otherwise. The serving
// scheduler ends prompt chunks at such positions or at the prompt's end.
func (m *Model) PrefillAlign() int {
	for _, t := range m.cfg.LayerTypes {
		if t == "linear_attention" {
			return DeltaNetChunk
		}
	}
	return 1
}
