// Package deltanet is the reference maths of the Gated DeltaNet token mixer used by the
// linear-attention layers of Qwen3-Next and Qwen3.5/3.6, on float32 slices: the causal
// depthwise conv1d with its rolling state, the gated delta rule in recurrent (decode) and
// chunked (prefill) form, and the gated RMSNorm. docs/hybrid-models.md gives the formulas
// and where they come from (transformers 5.17 torch fallbacks).
//
// Layouts are token-major: a sequence of T tokens with C channels is x[t*C+c]. Head h of a
// [T, heads*dim] slice occupies x[t*heads*dim + h*dim : ... + dim].
package deltanet

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// ChunkSize is the chunk length of the chunked delta rule, as in transformers.
const ChunkSize = 64

// L2NormEps is the epsilon of the q/k L2 normalisation (use_qk_l2norm_in_kernel).
const L2NormEps = 1e-6

// Dims are the head counts and sizes of one Gated DeltaNet layer.
type Dims struct {
	NumKeyHeads   int // linear_num_key_heads
	NumValueHeads int // linear_num_value_heads, a multiple of NumKeyHeads
	KeyDim        int // linear_key_head_dim
	ValueDim      int // linear_value_head_dim
}

// Validate reports dimensions the maths cannot handle.
func (d Dims) Validate() error {
	switch {
	case d.NumKeyHeads <= 0:
		return fmt.Errorf("linear_num_key_heads %d must be positive", d.NumKeyHeads)
	case d.NumValueHeads <= 0:
		return fmt.Errorf("linear_num_value_heads %d must be positive", d.NumValueHeads)
	case d.NumValueHeads%d.NumKeyHeads != 0:
		return fmt.Errorf("linear_num_value_heads %d must be a multiple of linear_num_key_heads %d", d.NumValueHeads, d.NumKeyHeads)
	case d.KeyDim <= 0:
		return fmt.Errorf("linear_key_head_dim %d must be positive", d.KeyDim)
	case d.ValueDim <= 0:
		return fmt.Errorf("linear_value_head_dim %d must be positive", d.ValueDim)
	}
	return nil
}

// StateSize is the number of floats of the delta-rule state of one sequence:
// [NumValueHeads, KeyDim, ValueDim].
func (d Dims) StateSize() int { return d.NumValueHeads * d.KeyDim * d.ValueDim }

// ConvDim is the number of conv1d channels: q, k and v of all heads.
func (d Dims) ConvDim() int { return 2*d.NumKeyHeads*d.KeyDim + d.NumValueHeads*d.ValueDim }

func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

// Sigmoid is 1/(1+exp(-x)) in float32.
func Sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

// Softplus is torch.nn.functional.softplus with beta 1 and threshold 20.
func Softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

