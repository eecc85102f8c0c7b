package engine

import "github.com/macpool/macpool/engine/tensor"

// Tensor is a backend-owned float32 activation of shape [Rows, Cols],
// row-major. Its contents are only visible on the host through
// Backend.Read; a GPU backend keeps it in device memory.
type Tensor interface {
	Rows() int
	Cols() int
}

// Weight is a backend-resident weight, uploaded from a *tensor.Host in its
// stored format (the CPU backend keeps bf16/quantized bytes as mapped; no
// float32 copy of a large matrix). A matrix is [Rows, Cols] =
// [out_features, in_features]; a vector (norm, bias) has Rows 1.
type Weight interface {
	Rows() int
	Cols() int
	Format() tensor.Format
}

// LayerCache is one layer's per-sequence state: the attention KV cache, or
// later a recurrent state (conv + delta-rule state of Gated DeltaNet).
// Truncate(n) keeps the first n positions; a state that cannot go back
// (a recurrent state without snapshots) returns an error unless n is its
// current length, or 0 (reset).
type LayerCache interface {
	Truncate(n int) error
	Free()
}

// TruncateChecker is implemented by layer caches that cannot go back to
// every length (recurrent state): Cache.Truncate asks every layer first, so
// a refused truncation leaves the whole cache unchanged.
type TruncateChecker interface {
	CanTruncate(n int) error
}

// KV is the key/value cache of one attention layer of one sequence:
// positions [0, Len) of K and V, each [kvHeads*headDim] per position.
// The CPU backend keeps a contiguous growable buffer; a paged backend can
// implement it as a block table over a shared pool without changing the ops,
// since ops address the cache only through AttnSeq (KV handle + positions).
type KV interface {
	LayerCache
	Len() int
}

// AttnSeq describes one sequence of a batch to StoreKV and Attention: its
// new tokens are rows [Row, Row+N) of the batch tensors and take positions
// [Pos, Pos+N) of the sequence; the cache holds positions [0, Pos) before
// StoreKV and [0, Pos+N) after.
type AttnSeq struct {
	KV  KV
	Row int
	N   int
	Pos int
	// GEMMRows says how the rows may be computed. -1: as the backend finds
	// fastest (then a position's result can depend on how its sequence was
	// split into passes). Otherwise the first GEMMRows rows are prompt rows,
	// computed so that their bits do not depend on how the prompt is
	// chunked, and the rest are generated rows, computed exactly as a
	// one-row decode step computes them, so a resume that prefills them
	// (failover) gets the bits their decode steps had (docs/engine.md, "Batch invariance").
	GEMMRows int
}

// AttnParams are the head layout of a (grouped-query) attention layer.
// Query head h reads KV head h / (Heads/KVHeads), as HF repeat_kv does.
type AttnParams struct {
	Heads, KVHeads, HeadDim int
	Scale                   float32 // usually 1/sqrt(HeadDim)
}

// NormParams configure RMSNorm: each row is split into chunks of Dim values
// (Dim = Cols for a whole-row norm, head_dim for per-head QK-norm); each
// chunk becomes x / sqrt(mean(x²) + Eps) * (Offset + w). Offset 0 is the
// Qwen2/Qwen3 convention, 1 the zero-centred (1+w) one.
type NormParams struct {
	Dim    int
	Eps    float32
	Offset float32
}

// RopeParams configure rotary embeddings in the rotate_half (NeoX/HF)
// layout: each row holds Heads heads of HeadDim values; the first
// RotaryDim values of a head are rotated as two halves (i, i+RotaryDim/2)
// by the angle position·InvFreq[i] (float32 product); the rest pass
// through (partial rotary). cos and sin are multiplied by AttentionFactor.
//
// A model fills InvFreq and AttentionFactor once at load with
// NewRopeParams (rope scaling already applied); backends only read them.
// InvFreq nil means the unscaled Theta^(-2i/RotaryDim); AttentionFactor 0
// means 1.
type RopeParams struct {
	Heads, HeadDim, RotaryDim int
	Theta                     float64
	InvFreq                   []float32 // RotaryDim/2 values, or nil
	AttentionFactor           float32
}

