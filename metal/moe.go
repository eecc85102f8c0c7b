package metal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/metal/gpu"
)

var _ engine.MoEOps = (*Backend)(nil)

// moeTable is the device pointer table of one projection (gate, up or down)
// over all experts of a block, built at first use and cached by block.
type moeTable struct {
	table  gpu.Buffer
	params []byte // WeightParams, shared by every expert
	rows   int
	bufs   []gpu.Buffer // every buffer the table points into, once (made resident)
}

type moeTables struct{ gate, up, down *moeTable }

func (b *Backend) expertTable(ws []*Weight) (*moeTable, error) {
	first := ws[0]
	t := &moeTable{params: first.params, rows: first.rows}
	var tab []byte
	for e, w := range ws {
		if !bytes.Equal(w.params, first.params) {
			return nil, fmt.Errorf("metal: moe expert %d stored as %v [%d, %d], expert 0 as %v [%d, %d]", e, w.format, w.rows, w.cols, first.format, first.rows, first.cols)
		}
		ptr := func(buf gpu.Buffer, off int) uint64 {
			if buf == nil {
				return b.dummy.GPUAddress()
			}
			if !slices.Contains(t.bufs, buf) { // stacked GGUF experts share a buffer
				t.bufs = append(t.bufs, buf)
			}
			return buf.GPUAddress() + uint64(off)
		}
		tab = binary.LittleEndian.AppendUint64(tab, ptr(w.data, w.off))
		tab = binary.LittleEndian.AppendUint64(tab, ptr(w.scales, w.soff))
		tab = binary.LittleEndian.AppendUint64(tab, ptr(w.biases, w.boff))
	}
	t.bufs = append(t.bufs, b.dummy)
	buf, err := b.dev.NewBuffer(len(tab))
	if err != nil {
		return nil, err
	}
	copy(buf.Bytes(), tab)
	t.table = buf
	return t, nil
}

func (b *Backend) tables(w *engine.MoEWeights) *moeTables {
	if t := b.moe[w]; t != nil {
		return t
	}
	var g, u, d []*Weight
	for _, ex := range w.Experts {
		g, u, d = append(g, ww(ex.Gate)), append(u, ww(ex.Up)), append(d, ww(ex.Down))
	}
	t := &moeTables{}
	var err error
	for _, x := range []struct {
		dst **moeTable
		ws  []*Weight
	}{{&t.gate, g}, {&t.up, u}, {&t.down, d}} {
		if *x.dst, err = b.expertTable(x.ws); err != nil {
			panic(err.Error())
		}
	}
	if b.moe == nil {
		b.moe = map[*engine.MoEWeights]*moeTables{}
	}
	b.moe[w] = t
	return t
}

func (b *Backend) gathered(y gpu.Buffer, x gpu.Buffer, t *moeTable, idx gpu.Buffer, R, N, Kd, K int, perRow bool) {
	b.dispatchUse(t.bufs, "moe_matmul", [3]int{ceil(N, 4), R, 1}, [3]int{128, 1, 1},
		buf(y), buf(x), buf(t.table), gpu.Arg{Bytes: t.params}, buf(idx), gpu.Arg{Bytes: pack(R, N, Kd, K, b2u(perRow))})
}