func softplus64(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// CausalConv1D applies the depthwise causal convolution with kernel K followed by SiLU to
// a sequence x [T, C], writing out [T, C] (out must not alias x). w is [C, K] (the HF
// conv1d weight [C, 1, K] squeezed); w[c*K+K-1] multiplies the current token. state is
// [K-1, C], the K-1 inputs before x, oldest first (zeros for a new sequence); on return it
// holds the last K-1 inputs of state++x.
func CausalConv1D(out, x []float32, T, C int, w []float32, K int, state []float32) {
	CausalConv1DOn(nil, out, x, T, C, w, K, state)
}

// CausalConv1DOn is CausalConv1D with channels spread by r.
func CausalConv1DOn(r Runner, out, x []float32, T, C int, w []float32, K int, state []float32) {
	causalConv(r, out, x, T, C, w, K, state, nil)
}

// CausalConv1DActOn is CausalConv1DOn with the activation act instead of the SiLU: the
// convolution is rounded to float32 and act rewrites it in place, a block of one token's
// channels at a time while they are in cache (a backend's SiLU with its own vector exp),
// with tmp scratch of the block's length. act runs on r's workers, concurrently on
// disjoint blocks.
func CausalConv1DActOn(r Runner, out, x []float32, T, C int, w []float32, K int, state []float32, act func(block, tmp []float32)) {
	causalConv(r, out, x, T, C, w, K, state, act)
}

// convBlock is the number of channels a conv worker keeps in its float64 accumulators:
// loops run token-major over a block, so rows are read contiguously.
const convBlock = 512

func causalConv(r Runner, out, x []float32, T, C int, w []float32, K int, state []float32, act func(block, tmp []float32)) {
	if len(x) < T*C || len(out) < T*C || len(w) < C*K || len(state) < (K-1)*C {
		panic("deltanet: CausalConv1D slice too short")
	}
	S := K - 1
	blocks := (C + convBlock - 1) / convBlock
	// A worker's share is at least ~64k multiply-adds: one decode token's conv
	// (ConvDim × K) is cheaper than waking a worker.
	r.run(blocks, max(1, 65536/max(T*K*convBlock, 1)), func(b0, b1 int) {
		cs := convScratches.Get().(*convScratch)
		defer convScratches.Put(cs)
		cs.wT = grow(cs.wT, K*convBlock)
		acc, tmp, wT := cs.acc[:], cs.tmp[:], cs.wT // wT[j*convBlock+c] = w[(c0+c)*K+j]
		for b := b0; b < b1; b++ {
			c0, c1 := b*convBlock, min(C, (b+1)*convBlock)
			n := c1 - c0
			for c := 0; c < n; c++ {
				for j := 0; j < K; j++ {
					wT[j*convBlock+c] = float64(w[(c0+c)*K+j])
				}
			}
			for t := 0; t < T; t++ {
				a := acc[:n]
				clear(a)
				// Input token s of state++x, s in [-S, T), in increasing j: the
				// sum of exact float64 products in the order of the formula.
				for j := 0; j < K; j++ {
					var in []float32
					if s := t - S + j; s < 0 {
						in = state[(s+S)*C+c0 : (s+S)*C+c1]
					} else {
						in = x[s*C+c0 : s*C+c1]
					}
					convAcc64(a, wT[j*convBlock:j*convBlock+n], in)
				}
				o := out[t*C+c0 : t*C+c1]
				if act == nil {
					for c, v := range a {
						o[c] = float32(v / (1 + math.Exp(-v)))
					}
				} else {
					narrow32(o, a)
					act(o, tmp[:len(o)])
				}
			}
		}
	})
	// Roll the state: the new state is the last S tokens of state++x.
	if S == 0 {
		return
	}
	if T >= S {
		copy(state[:S*C], x[(T-S)*C:T*C])
		return
	}
	copy(state, state[T*C:S*C])
	copy(state[(S-T)*C:S*C], x[:T*C])
}

// convScratch is a conv worker's accumulators, activation scratch and transposed
// weights, pooled: a decode step's conv allocated them for every layer.
type convScratch struct {
	acc [convBlock]float64
	tmp [convBlock]float32
	wT  []float64
}

var convScratches = sync.Pool{New: func() any { return new(convScratch) }}

// Gates computes beta = sigmoid(b) and g = -exp(aLog) * softplus(a + dtBias) for T tokens
// of nv value heads: b, a, beta, g are [T, nv]; aLog and dtBias are [nv].
func Gates(beta, g, b, a, aLog, dtBias []float32, T, nv int) {
	GatesOn(nil, beta, g, b, a, aLog, dtBias, T, nv)
}

// GatesOn is Gates with tokens spread by r (an exp, an exp and a log1p per value:
// serially ~1.2 ms a layer of a 512-token qwen3.6-35b-a3b prefill, 0.5% of it, with
// the other core idle).
func GatesOn(r Runner, beta, g, b, a, aLog, dtBias []float32, T, nv int) {
	r.run(T, max(1, 2048/max(nv, 1)), func(t0, t1 int) {
		for t := t0; t < t1; t++ {
			for h := 0; h < nv; h++ {
				i := t*nv + h
				beta[i] = Sigmoid(b[i])
				g[i] = float32(-math.Exp(float64(aLog[h])) * softplus64(float64(a[i]+dtBias[h])))
			}
		}
	})
}

// l2normScaled writes x * rsqrt(sum(x^2) + eps) * scale into dst.
func l2normScaled[F float32 | float64](dst []F, x []float32, scale float64) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	scaleRow(dst, x, scale/math.Sqrt(ss+L2NormEps))
}