// Backend executes the ops of a forward pass. Ops are enqueued in call order
// and may run asynchronously (a GPU backend encodes them into a command
// buffer); only Read synchronises and reports asynchronous failures. Ops
// panic on shape mismatches (programmer errors), they never return errors.
// Host slices passed to an op (ids, positions, rows, seqs) may be reused by
// the caller as soon as the op returns: a backend copies what it needs.
// Element-wise ops (RMSNorm, Rope, SwiGLU, Add, SigmoidMul) allow dst to be
// one of their inputs; MatMul, Attention, Gather, Copy and Deinterleave do not.
//
// A Backend is not safe for concurrent use: one forward pass at a time.
//
// New op groups (Gated DeltaNet, MoE) are added as further methods here when
// every backend implements them, or as an optional interface that a model
// checks at load time (`be.(engine.DeltaNetOps)`) so a backend without them
// fails with a clear error rather than at run time.
type Backend interface {
	// Name identifies the backend ("cpu", "metal") in logs and errors.
	Name() string
	// Upload makes a weight resident in its stored format. A backend that
	// lacks a kernel for the format falls back to the reference row decoder
	// (tensor.Host.DecodeRow) rather than dequantizing the whole matrix.
	Upload(h *tensor.Host) (Weight, error)
	// ReleaseWeight frees an uploaded weight (model unload).
	ReleaseWeight(w Weight)
	// NewTensor allocates an activation; its contents are undefined.
	NewTensor(rows, cols int) Tensor
	// Write copies host values (len rows*cols) into t.
	Write(t Tensor, src []float32)
	// Read waits for all enqueued ops and copies t to dst (len rows*cols).
	Read(t Tensor, dst []float32) error
	// Release returns an activation's memory; t must not be used after.
	Release(t Tensor)
	// NewKV allocates an empty KV cache for one attention layer of one sequence.
	NewKV(kvHeads, headDim int) (KV, error)
	// Close stops the backend's workers and frees its memory; idempotent.
	Close() error

	// Embed sets dst row i to row ids[i] of table ([vocab, hidden]).
	Embed(dst Tensor, table Weight, ids []int)
	// MatMul sets dst = x·wᵀ (+ bias broadcast over rows if bias != nil).
	// x [M, K], w [N, K], bias [1, N], dst [M, N].
	MatMul(dst, x Tensor, w Weight, bias Weight)
	// RMSNorm normalises every chunk of p.Dim values of x; w has p.Dim values.
	RMSNorm(dst, x Tensor, w Weight, p NormParams)
	// Rope rotates x in place; row r is at position pos[r].
	Rope(x Tensor, pos []int, p RopeParams)
	// StoreKV writes rows of k and v ([T, kvHeads*headDim]) into each
	// sequence's cache at its positions (see AttnSeq) and extends its length.
	StoreKV(k, v Tensor, seqs []AttnSeq)
	// Attention computes causal softmax(q·Kᵀ·scale)·V for every sequence:
	// row Row+i of q ([T, Heads*HeadDim]) attends to cache positions
	// [0, Pos+i]. dst is [T, Heads*HeadDim]. StoreKV must have run first.
	Attention(dst, q Tensor, seqs []AttnSeq, p AttnParams)
	// SwiGLU sets dst = silu(gate) * up.
	SwiGLU(dst, gate, up Tensor)
	// SigmoidMul sets dst = x * sigmoid(gate) (output gates of Qwen3-Next).
	SigmoidMul(dst, x, gate Tensor)
	// Add sets dst = a + b.
	Add(dst, a, b Tensor)
	// Copy copies the block src[srcRow:srcRow+rows, srcCol:srcCol+cols] to
	// dst at (dstRow, dstCol): row slices and column slices (splitting heads).
	Copy(dst Tensor, dstRow, dstCol int, src Tensor, srcRow, srcCol, rows, cols int)
	// Deinterleave splits src [T, 2*n*chunk], each row laid out as
	// [a_0 | b_0 | a_1 | b_1 | ...] with chunk values per piece, into
	// a = [a_0 | a_1 | ...] and b = [b_0 | b_1 | ...] (each [T, n*chunk]):
	// the per-head Copy pairs of a gated q projection in one op. A pure
	// copy, so its bits equal those of the 2n Copy calls it replaces.
	Deinterleave(a, b, src Tensor, chunk int)
	// Gather sets dst row i to src row rows[i] (selecting logit rows).
	Gather(dst, src Tensor, rows []int)
}