// MoE implements engine.MoEOps with no CPU round trip: router matmul,
// moe_route on the GPU, gathered gate/up matmuls over (token, slot) rows,
// SwiGLU, then gathered down and the weighted combine (+ shared expert)
// fused in moe_down_combine, or as separate dispatches without it.
// Every chosen (token, expert) pair costs one row; nothing is computed for
// experts a token did not choose.
func (b *Backend) MoE(dst, x engine.Tensor, w *engine.MoEWeights, p engine.MoEParams) {
	o, xt := tt(dst), tt(x)
	sameShape("moe", o, xt)
	T, H := xt.rows, xt.cols
	E := len(w.Experts)
	if E == 0 || E > 512 || ww(w.Router).rows != E || p.TopK < 1 || p.TopK > E || o == xt {
		panic(fmt.Sprintf("metal: moe with %d experts, router [%d, %d], top-k %d", E, ww(w.Router).rows, ww(w.Router).cols, p.TopK))
	}
	if T == 0 {
		return
	}
	tabs := b.tables(w)
	K := p.TopK
	R := T * K
	inter := tabs.gate.rows
	logits := b.NewTensor(T, E)
	b.MatMul(logits, x, w.Router, nil)
	// Reused by every MoE layer: the next layer's route runs after this
	// layer's combine (serial dispatch).
	idx, wts := b.scratchBuf(&b.moeIdx, 4*R), b.scratchBuf(&b.moeWts, 4*R)
	route := gpu.Arg{Bytes: pack(T, E, K, b2u(p.Normalize))}
	gt := b.NewTensor(R, inter)
	var ut engine.Tensor
	gateUp := b.pipes["moe_gate_up"] != nil && bytes.Equal(tabs.gate.params, tabs.up.params)
	downCombine := b.pipes["moe_down_combine"] != nil && inter%8 == 0 && H%8 == 0
	var sg engine.Tensor // the shared expert's gate/up, when fused here
	if gateUp && b.canFuse("moe_route_gate_up") && T <= maxFuseRows {
		// One dispatch for the route, gate, up and SwiGLU (same bits as
		// moe_route + moe_gate_up); every SIMD-group routes its token
		// again, so only at decode (a few tokens). The shared expert's
		// gate/up (matmul_gate_up) joins as T more grid rows.
		d := gpu.Arg{Buf: b.dummy}
		shared := []gpu.Arg{d, d, d, d, d, d, d, {Bytes: tabs.gate.params}, {Bytes: pack(0, 0)}}
		grid := [3]int{ceil(inter, 4), R, 1}
		if w.Shared != nil && downCombine {
			g, u := ww(w.Shared.Gate), ww(w.Shared.Up)
			if bytes.Equal(g.params, u.params) && g.cols == H && u.rows == g.rows && u.cols == H {
				sg = b.NewTensor(T, g.rows)
				shared = append(append([]gpu.Arg{buf(tt(sg).buf)}, b.weightArgs(g)[:3]...), b.weightArgs(u)...)
				shared = append(shared, gpu.Arg{Bytes: pack(g.rows, 1)})
				grid = [3]int{ceil(max(inter, g.rows), 4), R + T, 1}
			}
		}
		args := []gpu.Arg{buf(tt(gt).buf), buf(xt.buf), buf(tabs.gate.table), buf(tabs.up.table), gpu.Arg{Bytes: tabs.gate.params},
			buf(idx), gpu.Arg{Bytes: pack(R, inter, H, K, b2u(false))}, buf(wts), buf(tt(logits).buf), route}
		b.dispatchUse(append(append([]gpu.Buffer(nil), tabs.gate.bufs...), tabs.up.bufs...), "moe_route_gate_up", grid, [3]int{128, 1, 1},
			append(args, shared...)...)
	} else if gateUp {
		b.dispatch("moe_route", [3]int{T, 1, 1}, [3]int{32, 1, 1}, buf(idx), buf(wts), buf(tt(logits).buf), route)
		// One dispatch for gate, up and SwiGLU (same bits as the three).
		b.dispatchUse(append(append([]gpu.Buffer(nil), tabs.gate.bufs...), tabs.up.bufs...), "moe_gate_up", [3]int{ceil(inter, 4), R, 1}, [3]int{128, 1, 1},
			buf(tt(gt).buf), buf(xt.buf), buf(tabs.gate.table), buf(tabs.up.table), gpu.Arg{Bytes: tabs.gate.params},
			buf(idx), gpu.Arg{Bytes: pack(R, inter, H, K, b2u(false))})
	} else {
		b.dispatch("moe_route", [3]int{T, 1, 1}, [3]int{32, 1, 1}, buf(idx), buf(wts), buf(tt(logits).buf), route)
		ut = b.NewTensor(R, inter)
		b.gathered(tt(gt).buf, xt.buf, tabs.gate, idx, R, inter, H, K, false)
		b.gathered(tt(ut).buf, xt.buf, tabs.up, idx, R, inter, H, K, false)
		b.SwiGLU(gt, gt, ut)
	}
	var yt, sy, su engine.Tensor
	if downCombine {
		// One dispatch for the down projections, the shared gate and the
		// combine (same bits as the four separate dispatches below).
		d := gpu.Arg{Buf: b.dummy}
		shared := []gpu.Arg{d, d, d, d, {Bytes: tabs.down.params}, d, d, d, d, {Bytes: tabs.down.params}}
		si := 0
		if w.Shared != nil {
			si = ww(w.Shared.Gate).rows
			if sg == nil {
				sg = b.NewTensor(T, si)
				b.gateUp(sg, x, w.Shared.Gate, w.Shared.Up)
			}
			sd, gw := ww(w.Shared.Down), ww(w.SharedGate)
			if sd.rows != H || sd.cols != si || si%8 != 0 || gw.rows != 1 || gw.cols != H {
				panic(fmt.Sprintf("metal: moe shared down [%d, %d] and gate [%d, %d] for hidden %d, intermediate %d", sd.rows, sd.cols, gw.rows, gw.cols, H, si))
			}
			shared = append(append([]gpu.Arg{buf(tt(sg).buf)}, b.weightArgs(sd)...), buf(xt.buf))
			shared = append(shared, b.weightArgs(gw)...)
		}
		args := append([]gpu.Arg{buf(o.buf), buf(tt(gt).buf), buf(tabs.down.table), {Bytes: tabs.down.params}, buf(idx), buf(wts)}, shared...)
		grid, thr := [3]int{ceil(H, 4), T, 1}, [3]int{128, 1, 1}
		plain := append(args, gpu.Arg{Bytes: pack(T, H, K, inter, b2u(w.Shared != nil), si, 0)}, d, d, d)
		down := tabs.down.bufs
		emit := func() { b.dispatchUse(down, "moe_down_combine", grid, thr, plain...) }
		if b.noFuse {
			emit()
		} else {
			// Held: the residual add that follows becomes its epilogue.
			b.hold(&heldOp{kind: heldProduct, out: o, emit: emit, fuse: func(res, a, c *Tensor) bool {
				if res == xt {
					return false // other SIMD-groups still read x
				}
				checkFusedShapes("moe_down_combine", res, a, c)
				fused := append(args[:len(args):len(args)], gpu.Arg{Bytes: pack(T, H, K, inter, b2u(w.Shared != nil), si, 1)}, buf(res.buf), buf(a.buf), buf(c.buf))
				b.dispatchUse(down, "moe_down_combine", grid, thr, fused...)
				return true
			}})
		}
	} else {
		yt = b.NewTensor(R, H)
		b.gathered(tt(yt).buf, tt(gt).buf, tabs.down, idx, R, H, inter, K, true)
		ys, g := gpu.Arg{Buf: b.dummy}, gpu.Arg{Buf: b.dummy}
		if w.Shared != nil {
			si := ww(w.Shared.Gate).rows
			sg = b.NewTensor(T, si)
			b.gateUp(sg, x, w.Shared.Gate, w.Shared.Up)
			sy = b.NewTensor(T, H)
			b.MatMul(sy, sg, w.Shared.Down, nil)
			gate := b.NewTensor(T, 1)
			b.MatMul(gate, x, w.SharedGate, nil)
			ys, g = buf(tt(sy).buf), buf(tt(gate).buf)
			defer b.Release(gate)
		}
		b.dispatch("moe_combine", [3]int{ceil(T*H, 256), 1, 1}, [3]int{256, 1, 1},
			buf(o.buf), buf(tt(yt).buf), buf(wts), ys, g, gpu.Arg{Bytes: pack(T, H, K, b2u(w.Shared != nil))})
	}
	for _, t := range []engine.Tensor{logits, gt, ut, yt, sy, sg, su} {
		if t != nil {
			b.Release(t)
		}
	}
}