// l2normScaled4 is l2normScaled of four rows of one length: each row's sum is its own
// chain in increasing index order (the same bits), the four interleaved so that their
// adds overlap instead of each waiting on the one before (the norms of keyData.gather
// were ~1.5% of a qwen3.6-35b-a3b prefill).
func l2normScaled4[F float32 | float64](dst [4][]F, x [4][]float32, scale [4]float64) {
	ss := sumSquares4(x)
	for j := range ss {
		scaleRow(dst[j], x[j], scale[j]/math.Sqrt(ss[j]+L2NormEps))
	}
}

// sumSquares4 is the float64 sum of squares of four rows of one length.
func sumSquares4(x [4][]float32) [4]float64 {
	n := len(x[0])
	x0, x1, x2, x3 := x[0][:n], x[1][:n], x[2][:n], x[3][:n]
	var ss [4]float64
	for i := range n {
		ss[0] += float64(x0[i]) * float64(x0[i])
		ss[1] += float64(x1[i]) * float64(x1[i])
		ss[2] += float64(x2[i]) * float64(x2[i])
		ss[3] += float64(x3[i]) * float64(x3[i])
	}
	return ss
}

// scaleRow writes x * inv into dst, the float64 product rounded once for a float32 dst.
func scaleRow[F float32 | float64](dst []F, x []float32, inv float64) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = F(float64(v) * inv)
	}
}

// Inputs of the gated delta rule for one sequence of T tokens. Q and K are raw (the rule
// L2-normalises them per head and scales q by 1/sqrt(KeyDim), as transformers does with
// use_qk_l2norm_in_kernel=True). Key head h/r serves value head h (r = NumValueHeads /
// NumKeyHeads, torch repeat_interleave).
type Inputs struct {
	T    int
	Q, K []float32 // [T, NumKeyHeads*KeyDim]
	V    []float32 // [T, NumValueHeads*ValueDim]
	G    []float32 // [T, NumValueHeads], log decay (<= 0)
	Beta []float32 // [T, NumValueHeads]
	// Stride, when not 0, is the row stride of Q, K and V: views into rows holding all
	// three, as the conv output [T, ConvDim] does, so nothing is copied out of it.
	Stride int
	// F32 runs the rule in float32 (rule32.go): the backends' default path, twice the
	// vector lanes and half the bytes of the float64 rule, whose extra precision the
	// exact paths keep. Within float32 rounding of the float64 rule, not its bits.
	F32 bool
}

// strides returns the row strides of Q/K and of V.
func (in Inputs) strides(d Dims) (qk, v int) {
	if in.Stride != 0 {
		return in.Stride, in.Stride
	}
	return d.NumKeyHeads * d.KeyDim, d.NumValueHeads * d.ValueDim
}

func (in Inputs) check(d Dims, state, out []float32) {
	kd, vd := d.NumKeyHeads*d.KeyDim, d.NumValueHeads*d.ValueDim
	qs, vs := in.strides(d)
	rows := func(x []float32, stride, width int) bool {
		return in.T == 0 || len(x) >= (in.T-1)*stride+width
	}
	if qs < kd || vs < vd || !rows(in.Q, qs, kd) || !rows(in.K, qs, kd) || !rows(in.V, vs, vd) ||
		len(in.G) < in.T*d.NumValueHeads || len(in.Beta) < in.T*d.NumValueHeads ||
		len(state) < d.StateSize() || len(out) < in.T*vd {
		panic("deltanet: gated delta rule slice too short")
	}
}

