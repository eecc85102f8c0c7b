package metal

import (
	"fmt"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/metal/gpu"
)

var (
	_ engine.DeltaNetOps     = (*Backend)(nil)
	_ engine.TruncateChecker = (*dnState)(nil)
)

// dnState is a Gated DeltaNet layer's state for one sequence on the device:
// conv state [K-1, ConvDim] and rule state [ValueHeads, KeyDim, ValueDim],
// each double-buffered. An update reads buffer cur and writes 1-cur, so the
// previous state stays for undo (Truncate to the length before the last
// update). fresh marks the current state as zero without touching memory
// (Truncate(0) may come while a command buffer still reads it).
type dnState struct {
	b          *Backend
	p          engine.DeltaNetParams
	conv, rule [2]gpu.Buffer
	cur        int
	fresh      bool
	n          int
	prevN      int // -1: no saved state
	prevFresh  bool
}

// NewDeltaNetState implements engine.DeltaNetOps.
func (b *Backend) NewDeltaNetState(p engine.DeltaNetParams) (engine.DeltaNetState, error) {
	if p.KeyHeads <= 0 || p.ValueHeads <= 0 || p.ValueHeads%p.KeyHeads != 0 || p.KeyDim <= 0 || p.ValueDim <= 0 {
		return nil, fmt.Errorf("metal: deltanet %d key heads, %d value heads of %d×%d", p.KeyHeads, p.ValueHeads, p.KeyDim, p.ValueDim)
	}
	if p.ConvKernel < 1 {
		return nil, fmt.Errorf("linear_conv_kernel_dim %d must be positive", p.ConvKernel)
	}
	s := &dnState{b: b, p: p, fresh: true, prevN: -1}
	for i := range 2 {
		var err error
		if s.conv[i], err = b.dev.NewBuffer(4 * max((p.ConvKernel-1)*p.ConvDim(), 1)); err != nil {
			return nil, err
		}
		if s.rule[i], err = b.dev.NewBuffer(4 * p.ValueHeads * p.KeyDim * p.ValueDim); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *dnState) Len() int { return s.n }

// CanTruncate implements engine.TruncateChecker.
func (s *dnState) CanTruncate(n int) error {
	if n == s.n || n == 0 || n == s.prevN {
		return nil
	}
	return fmt.Errorf("recurrent state holds %d positions and cannot be truncated to %d (only to 0 or its length)", s.n, n)
}

func (s *dnState) Truncate(n int) error {
	switch {
	case n == s.n:
		return nil
	case n == 0:
		s.fresh, s.n, s.prevN = true, 0, -1
		return nil
	case n == s.prevN:
		s.cur = 1 - s.cur
		s.n, s.fresh, s.prevN = s.prevN, s.prevFresh, -1
		return nil
	}
	return s.CanTruncate(n)
}

func (s *dnState) Free() {
	for i := range 2 {
		for _, x := range []gpu.Buffer{s.conv[i], s.rule[i]} {
			if x != nil {
				s.b.retire(x)
			}
		}
		s.conv[i], s.rule[i] = nil, nil
	}
	s.n, s.prevN = 0, -1
}

func b2u(v bool) int {
	if v {
		return 1
	}
	return 0
}

// GatedDeltaNet implements engine.DeltaNetOps: per sequence, conv (+ new
// conv state), the delta rule over its tokens, then the gated RMSNorm.
func (b *Backend) GatedDeltaNet(dst, qkv, z, bt, at engine.Tensor, w engine.DeltaNetWeights, seqs []engine.DeltaNetSeq, p engine.DeltaNetParams) {
	C, K := p.ConvDim(), p.ConvKernel
	vd, nv := p.ValueHeads*p.ValueDim, p.ValueHeads
	o, x, zt, bb, aa := tt(dst), tt(qkv), tt(z), tt(bt), tt(at)
	T := x.rows
	if x.cols != C || o.cols != vd || zt.cols != vd || bb.cols != nv || aa.cols != nv ||
		o.rows != T || zt.rows != T || bb.rows != T || aa.rows != T || p.KeyDim > 256 {
		panic(fmt.Sprintf("metal: gated deltanet shapes qkv [%d, %d] z [%d, %d] b [%d, %d] a [%d, %d] dst [%d, %d] for conv dim %d, value dim %d, %d value heads",
			x.rows, x.cols, zt.rows, zt.cols, bb.rows, bb.cols, aa.rows, aa.cols, o.rows, o.cols, C, vd, nv))
	}
	cw, al, dt, nw := ww(w.Conv), ww(w.ALog), ww(w.DtBias), ww(w.Norm)
	if cw.rows*cw.cols != C*K || al.rows*al.cols != nv || dt.rows*dt.cols != nv || nw.rows*nw.cols != p.ValueDim ||
		cw.fmt != fmtF32 || al.fmt != fmtF32 || dt.fmt != fmtF32 || nw.fmt != fmtF32 {
		panic(fmt.Sprintf("metal: gated deltanet weights conv [%d, %d] A_log %d dt_bias %d norm %d for conv dim %d kernel %d, %d value heads of %d",
			cw.rows, cw.cols, al.rows*al.cols, dt.rows*dt.cols, nw.rows*nw.cols, C, K, nv, p.ValueDim))
	}
	maxN := 0
	for _, sq := range seqs {
		maxN = max(maxN, sq.N)
	}
	if maxN == 0 {
		return
	}
	u, err := b.dev.NewBuffer(4 * maxN * C) // conv output of one sequence at a time
	if err != nil {
		panic(fmt.Sprintf("metal: deltanet scratch: %v", err))
	}
	b.pending = append(b.pending, u)
	for _, sq := range seqs {
		st, ok := sq.State.(*dnState)
		if !ok || st.p != p || sq.Pos != st.n || sq.Row < 0 || sq.Row+sq.N > T {
			panic(fmt.Sprintf("metal: deltanet sequence rows [%d,+%d) at %d with state of %d positions", sq.Row, sq.N, sq.Pos, st.Len()))
		}
		if sq.N == 0 {
			continue
		}
		from, to := st.cur, 1-st.cur
		if sq.N <= maxFuseRows && p.KeyDim <= 256 && p.ValueDim <= 256 && b.canFuse("dn_step") {
			// Decode: conv, conv state, rule and gated norm in one dispatch (same bits).
			b.dispatch("dn_step", [3]int{nv, 1, 1}, [3]int{ceil(p.ValueDim, 32) * 32, 1, 1},
				buf(o.buf), buf(x.buf), buf(zt.buf), gpu.Arg{Buf: cw.data, Off: cw.off}, buf(st.conv[from]), buf(st.conv[to]),
				buf(bb.buf), buf(aa.buf), gpu.Arg{Buf: al.data, Off: al.off}, gpu.Arg{Buf: dt.data, Off: dt.off},
				buf(st.rule[from]), buf(st.rule[to]), gpu.Arg{Buf: nw.data, Off: nw.off},
				gpu.Arg{Bytes: pack(sq.Row, sq.N, C, K, b2u(st.fresh), p.KeyHeads, nv, p.KeyDim, p.ValueDim, p.Eps)})
			st.prevN, st.prevFresh = st.n, st.fresh
			st.cur, st.fresh = to, false
			st.n += sq.N
			continue
		}
		cp := gpu.Arg{Bytes: pack(sq.Row, sq.N, C, K, b2u(st.fresh))}
		if K > 1 && b.canFuse("dn_conv_both") {
			// Conv output and new conv state in one dispatch (same bits).
			b.dispatch("dn_conv_both", [3]int{ceil(max(sq.N, K-1)*C, 256), 1, 1}, [3]int{256, 1, 1},
				buf(u), buf(st.conv[to]), buf(x.buf), gpu.Arg{Buf: cw.data, Off: cw.off}, buf(st.conv[from]), cp)
		} else {
			b.dispatch("dn_conv", [3]int{ceil(sq.N*C, 256), 1, 1}, [3]int{256, 1, 1},
				buf(u), buf(x.buf), gpu.Arg{Buf: cw.data, Off: cw.off}, buf(st.conv[from]), cp)
			if K > 1 {
				b.dispatch("dn_conv_state", [3]int{ceil((K-1)*C, 256), 1, 1}, [3]int{256, 1, 1},
					buf(st.conv[to]), buf(x.buf), buf(st.conv[from]), cp)
			}
		}
		b.dispatch("dn_rule", [3]int{ceil(p.ValueDim, 32), nv, 1}, [3]int{32, 1, 1},
			buf(o.buf), buf(u), buf(bb.buf), buf(aa.buf), gpu.Arg{Buf: al.data, Off: al.off}, gpu.Arg{Buf: dt.data, Off: dt.off},
			buf(st.rule[from]), buf(st.rule[to]),
			gpu.Arg{Bytes: pack(sq.Row, sq.N, p.KeyHeads, nv, p.KeyDim, p.ValueDim, C, b2u(st.fresh))})
		b.dispatch("dn_gated_norm", [3]int{nv, sq.N, 1}, [3]int{32, 1, 1},
			buf(o.buf), buf(zt.buf), gpu.Arg{Buf: nw.data, Off: nw.off}, gpu.Arg{Bytes: pack(sq.Row, nv, p.ValueDim, p.Eps)})
		st.prevN, st.prevFresh = st.n, st.fresh
		st.cur, st.fresh = to, false
		st.n += sq.N
	}
}
