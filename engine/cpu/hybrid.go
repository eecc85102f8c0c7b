package cpu

// The optional engine.DeltaNetOps and engine.MoEOps of the hybrid and MoE Qwen models,
// on top of the reference maths in engine/deltanet and engine/moe.

import (
	"fmt"
	"math"
	"sync"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
	"github.com/macpool/macpool/engine/deltanet"
)

var (
	_ engine.DeltaNetOps     = (*Backend)(nil)
	_ engine.MoEOps          = (*Backend)(nil)
	_ engine.TruncateChecker = (*deltaState)(nil)
)

// deltaState is a Gated DeltaNet layer's state for one sequence. Every update keeps the
// state it starts from, so a failed forward pass can be undone (Truncate to the previous
// length): the small conv state is copied, the delta-rule state is double-buffered (the
// update reads rule and writes prevRule, then the two swap).
type deltaState struct {
	p          engine.DeltaNetParams
	conv, rule []float32 // [K-1, ConvDim], [ValueHeads, KeyDim, ValueDim]
	n          int
	prevConv   []float32
	prevRule   []float32
	prevN      int // -1: no saved state
}

// NewDeltaNetState allocates a zero state.
func (b *Backend) NewDeltaNetState(p engine.DeltaNetParams) (engine.DeltaNetState, error) {
	d := dims(p)
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if p.ConvKernel < 1 {
		return nil, fmt.Errorf("linear_conv_kernel_dim %d must be positive", p.ConvKernel)
	}
	return &deltaState{
		p:     p,
		conv:  make([]float32, (p.ConvKernel-1)*p.ConvDim()),
		rule:  make([]float32, d.StateSize()),
		prevN: -1,
	}, nil
}

func dims(p engine.DeltaNetParams) deltanet.Dims {
	return deltanet.Dims{NumKeyHeads: p.KeyHeads, NumValueHeads: p.ValueHeads, KeyDim: p.KeyDim, ValueDim: p.ValueDim}
}

func (s *deltaState) Len() int { return s.n }

// CanTruncate says whether Truncate(n) would succeed: n is the current length, 0, or the
// length before the last update.
func (s *deltaState) CanTruncate(n int) error {
	if n == s.n || n == 0 || n == s.prevN {
		return nil
	}
	return fmt.Errorf("recurrent state holds %d positions and cannot be truncated to %d (only to 0 or its length)", s.n, n)
}

func (s *deltaState) Truncate(n int) error {
	switch {
	case n == s.n:
		return nil
	case n == 0:
		clear(s.conv)
		clear(s.rule)
		s.n, s.prevN = 0, -1
		return nil
	case n == s.prevN:
		s.conv, s.prevConv = s.prevConv, s.conv
		s.rule, s.prevRule = s.prevRule, s.rule
		s.n, s.prevN = s.prevN, -1
		return nil
	}
	return s.CanTruncate(n)
}

func (s *deltaState) Free() {
	s.conv, s.rule, s.prevConv, s.prevRule, s.n, s.prevN = nil, nil, nil, nil, 0, -1
}

// begin starts an update: it copies the conv state aside and returns the delta-rule
// buffers to read from and write to; commit finishes it.
func (s *deltaState) begin() (from, to []float32) {
	if s.prevConv == nil {
		s.prevConv = make([]float32, len(s.conv))
		s.prevRule = make([]float32, len(s.rule))
	}
	copy(s.prevConv, s.conv)
	return s.rule, s.prevRule
}

// commit makes the buffer written by the update current and keeps the old one for undo.
func (s *deltaState) commit(n int) {
	s.rule, s.prevRule = s.prevRule, s.rule
	s.prevN = s.n
	s.n += n
}