// headData is one worker's scratch: value head h's normalised q (scaled), k, and v, g,
// beta gathered into contiguous float64 buffers, the float64 state, and the chunk
// matrices.
//
// The rule runs in float64 (unless Inputs.F32: rule32.go) and rounds to float32 only at
// its outputs and the stored state:
// its output is later RMS-normalised per head, which amplifies rounding error when a
// head's output is small (it happens in the fixtures: a head with mean square ~1e-6 at the
// 1e-6 epsilon), so the extra precision keeps us within the reference's own rounding. The
// loops are the vector kernels of kernels.go (one FMA chain per output element), with
// every dot product written as a column of a product with a transposed matrix, so that
// no result depends on a vector width.
type headData struct {
	keyData[float64]
	v, g, beta, S   []float64
	G, A, P, E, KTe []float64
	U, W, tq, o     []float64
	f32             headData32 // the float32 rule's (Inputs.F32)
}

// keyData is a key head's normalised q (scaled by 1/sqrt(KeyDim)) and k, [T, KeyDim],
// and the chunk products made from them, shared by the value heads it serves.
type keyData[F float32 | float64] struct {
	q, k []F
	keys keyProducts[F]
}

// keyProducts are the chunk matrices that depend on the key head only (its q and k),
// made by the first of the value heads it serves and read by the others: per chunk c of
// the rows [t0, t1) split at first, Kᵀ at KT[c*KeyDim*ChunkSize] (row stride ChunkSize)
// and the raw K Kᵀ and Q Kᵀ at KK and QK [c*ChunkSize²] (row stride ChunkSize).
type keyProducts[F float32 | float64] struct {
	valid         bool
	t0, t1, first int
	KT, KK, QK    []F
}

// ready says whether the products are those of rows [t0, t1) split at first; if not, it
// sizes them for these rows, to be filled by the caller.
func (kp *keyProducts[F]) ready(d Dims, t0, t1, first int) bool {
	if kp.valid && kp.t0 == t0 && kp.t1 == t1 && kp.first == first {
		return true
	}
	C := ChunkSize
	chunks := 1 + (max(0, t1-t0-min(first, C))+C-1)/C
	kp.KT = grow(kp.KT, chunks*d.KeyDim*C)
	kp.KK, kp.QK = grow(kp.KK, chunks*C*C), grow(kp.QK, chunks*C*C)
	kp.valid, kp.t0, kp.t1, kp.first = true, t0, t1, first
	return false
}

// gather fills key head kh's normalised q and k (each row's sum of squares and scale in
// float64, rounded once into F).
func (kd *keyData[F]) gather(d Dims, in Inputs, kh int) {
	T, dk := in.T, d.KeyDim
	qs, _ := in.strides(d)
	scale := 1 / math.Sqrt(float64(dk))
	kd.q = grow(kd.q, T*dk)
	kd.k = grow(kd.k, T*dk)
	kd.keys.valid = false
	row := func(dst []F, src []float32, t int) ([]F, []float32) {
		return dst[t*dk : (t+1)*dk], src[t*qs+kh*dk : t*qs+(kh+1)*dk]
	}
	t := 0
	for ; t+2 <= T; t += 2 {
		var dst [4][]F
		var x [4][]float32
		dst[0], x[0] = row(kd.q, in.Q, t)
		dst[1], x[1] = row(kd.k, in.K, t)
		dst[2], x[2] = row(kd.q, in.Q, t+1)
		dst[3], x[3] = row(kd.k, in.K, t+1)
		l2normScaled4(dst, x, [4]float64{scale, 1, scale, 1})
	}
	for ; t < T; t++ {
		dq, xq := row(kd.q, in.Q, t)
		l2normScaled(dq, xq, scale)
		dk, xk := row(kd.k, in.K, t)
		l2normScaled(dk, xk, 1)
	}
}

