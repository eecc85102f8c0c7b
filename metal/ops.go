package metal

import (
	"bytes"
	"fmt"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/metal/gpu"
)

func sameShape(op string, ts ...*Tensor) {
	for _, t := range ts[1:] {
		if t.rows != ts[0].rows || t.cols != ts[0].cols {
			panic(fmt.Sprintf("metal: %s: shape [%d, %d] vs [%d, %d]", op, t.rows, t.cols, ts[0].rows, ts[0].cols))
		}
	}
}

// Embed implements engine.Backend.
func (b *Backend) Embed(dst engine.Tensor, table engine.Weight, ids []int) {
	d, w := tt(dst), ww(table)
	if d.rows != len(ids) || d.cols != w.cols {
		panic(fmt.Sprintf("metal: embed %d ids of width %d into [%d, %d]", len(ids), w.cols, d.rows, d.cols))
	}
	for _, id := range ids {
		if id < 0 && len(ids) > 0 { // device token ids (engine.DecodeGreedy)
			b.embedRef(d, w, ids)
			return
		}
		if id >= w.rows {
			panic(fmt.Sprintf("metal: embed id %d out of range [0,%d)", id, w.rows))
		}
	}
	if len(ids) == 0 {
		return
	}
	if w.cols%8 != 0 {
		panic(fmt.Sprintf("metal: embed rows of %d values (need a multiple of 8)", w.cols))
	}
	args := append([]gpu.Arg{buf(d.buf)}, b.weightArgs(w)...)
	args = append(args, b.hostArg(ints32(ids)), gpu.Arg{Bytes: pack(len(ids), w.cols)})
	b.dispatch("embed", [3]int{ceil(w.cols/8, 64), len(ids), 1}, [3]int{64, 1, 1}, args...)
}

// MatMul implements engine.Backend.
func (b *Backend) MatMul(dst, x engine.Tensor, w engine.Weight, bias engine.Weight) {
	d, s, wt := tt(dst), tt(x), ww(w)
	if s.cols != wt.cols || d.rows != s.rows || d.cols != wt.rows {
		panic(fmt.Sprintf("metal: matmul [%d, %d]·[%d, %d]ᵀ into [%d, %d]", s.rows, s.cols, wt.rows, wt.cols, d.rows, d.cols))
	}
	if d == s {
		panic("metal: matmul dst aliases x")
	}
	if wt.cols%8 != 0 {
		panic(fmt.Sprintf("metal: matmul over rows of %d values (need a multiple of 8)", wt.cols))
	}
	biasArg, hasBias := gpu.Arg{Buf: b.dummy}, 0
	if bias != nil {
		bw := ww(bias)
		if bw.rows*bw.cols != wt.rows || bw.fmt != fmtF32 {
			panic(fmt.Sprintf("metal: matmul bias [%d, %d] for %d outputs", bw.rows, bw.cols, wt.rows))
		}
		biasArg, hasBias = gpu.Arg{Buf: bw.data, Off: bw.off}, 1
	}
	if s.rows == 0 {
		return
	}
	args := append([]gpu.Arg{buf(d.buf), buf(s.buf)}, b.weightArgs(wt)...)
	args = append(args, biasArg, gpu.Arg{Bytes: pack(s.rows, wt.rows, wt.cols, hasBias)})
	e := mmEntry{d: d, w: wt, args: args, hasBias: hasBias}
	if h := b.held; h != nil && h.kind == heldNorm && h.normDst == s && h.normX != d && s.rows <= maxFuseRows && b.canFuse("rmsnorm_matmul") {
		// The norm that produced x, and this product (and the next ones of x).
		b.held = nil
		b.holdGroup(&heldOp{kind: heldProduct, x: s, norm: h, mm: []mmEntry{e}})
		return
	}
	if h := b.held; h != nil && h.kind == heldProduct && h.x == s && len(h.mm) < 4 && s.rows <= maxFuseRows && b.canFuse("matmul_multi") && h.joins(d) {
		h.mm = append(h.mm, e) // another product of the same x
		h.out = nil
		return
	}
	b.holdGroup(&heldOp{kind: heldProduct, x: s, mm: []mmEntry{e}})
}