// vector returns a weight's values as float32 (a view when decoded at upload).
func (w *Weight) vector() []float32 {
	if w.f32 != nil && len(w.f32) == w.rows*w.cols {
		return w.f32
	}
	out := make([]float32, w.rows*w.cols)
	for r := 0; r < w.rows; r++ {
		copy(out[r*w.cols:], w.rowF32(r, out[r*w.cols:(r+1)*w.cols]))
	}
	return out
}

// GatedDeltaNet implements engine.DeltaNetOps. Sequences run one after the other; within
// one, the conv is parallel over channels and the delta rule over value heads, on the
// backend's workers.
func (b *Backend) GatedDeltaNet(dst, qkv, z, bt, at engine.Tensor, w engine.DeltaNetWeights, seqs []engine.DeltaNetSeq, p engine.DeltaNetParams) {
	d := dims(p)
	C, K := p.ConvDim(), p.ConvKernel
	kd, vd, nv := p.KeyHeads*p.KeyDim, p.ValueHeads*p.ValueDim, p.ValueHeads
	o, x, zt, bb, aa := tt(dst), tt(qkv), tt(z), tt(bt), tt(at)
	T := x.rows
	if x.cols != C || o.cols != vd || zt.cols != vd || bb.cols != nv || aa.cols != nv ||
		o.rows != T || zt.rows != T || bb.rows != T || aa.rows != T {
		panic(fmt.Sprintf("cpu: gated deltanet shapes qkv [%d, %d] z [%d, %d] b [%d, %d] a [%d, %d] dst [%d, %d] for conv dim %d, value dim %d, %d value heads",
			x.rows, x.cols, zt.rows, zt.cols, bb.rows, bb.cols, aa.rows, aa.cols, o.rows, o.cols, C, vd, nv))
	}
	cw, al, dt, nw := ww(w.Conv), ww(w.ALog), ww(w.DtBias), ww(w.Norm)
	if cw.rows*cw.cols != C*K || al.rows*al.cols != nv || dt.rows*dt.cols != nv || nw.rows*nw.cols != p.ValueDim {
		panic(fmt.Sprintf("cpu: gated deltanet weights conv [%d, %d] A_log %d dt_bias %d norm %d for conv dim %d kernel %d, %d value heads of %d",
			cw.rows, cw.cols, al.rows*al.cols, dt.rows*dt.cols, nw.rows*nw.cols, C, K, nv, p.ValueDim))
	}
	conv, aLog, dtBias, norm := cw.vector(), al.vector(), dt.vector(), nw.vector()
	run := b.runner()
	for i, sq := range seqs {
		st, ok := sq.State.(*deltaState)
		if !ok {
			panic(fmt.Sprintf("cpu: gated deltanet sequence %d: state is %T", i, sq.State))
		}
		if sq.Row < 0 || sq.N <= 0 || sq.Row+sq.N > T || st.n != sq.Pos || st.p != p {
			panic(fmt.Sprintf("cpu: gated deltanet sequence %d: rows [%d, +%d) of %d, position %d, state holds %d", i, sq.Row, sq.N, T, sq.Pos, st.n))
		}
		from, to := st.begin()
		// prompt: rows computed as prompt rows with canonical chunk boundaries, the rest
		// as decode steps (engine.DeltaNetSeq.PromptEnd); -1 without a PromptEnd.
		prompt := -1
		if sq.PromptEnd > 0 {
			prompt = min(sq.N, max(0, sq.PromptEnd-sq.Pos))
		}
		// Long prompts go through in pieces of about deltaPiece tokens that end at a
		// multiple of the chunk size (counted from the call's start, or with a PromptEnd
		// at an absolute position), so the result is the one of a single pass while the
		// scratch stays bounded.
		for p0, n := 0, 0; p0 < sq.N; p0 += n {
			n = min(deltaPiece, sq.N-p0)
			if end := sq.Pos + p0 + n; prompt >= 0 && p0+n < sq.N && end%deltanet.ChunkSize != 0 {
				n -= end % deltanet.ChunkSize
			}
			r0 := sq.Row + p0
			buf := dnBufs.Get().(*dnBuf)
			buf.mixed = growF32(buf.mixed, n*C)
			buf.g, buf.beta = growF32(buf.g, n*nv), growF32(buf.beta, n*nv)
			mixed := buf.mixed
			deltanet.CausalConv1DActOn(run, mixed, x.data[r0*C:(r0+n)*C], n, C, conv, K, st.conv, silu)
			// q, k and v are views into the conv output's rows (Inputs.Stride).
			in := deltanet.Inputs{T: n, Q: mixed, K: mixed[kd:], V: mixed[2*kd:], G: buf.g, Beta: buf.beta, Stride: C, F32: b.rule32()}
			deltanet.GatesOn(run, in.Beta, in.G, bb.data[r0*nv:(r0+n)*nv], aa.data[r0*nv:(r0+n)*nv], aLog, dtBias, n, nv)
			out := o.data[r0*vd : (r0+n)*vd]
			switch {
			case prompt >= 0:
				deltanet.CanonicalInto(run, d, in, sq.Pos+p0, min(n, max(0, prompt-p0)), from, to, out)
			case sq.N > 1:
				deltanet.ChunkedInto(run, d, in, from, to, out)
			default:
				deltanet.RecurrentInto(run, d, in, from, to, out)
			}
			from = to // later pieces continue in place
			b.gatedRMSNorm(out, out, zt.data[r0*vd:(r0+n)*vd], norm, n*nv, p.ValueDim, p.Eps)
			dnBufs.Put(buf)
		}
		st.commit(sq.N)
	}
}