// gatherValue fills value head h's v, g, beta and state.
func gatherValue(d Dims, in Inputs, h int, hd *headData, state []float32) {
	T, dk, dv, nv := in.T, d.KeyDim, d.ValueDim, d.NumValueHeads
	_, vs := in.strides(d)
	hd.v = grow(hd.v, T*dv)
	hd.g = grow(hd.g, T)
	hd.beta = grow(hd.beta, T)
	for t := 0; t < T; t++ {
		widen64(hd.v[t*dv:(t+1)*dv], in.V[t*vs+h*dv:t*vs+(h+1)*dv])
		hd.g[t] = float64(in.G[t*nv+h])
		hd.beta[t] = float64(in.Beta[t*nv+h])
	}
	hd.S = grow(hd.S, dk*dv)
	widen64(hd.S, state[h*dk*dv:(h+1)*dk*dv])
}

func storeState(d Dims, h int, hd *headData, state []float32) {
	n := d.KeyDim * d.ValueDim
	narrow32(state[h*n:(h+1)*n], hd.S[:n])
}

func grow[F float32 | float64](b []F, n int) []F {
	if cap(b) < n {
		return make([]F, n)
	}
	return b[:n]
}

// Recurrent runs the gated delta rule token by token (the decode form). state
// [NumValueHeads, KeyDim, ValueDim] is read as the incoming state and overwritten with the
// final one; out is [T, NumValueHeads*ValueDim].
func Recurrent(d Dims, in Inputs, state, out []float32) { RecurrentOn(nil, d, in, state, out) }

// RecurrentOn is Recurrent with value heads spread by r.
func RecurrentOn(r Runner, d Dims, in Inputs, state, out []float32) {
	RecurrentInto(r, d, in, state, state, out)
}

// RecurrentInto is RecurrentOn reading the incoming state from `from` and writing the
// final one to `to` (which may be `from`), so a caller can keep the old state without
// copying it.
func RecurrentInto(r Runner, d Dims, in Inputs, from, to, out []float32) {
	in.check(d, from, out)
	in.check(d, to, out)
	if in.F32 {
		rule32(r, d, in, 0, ChunkSize, from, to, out)
		return
	}
	n := d.KeyDim * d.ValueDim
	forHeads(r, d, in, func(h int, hd *headData) {
		gatherValue(d, in, h, hd, from)
		recurrentHead(d, hd, 0, in.T, out, h, false)
		if in.T == 1 {
			// A decode step's new state is read again only at the layer's next
			// step, after the weights streamed through the caches: stores past
			// the cache skip reading its lines first (BenchmarkRecurrentCold
			// ~30% less CPU; ~5% more when the state stays cached).
			narrow32Stream(to[h*n:(h+1)*n], hd.S[:n])
			return
		}
		storeState(d, h, hd, to)
	})
}

// recurrentHead runs rows [t0, t1) token by token. With round, the state is rounded to
// float32 between tokens, as storing it between one-token calls (decode steps) does (the
// caller stores, or rounds, the state after the last one).
//
// One token: with S the incoming state [KeyDim, ValueDim] and decay exp(g),
// delta = beta (v - decay Sᵀk), S' = decay S + k deltaᵀ, o = S'ᵀq: three passes over S
// (the decayed state is never stored on its own).
func recurrentHead(d Dims, hd *headData, t0, t1 int, out []float32, h int, round bool) {
	dk, dv := d.KeyDim, d.ValueDim
	vd := d.NumValueHeads * dv
	S := hd.S
	hd.P = grow(hd.P, 2*dv)
	delta, o := hd.P[:dv], hd.P[dv:2*dv]
	for t := t0; t < t1; t++ {
		q, k, v := hd.q[t*dk:(t+1)*dk], hd.k[t*dk:(t+1)*dk], hd.v[t*dv:(t+1)*dv]
		decay := math.Exp(hd.g[t])
		beta := hd.beta[t]
		clear(delta)
		gemv64(delta, k, S, dk, dv, dv, 1)
		for j := range delta {
			delta[j] = (v[j] - decay*delta[j]) * beta
		}
		ger64(S, k, delta, dk, dv, dv, decay)
		clear(o)
		gemv64(o, q, S, dk, dv, dv, 1)
		narrow32(out[t*vd+h*dv:t*vd+(h+1)*dv], o)
		if round && t < t1-1 {
			roundState(S)
		}
	}
}