// gateUp sets dst = silu(x·gateᵀ) * (x·upᵀ) in one dispatch when the two
// matrices are stored alike (the bits of two MatMuls and a SwiGLU), else
// through those three.
func (b *Backend) gateUp(dst, x engine.Tensor, gate, up engine.Weight) {
	d, s, g, u := tt(dst), tt(x), ww(gate), ww(up)
	if b.pipes["matmul_gate_up"] == nil || !bytes.Equal(g.params, u.params) || g.cols%8 != 0 ||
		s.cols != g.cols || d.rows != s.rows || d.cols != g.rows || d == s {
		ut := b.NewTensor(d.rows, d.cols)
		b.MatMul(dst, x, gate, nil)
		b.MatMul(ut, x, up, nil)
		b.SwiGLU(dst, dst, ut)
		b.Release(ut)
		return
	}
	if s.rows == 0 {
		return
	}
	args := append([]gpu.Arg{buf(d.buf), buf(s.buf)}, b.weightArgs(g)[:3]...)
	args = append(args, b.weightArgs(u)...)
	args = append(args, gpu.Arg{Bytes: pack(s.rows, g.rows, g.cols, 0)})
	const sg, mb = 4, 8 // MM_SG, MM_MB in dense.metal
	b.dispatch("matmul_gate_up", [3]int{ceil(g.rows, sg), ceil(s.rows, mb), 1}, [3]int{32 * sg, 1, 1}, args...)
}

// RMSNorm implements engine.Backend.
func (b *Backend) RMSNorm(dst, x engine.Tensor, w engine.Weight, p engine.NormParams) {
	d, s, wt := tt(dst), tt(x), ww(w)
	sameShape("rmsnorm", d, s)
	if p.Dim <= 0 || s.cols%p.Dim != 0 || wt.rows*wt.cols != p.Dim || wt.fmt != fmtF32 {
		panic(fmt.Sprintf("metal: rmsnorm dim %d over %d columns with weight [%d, %d]", p.Dim, s.cols, wt.rows, wt.cols))
	}
	if s.rows == 0 {
		return
	}
	params := pack(s.rows, s.cols, p.Dim, p.Eps, p.Offset)
	emit := func() {
		b.dispatch("rmsnorm", [3]int{s.cols / p.Dim, s.rows, 1}, [3]int{32, 1, 1},
			buf(d.buf), buf(s.buf), gpu.Arg{Buf: wt.data, Off: wt.off}, gpu.Arg{Bytes: params})
	}
	if d == s && b.canFuse("rmsnorm_rope") {
		// Held: an in-place norm (QK-norm; with one KV head the key's norm
		// spans the row); the Rope of its tensor may follow (rmsnorm_rope).
		b.holdHead(&heldOp{kind: heldNorm, normDst: d, normX: s, normW: wt, normParams: params, normDim: p.Dim, normEps: p.Eps, normOffset: p.Offset, emit: emit})
		return
	}
	if p.Dim != s.cols || d == s || s.rows > maxFuseRows || !b.canFuse("rmsnorm_matmul") {
		emit()
		return
	}
	// Held: the next MatMul of d may normalise as it multiplies.
	b.hold(&heldOp{kind: heldNorm, normDst: d, normX: s, normW: wt, normParams: params, emit: emit})
}