// rule32 says whether the delta rule runs in float32 (deltanet.Inputs.F32): on the
// default path, whose int8 activations are far coarser than its rounding; the exact
// paths (ExactMatMul, PreciseHybrid) keep the float64 rule and its bits.
func (b *Backend) rule32() bool { return !b.exact && !b.preciseHybrid }

// dnBuf is GatedDeltaNet's scratch for one piece: the conv output and the gates.
type dnBuf struct{ mixed, g, beta []float32 }

var dnBufs = sync.Pool{New: func() any { return new(dnBuf) }}

func growF32(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// silu sets x = silu(x) = x·sigmoid(x) with the vectorised exp (within 2 ulp of
// math.Exp), using tmp (len(x)) for the exps: a deltanet.CausalConv1DActOn activation.
func silu(x, tmp []float32) {
	e := negExp(tmp[:len(x)], x)
	for i, v := range x {
		x[i] = v / (1 + e[i])
	}
}

// gatedRMSNorm is deltanet.GatedRMSNorm on the backend's workers, with silu(z) from the
// vectorised exp: y = w * rmsnorm(x) * silu(z) for n rows of width dim (out may alias x).
func (b *Backend) gatedRMSNorm(out, x, z, w []float32, n, dim int, eps float32) {
	b.parallel(n, max(1, 4096/dim), func(lo, hi, wk int) {
		e := b.scratchBuf(wk, dim)
		for r := lo; r < hi; r++ {
			xr, zr, or := x[r*dim:(r+1)*dim], z[r*dim:(r+1)*dim], out[r*dim:(r+1)*dim]
			var ss float64
			for _, v := range xr {
				ss += float64(v) * float64(v)
			}
			inv := 1 / math.Sqrt(ss/float64(dim)+float64(eps))
			negExp(e, zr)
			for i, v := range xr {
				or[i] = float32(float64(w[i]) * float64(v) * inv * float64(zr[i]/(1+e[i])))
			}
		}
	})
}

// deltaPiece is the most tokens of one sequence GatedDeltaNet processes at once.
const deltaPiece = 16 * deltanet.ChunkSize

// runner lets engine/deltanet spread its loops over the backend's workers.
func (b *Backend) runner() deltanet.Runner {
	return func(n, grain int, fn func(lo, hi int)) {
		b.parallel(n, grain, func(lo, hi, _ int) { fn(lo, hi) })
	}
}

// MatMulPrecise is MatMul (without bias), with float32 activations for a
// quantized weight when Config.PreciseHybrid is set (what ExactMatMul does
// for every matrix): the hybrid models' linear-attention projections and
// the MoE router take it, since the int8 rounding of their inputs is
// carried forward by the recurrent state or flips expert choices
// (docs/engine.md, "Fast-path accuracy"). Weights without a quantized
// kernel take MatMul.
func (b *Backend) MatMulPrecise(dst, x engine.Tensor, w engine.Weight) {
	d, xt, wt := tt(dst), tt(x), ww(w)
	if b.exact || !b.preciseHybrid || wt.k == nil || !wt.k.Quantized() {
		b.MatMul(dst, x, w, nil)
		return
	}
	M, K, N := xt.rows, xt.cols, wt.rows
	if wt.cols != K || d.rows != M || d.cols != N {
		panic(fmt.Sprintf("cpu: matmul x [%d, %d] · w [%d, %d]ᵀ into [%d, %d]", M, K, wt.rows, wt.cols, d.rows, d.cols))
	}
	k := wt.k
	in := inputs.Get().(*kernels.Input)
	defer inputs.Put(in)
	in.Reset(xt.data, M, K)
	align := k.RowAlign()
	units := (N + align - 1) / align
	b.parallel(units, max(1, 64/align), func(lo, hi, _ int) {
		k.MatMulExact(d.data, N, in, lo*align, min(N, hi*align))
	})
}

// MatMulShared sets dsts[i] = x·ws[i]ᵀ for weights that share the input x (a layer's
// q, k and v; gate and up; the projections of a token mixer). With quantized kernels
// the input is quantized once and every matrix's rows go to one parallel job: one
// hand-off to the workers instead of one per matrix, and at decode no barrier between
// matrices to idle a core at while the other finishes its last chunk. Each output is
// computed by the same kernel on the same quantized rows as in MatMul, so the bits are
// those of separate MatMuls. With precise, each product is MatMulPrecise's
// (PreciseHybrid then takes float32 activations). Anything else (exact mode,
// unquantized weights) takes one MatMul each.
func (b *Backend) MatMulShared(dsts []engine.Tensor, x engine.Tensor, ws []engine.Weight, precise bool) {
	xt := tt(x)
	if len(dsts) != len(ws) {
		panic(fmt.Sprintf("cpu: matmul shared: %d outputs for %d weights", len(dsts), len(ws)))
	}
	shared := !b.exact && !(precise && b.preciseHybrid) && xt.cols%kernels.QK == 0
	ds, wts := make([]*Tensor, len(ws)), make([]*Weight, len(ws))
	for i, w := range ws {
		wt := ww(w)
		ds[i], wts[i] = tt(dsts[i]), wt
		if wt.cols != xt.cols || ds[i].rows != xt.rows || ds[i].cols != wt.rows {
			panic(fmt.Sprintf("cpu: matmul x [%d, %d] · w [%d, %d]ᵀ into [%d, %d]", xt.rows, xt.cols, wt.rows, wt.cols, ds[i].rows, ds[i].cols))
		}
		if wt.k == nil || !wt.k.Quantized() {
			shared = false
		}
	}
	if !shared {
		for i, w := range ws {
			if precise {
				b.MatMulPrecise(dsts[i], x, w)
			} else {
				b.MatMul(dsts[i], x, w, nil)
			}
		}
		return
	}
	M, K := xt.rows, xt.cols
	in := inputs.Get().(*kernels.Input)
	defer inputs.Put(in)
	in.Reset(xt.data, M, K)
	b.parallel(M, max(1, 8192/K), func(lo, hi, _ int) { in.QuantizeRows(lo, hi) })
	b.matmulInputs(in, ds, wts)
}