// roundState rounds every element of a float64 state to float32, the precision the state
// is stored in between calls.
func roundState(S []float64) { round32(S) }

// Chunked runs the gated delta rule in chunks of ChunkSize tokens (the prefill form,
// transformers' torch_chunk_gated_delta_rule). Same contract as Recurrent, and the same
// result up to rounding.
func Chunked(d Dims, in Inputs, state, out []float32) { ChunkedOn(nil, d, in, state, out) }

// ChunkedOn is Chunked with value heads spread by r.
func ChunkedOn(r Runner, d Dims, in Inputs, state, out []float32) {
	ChunkedInto(r, d, in, state, state, out)
}

// ChunkedInto is ChunkedOn reading the incoming state from `from` and writing the final
// one to `to` (which may be `from`).
func ChunkedInto(r Runner, d Dims, in Inputs, from, to, out []float32) {
	in.check(d, from, out)
	in.check(d, to, out)
	if in.F32 {
		rule32(r, d, in, in.T, ChunkSize, from, to, out)
		return
	}
	forHeads(r, d, in, func(h int, hd *headData) {
		gatherValue(d, in, h, hd, from)
		chunkedHead(d, hd, 0, in.T, ChunkSize, out, h, false)
		storeState(d, h, hd, to)
	})
}

// CanonicalInto runs the gated delta rule for one sequence with fixed boundaries, so that
// the bits of every output row and of the final state do not depend on how the sequence
// was split into calls (batch invariance, docs/engine.md, "Batch invariance"). The call's first row
// is at absolute position pos. Rows [0, prompt) are prompt rows: chunked, with chunks
// starting at absolute positions that are multiples of ChunkSize (the first one runs up to
// the next multiple, the last one ends at row prompt) and the state rounded to float32
// after every chunk, so a call boundary at a multiple of ChunkSize or at the prompt's end
// changes nothing. Rows [prompt, T) are generated rows: one token at a time with the state
// rounded to float32 after each, exactly the arithmetic of a sequence of one-token
// Recurrent calls (decode steps). Otherwise as ChunkedInto.
func CanonicalInto(r Runner, d Dims, in Inputs, pos, prompt int, from, to, out []float32) {
	in.check(d, from, out)
	in.check(d, to, out)
	if pos < 0 || prompt < 0 || prompt > in.T {
		panic(fmt.Sprintf("deltanet: canonical rule at position %d with %d prompt rows of %d", pos, prompt, in.T))
	}
	first := ChunkSize - pos%ChunkSize
	if in.F32 {
		// The float32 state is rounded to float32 at every step: nothing to add.
		rule32(r, d, in, prompt, first, from, to, out)
		return
	}
	forHeads(r, d, in, func(h int, hd *headData) {
		gatherValue(d, in, h, hd, from)
		chunkedHead(d, hd, 0, prompt, first, out, h, true)
		if prompt > 0 && prompt < in.T {
			roundState(hd.S) // the prompt's end
		}
		recurrentHead(d, hd, prompt, in.T, out, h, true)
		storeState(d, h, hd, to) // rounds after the last chunk or token
	})
}