// Rope implements engine.Backend. The inverse frequencies (rope scaling
// applied) and the attention factor come from p.Tables, computed on the
// host in float32 as HF does; the kernel forms the float32 angle, takes an
// accurate cos/sin and scales both by the attention factor.
func (b *Backend) Rope(x engine.Tensor, pos []int, p engine.RopeParams) {
	t := tt(x)
	if len(pos) != t.rows || p.Heads*p.HeadDim != t.cols || p.RotaryDim <= 0 || p.RotaryDim > p.HeadDim || p.RotaryDim%2 != 0 {
		panic(fmt.Sprintf("metal: rope %d heads × %d (rotary %d) over [%d, %d] with %d positions", p.Heads, p.HeadDim, p.RotaryDim, t.rows, t.cols, len(pos)))
	}
	half := p.RotaryDim / 2
	invFreq, af := p.Tables()
	inv := make([]byte, 0, 4*half)
	for _, f := range invFreq {
		inv = append(inv, pack(f)...)
	}
	n := t.rows * p.Heads * half
	if n == 0 {
		return
	}
	if h := b.takeHead(t, p.HeadDim); h != nil {
		// The QK-norm held for this tensor, and the rotation, in one dispatch.
		args := []gpu.Arg{buf(t.buf), {Buf: h.normW.data, Off: h.normW.off}, b.hostArg(ints32(pos)), b.hostArg(inv),
			{Bytes: pack(t.rows, p.Heads, p.HeadDim, half, af, h.normEps, h.normOffset)}}
		grid := [3]int{p.Heads, t.rows, 1}
		emit := func() { b.encode("rmsnorm_rope", grid, [3]int{32, 1, 1}, args...) }
		if o := b.held; o != nil && o.kind == heldRope {
			b.held = nil
			o.emit() // the query's: only the key's is followed by its StoreKV
		}
		if b.held != nil || !b.canFuse("rmsnorm_rope_kv") {
			emit()
			return
		}
		// Held (beside the other head's norm, if any): the StoreKV of this
		// tensor (the key) may follow (rmsnorm_rope_kv).
		b.held = &heldOp{kind: heldRope, out: t, emit: emit, store: func(kc, vc gpu.Buffer, v *Tensor, at, dim int) {
			b.encode("rmsnorm_rope_kv", grid, [3]int{32, 1, 1}, append(args[:5:5], buf(kc), buf(vc), buf(v.buf), gpu.Arg{Bytes: pack(at, dim)})...)
		}}
		return
	}
	b.dispatch("rope", [3]int{ceil(n, 256), 1, 1}, [3]int{256, 1, 1},
		buf(t.buf), b.hostArg(ints32(pos)), b.hostArg(inv), gpu.Arg{Bytes: pack(t.rows, p.Heads, p.HeadDim, half, af)})
}

func (b *Backend) elementwise(name string, d, x, y *Tensor) {
	sameShape(name, d, x, y)
	n := d.rows * d.cols
	if n == 0 {
		return
	}
	b.dispatch(name, [3]int{ceil(n, 256), 1, 1}, [3]int{256, 1, 1}, buf(d.buf), buf(x.buf), buf(y.buf), gpu.Arg{Bytes: pack(n)})
}

// SwiGLU implements engine.Backend.
func (b *Backend) SwiGLU(dst, gate, up engine.Tensor) {
	b.elementwise("swiglu", tt(dst), tt(gate), tt(up))
}

// SigmoidMul implements engine.Backend.
// An output gate of the attention just encoded is its epilogue
// (metal/fuse.go).
func (b *Backend) SigmoidMul(dst, x, gate engine.Tensor) {
	if b.fusedGate(tt(dst), tt(x), tt(gate)) {
		return
	}
	b.elementwise("sigmoid_mul", tt(dst), tt(x), tt(gate))
}

// Add implements engine.Backend.
// A residual add of the product just encoded is that product's epilogue
// (metal/fuse.go).
func (b *Backend) Add(dst, a, c engine.Tensor) {
	d, x, y := tt(dst), tt(a), tt(c)
	sameShape("add", d, x, y)
	if b.fusedAdd(d, x, y) {
		return
	}
	b.elementwise("add", d, x, y)
}

func (b *Backend) copy2d(dst gpu.Buffer, dstStride, dstRow, dstCol int, src gpu.Buffer, srcStride, srcRow, srcCol, rows, cols int) {
	if rows == 0 || cols == 0 {
		return
	}
	b.dispatch("copy2d", [3]int{ceil(cols, 256), rows, 1}, [3]int{256, 1, 1}, buf(dst), buf(src),
		gpu.Arg{Bytes: pack(rows, cols, dstStride, dstRow, dstCol, srcStride, srcRow, srcCol)})
}