// chunkedHead runs rows [t0, t1) in chunks: the first of at most first rows, then of
// ChunkSize. With round, the state is rounded to float32 between chunks (the caller
// stores, or rounds, it after the last one).
func chunkedHead(d Dims, hd *headData, t0, t1, first int, out []float32, h int, round bool) {
	dk, dv := d.KeyDim, d.ValueDim
	vd := d.NumValueHeads * dv
	C := ChunkSize
	S := hd.S
	hd.G = grow(hd.G, C)
	hd.A = grow(hd.A, C*C)      // strictly lower: -beta_i k_i.k_j exp(G_i-G_j)
	hd.P = grow(hd.P, C*C)      // lower: q_i.k_j exp(G_i-G_j), zero above
	hd.E = grow(hd.E, C*C)      // lower: exp(G_i-G_j)
	hd.KTe = grow(hd.KTe, dk*C) // KTe[x*C+i] = exp(G_last-G_i) k_i[x]
	hd.U = grow(hd.U, C*dv)
	hd.W = grow(hd.W, C*dk)
	hd.tq = grow(hd.tq, C*dk) // exp(G) Q
	hd.o = grow(hd.o, C*dv)
	G, A, P, E, KTe, U, W := hd.G, hd.A, hd.P, hd.E, hd.KTe, hd.U, hd.W
	tq, o := hd.tq, hd.o
	// Kᵀ, K Kᵀ and Q Kᵀ of each chunk are the same for every value head of the key
	// head: made for the first, read by the others.
	kp := &hd.keys
	made := kp.ready(d, t0, t1, first)
	for ci, c0, L := 0, t0, min(first, C); c0 < t1; ci, c0, L = ci+1, c0+L, C {
		L = min(L, t1-c0)
		KT := kp.KT[ci*dk*C : (ci+1)*dk*C]                           // Kᵀ: KT[x*C+j] = k_j[x]
		KK, QK := kp.KK[ci*C*C:(ci+1)*C*C], kp.QK[ci*C*C:(ci+1)*C*C] // k_i.k_j, q_i.k_j
		if !made {
			ops64.keyChunk(d, hd.k[c0*dk:(c0+L)*dk], hd.q[c0*dk:(c0+L)*dk], L, KT, KK, QK)
		}
		q := hd.q[c0*dk : (c0+L)*dk]
		k := hd.k[c0*dk : (c0+L)*dk]
		v := hd.v[c0*dv : (c0+L)*dv]
		beta := hd.beta[c0 : c0+L]
		// G is the cumulative log decay; E[i][j] = exp(G_i-G_j) = Π_{j<m<=i} exp(g_m),
		// built from one exp per row (float64 products: far below float32 rounding).
		var acc float64
		for i := 0; i < L; i++ {
			acc += hd.g[c0+i]
			G[i] = acc
			eg := math.Exp(hd.g[c0+i])
			E[i*C+i] = 1
			for j := i - 1; j >= 0; j-- {
				E[i*C+j] = E[(i-1)*C+j] * eg
			}
		}
		// A and the right-hand sides beta*V and -beta*exp(G)*K (W holds -W: the
		// substitution is linear and negation exact, so Vn = U + W S below).
		for i := 0; i < L; i++ {
			for j := 0; j < i; j++ {
				A[i*C+j] = -(beta[i] * KK[i*C+j] * E[i*C+j])
			}
			for j := 0; j <= i; j++ {
				P[i*C+j] = QK[i*C+j] * E[i*C+j]
			}
			clear(P[i*C+i+1 : i*C+L])
			bi, nbe := beta[i], -(beta[i] * math.Exp(G[i]))
			ui, vi := U[i*dv:(i+1)*dv], v[i*dv:(i+1)*dv]
			for x := range ui {
				ui[x] = bi * vi[x]
			}
			wi, ki := W[i*dk:(i+1)*dk], k[i*dk:(i+1)*dk]
			for x := range wi {
				wi[x] = nbe * ki[x]
			}
		}
		// Forward substitution: (I + A) U = beta V, (I + A) W = -beta exp(G) K.
		for i := 1; i < L; i++ {
			gemv64(U[i*dv:(i+1)*dv], A[i*C:i*C+i], U, i, dv, dv, 1)
			gemv64(W[i*dk:(i+1)*dk], A[i*C:i*C+i], W, i, dk, dk, 1)
		}
		// Vn = U - W S (in place in U).
		gemm64(U, dv, W, dk, S, dv, L, dk, dv, 1)
		// O = (exp(G) Q) S + P Vn.
		for i := 0; i < L; i++ {
			eg := math.Exp(G[i])
			for x, qx := range q[i*dk : (i+1)*dk] {
				tq[i*dk+x] = eg * qx
			}
		}
		clear(o[:L*dv])
		gemm64(o, dv, tq, dk, S, dv, L, dk, dv, 1)
		gemm64(o, dv, P, C, U, dv, L, L, dv, 1)
		for i := 0; i < L; i++ {
			narrow32(out[(c0+i)*vd+h*dv:(c0+i)*vd+(h+1)*dv], o[i*dv:(i+1)*dv])
		}
		// S' = exp(G_last) S + sum_i exp(G_last - G_i) k_i Vn_i^T; exp(G_last - G_i)
		// is row L-1 of E.
		el := E[(L-1)*C : (L-1)*C+L]
		for x := 0; x < dk; x++ {
			kt, kte := KT[x*C:x*C+L], KTe[x*C:x*C+L]
			for i, e := range el {
				kte[i] = e * kt[i]
			}
		}
		gemm64(S, dv, KTe, C, U, dv, dk, L, dv, math.Exp(G[L-1]))
		if round && c0+L < t1 {
			roundState(S)
		}
	}
}

// GatedRMSNorm applies, for each of the n rows of width dim in x, y = w * rmsnorm(x) *
// silu(z) (w not zero-centred), writing into out (which may alias x).
func GatedRMSNorm(out, x, z, w []float32, n, dim int, eps float32) {
	for r := 0; r < n; r++ {
		xr, zr, or := x[r*dim:(r+1)*dim], z[r*dim:(r+1)*dim], out[r*dim:(r+1)*dim]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(dim)+float64(eps))
		for i, v := range xr {
			or[i] = float32(float64(w[i]) * float64(v) * inv * float64(silu(zr[i])))
		}
	}
}

// Runner runs fn(lo, hi) over chunks of [0, n) of at least grain items, possibly in
// parallel, and returns when all are done. A backend passes its own worker pool (see the
// *On functions); nil means the package's default, goroutines up to GOMAXPROCS that are
// all waited for before returning.
type Runner func(n, grain int, fn func(lo, hi int))

func (r Runner) run(n, grain int, fn func(lo, hi int)) {
	if r == nil {
		parallelFor(n, grain, fn)
		return
	}
	r(n, grain, fn)
}

// forHeads runs fn for every value head, spread over key heads: each key head's q and k
// are normalised once (keyData.gather) for the value heads it serves, which run one after the
// other. Scratch comes from a pool, so a layer's call allocates nothing.
func forHeads(r Runner, d Dims, in Inputs, fn func(h int, hd *headData)) {
	nk, rep := d.NumKeyHeads, d.NumValueHeads/d.NumKeyHeads
	grain := nk
	if d.NumValueHeads*in.T*d.KeyDim*d.ValueDim >= 1<<14 {
		grain = 1
	}
	r.run(nk, grain, func(lo, hi int) {
		hd := scratch.Get().(*headData)
		defer scratch.Put(hd)
		for kh := lo; kh < hi; kh++ {
			if in.F32 {
				hd.f32.gather(d, in, kh)
			} else {
				hd.gather(d, in, kh)
			}
			for h := kh * rep; h < (kh+1)*rep; h++ {
				fn(h, hd)
			}
		}
	})
}

var scratch = sync.Pool{New: func() any { return new(headData) }}

// parallelFor splits [0,n) into ranges of at least grain items over the cores.
func parallelFor(n, grain int, fn func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), (n+grain-1)/grain)
	if workers <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	step := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}