// Copy implements engine.Backend.
func (b *Backend) Copy(dst engine.Tensor, dstRow, dstCol int, src engine.Tensor, srcRow, srcCol, rows, cols int) {
	d, s := tt(dst), tt(src)
	if d == s || rows < 0 || cols < 0 || dstRow < 0 || dstCol < 0 || srcRow < 0 || srcCol < 0 ||
		dstRow+rows > d.rows || dstCol+cols > d.cols || srcRow+rows > s.rows || srcCol+cols > s.cols {
		panic(fmt.Sprintf("metal: copy [%d+%d, %d+%d] of [%d, %d] to (%d, %d) of [%d, %d]",
			srcRow, rows, srcCol, cols, s.rows, s.cols, dstRow, dstCol, d.rows, d.cols))
	}
	b.copy2d(d.buf, d.cols, dstRow, dstCol, s.buf, s.cols, srcRow, srcCol, rows, cols)
}

// Deinterleave implements engine.Backend: one dispatch for what would be
// 2n copy2d dispatches (one per head and half).
func (b *Backend) Deinterleave(a, c, src engine.Tensor, chunk int) {
	da, db, s := tt(a), tt(c), tt(src)
	if chunk <= 0 || da.rows != s.rows || db.rows != s.rows || da.cols != db.cols || da.cols%chunk != 0 || s.cols != 2*da.cols || da == s || db == s || da == db {
		panic(fmt.Sprintf("metal: deinterleave [%d, %d] in chunks of %d into [%d, %d] and [%d, %d]", s.rows, s.cols, chunk, da.rows, da.cols, db.rows, db.cols))
	}
	if s.rows == 0 || da.cols == 0 {
		return
	}
	if h := b.held; h != nil && h.kind == heldProduct && len(h.mm) == 1 && h.mm[0].d == s && h.mm[0].split == nil &&
		s.rows <= maxFuseRows && b.canFuse("matmul_multi") && da != h.x && db != h.x && (h.norm == nil || da != h.norm.normX && db != h.norm.normX) {
		// The product that writes src stores a and b too (matmul_multi),
		// and the next products of its x may still join.
		h.mm[0].split = &splitOut{a: da, b: db, chunk: chunk}
		h.out = nil
		return
	}
	b.deinterleave(da, db, s, chunk)
}

func (b *Backend) deinterleave(da, db, s *Tensor, chunk int) {
	b.dispatch("deinterleave", [3]int{ceil(da.cols, 256), s.rows, 1}, [3]int{256, 1, 1}, buf(da.buf), buf(db.buf), buf(s.buf),
		gpu.Arg{Bytes: pack(s.rows, da.cols, chunk)})
}

// Gather implements engine.Backend.
func (b *Backend) Gather(dst, src engine.Tensor, rows []int) {
	d, s := tt(dst), tt(src)
	if d == s || d.rows != len(rows) || d.cols != s.cols {
		panic(fmt.Sprintf("metal: gather %d rows of [%d, %d] into [%d, %d]", len(rows), s.rows, s.cols, d.rows, d.cols))
	}
	for _, r := range rows {
		if r < 0 || r >= s.rows {
			panic(fmt.Sprintf("metal: gather row %d of %d", r, s.rows))
		}
	}
	if len(rows) == 0 || d.cols == 0 {
		return
	}
	b.dispatch("gather", [3]int{ceil(d.cols, 256), len(rows), 1}, [3]int{256, 1, 1},
		buf(d.buf), buf(s.buf), b.hostArg(ints32(rows)), gpu.Arg{Bytes: pack(len(rows), d.cols)})
}

// gpu32 is one uint32 as an inline argument.
func gpu32(v int) gpu.Arg { return gpu.Arg{Bytes: pack(v)} }
