package metal

import (
	"fmt"

	"github.com/macpool/macpool/metal/gpu"
)

// Fusion without changing the models: the backend holds back the one op
// that a following op may absorb (an RMSNorm whose output the next MatMul
// reads; a MatMul or the MoE's down+combine whose output the next Add
// adds to the residual stream) and encodes both as one dispatch when the
// next op fits, else encodes the held op unchanged before anything else
// (every dispatch, commit, Use and sync flushes it first). The fused
// kernels (kernels/fused.metal, moe_down_combine's epilogue) compute the
// same expressions in the same order, so the bits are those of the
// separate dispatches (TestFusionBits); Config.NoFusion turns it off.
//
// The decode step of a layer then takes, instead of norm, matmul, …,
// matmul, add: norm+matmul, …, matmul+add (one dispatch per norm and per
// residual add fewer).

type heldKind int

const (
	heldNorm    heldKind = iota + 1 // rmsnorm(dst ← x): whole rows, dst ≠ x; or per head in place (heads)
	heldProduct                     // matmul or moe_down_combine writing out
	heldAttn                        // attention of one sequence writing all rows of out
	heldRope                        // rmsnorm_rope of out (a key) in place
)

// heldOp is an op encoded later: emit encodes it as it stands; the fields
// describe what a following op may fuse with.
type heldOp struct {
	kind heldKind
	// heldNorm: the norm's output, input, weight and packed NormParams.
	normDst, normX *Tensor
	normW          *Weight
	normParams     []byte
	normDim        int
	normEps        float32
	normOffset     float32
	// heldProduct: the product's output; fuse re-encodes it with the
	// residual add res = a + b as its epilogue.
	out  *Tensor
	fuse func(res, a, b *Tensor) bool // false: it cannot (then emit)
	// heldAttn: gate encodes it with out *= sigmoid(g) as its epilogue.
	gate func(g *Tensor)
	// heldRope: store encodes it with StoreKV of out (all its rows, v's
	// too, at cache position at of rows of dim values) as its epilogue.
	store func(kc, vc gpu.Buffer, v *Tensor, at, dim int)
	emit  func()
	// A group of matmuls of one x (MatMul): mm, and the norm that
	// produced x if it is fused in (then x is its output, h).
	x    *Tensor
	norm *heldOp
	mm   []mmEntry
}

// mmEntry is one held MatMul: its output, weight and matmul arguments
// (dst, x, W, S, B, WeightParams, bias, MatMulParams).
type mmEntry struct {
	d       *Tensor
	w       *Weight
	args    []gpu.Arg
	hasBias int
	// split: a Deinterleave of d (into a, b in chunks of chunk) that
	// follows; matmul_multi writes a and b as it stores d.
	split *splitOut
}

type splitOut struct {
	a, b  *Tensor
	chunk int
}

// joins says whether a product into d may join the group: d is not read
// by it (x, the norm's input) and not written by it already.
func (h *heldOp) joins(d *Tensor) bool {
	if d == h.x || h.norm != nil && d == h.norm.normX {
		return false
	}
	for _, e := range h.mm {
		if e.d == d || e.split != nil && (e.split.a == d || e.split.b == d) {
			return false
		}
	}
	return true
}

// holdGroup holds a group of matmuls of one x; emitted as matmul,
// rmsnorm_matmul or matmul_multi, and as matmul_add when it is one plain
// matmul followed by a residual add of its output.
func (b *Backend) holdGroup(h *heldOp) {
	h.emit = func() { b.emitGroup(h) }
	if h.norm == nil && len(h.mm) == 1 {
		h.out = h.mm[0].d
	}
	h.fuse = func(res, a, c *Tensor) bool {
		if h.norm != nil || len(h.mm) != 1 || res == h.x || h.mm[0].split != nil {
			return false // other SIMD-groups still read x
		}
		checkFusedShapes("matmul_add", res, a, c)
		e := h.mm[0]
		b.dispatch("matmul_add", matmulGrid(e), [3]int{128, 1, 1}, append(e.args[:8:8], buf(res.buf), buf(a.buf), buf(c.buf))...)
		return true
	}
	if !b.canFuse("matmul_add") && !b.canFuse("matmul_multi") && h.norm == nil {
		h.emit()
		return
	}
	b.hold(h)
}

func matmulGrid(e mmEntry) [3]int {
	return [3]int{ceil(e.w.rows, 4), ceil(e.d.rows, 8), 1} // MM_SG, MM_MB
}

// emitGroup encodes a held group of matmuls.
func (b *Backend) emitGroup(h *heldOp) {
	threads := [3]int{128, 1, 1}
	normArgs := func(n *heldOp) []gpu.Arg {
		return []gpu.Arg{buf(n.normDst.buf), {Buf: n.normW.data, Off: n.normW.off}, {Bytes: n.normParams}}
	}
	if len(h.mm) == 1 && h.mm[0].split != nil && (h.norm != nil || h.x.rows > maxFuseRows) {
		// Alone: encoded as it would have been, then the deinterleave.
		sp := h.mm[0].split
		h.mm[0].split = nil
		b.emitGroup(h)
		b.deinterleave(sp.a, sp.b, h.mm[0].d, sp.chunk)
		return
	}
	if len(h.mm) == 1 && h.mm[0].split == nil {
		e := h.mm[0]
		if h.norm == nil {
			b.dispatch("matmul", matmulGrid(e), threads, e.args...)
			return
		}
		fa := append(e.args[:8:8], normArgs(h.norm)...)
		fa[1] = buf(h.norm.normX.buf) // the kernel normalises the norm's input
		b.dispatch("rmsnorm_matmul", matmulGrid(e), threads, fa...)
		return
	}
	d := gpu.Arg{Buf: b.dummy}
	args := make([]gpu.Arg, 31)
	N, rows := 0, 0
	params := []any{h.x.rows, h.x.cols, len(h.mm), 0}
	var ns, bs [4]int
	for j := range 4 {
		args[j], args[5+3*j], args[6+3*j], args[7+3*j] = d, d, d, d
		args[17+j], args[21+j] = h.mm[0].args[5], d
		if j < len(h.mm) {
			e := h.mm[j]
			args[j] = e.args[0]
			args[5+3*j], args[6+3*j], args[7+3*j] = e.args[2], e.args[3], e.args[4]
			args[17+j], args[21+j] = e.args[5], e.args[6]
			ns[j], bs[j] = e.w.rows, e.hasBias
			N += e.w.rows
		}
	}
	args[4] = buf(h.x.buf)
	args[26], args[27], args[28] = d, d, gpu.Arg{Bytes: pack(0, 0, 0, float32(0), float32(0))}
	args[29], args[30] = d, d
	split := 0
	if sp := h.mm[0].split; sp != nil {
		args[29], args[30], split = buf(sp.a.buf), buf(sp.b.buf), sp.chunk
	}
	if h.norm != nil {
		params[3] = 1
		args[4] = buf(h.norm.normX.buf)
		copy(args[26:], normArgs(h.norm))
	}
	for _, v := range ns {
		params = append(params, v)
	}
	for _, v := range bs {
		params = append(params, v)
	}
	params = append(params, split)
	args[25] = gpu.Arg{Bytes: pack(params...)}
	rows = h.x.rows
	b.dispatch("matmul_multi", [3]int{ceil(N, 4), ceil(rows, 8), 1}, threads, args...)
}

// maxFuseRows bounds the rows of a fused norm+matmul: every SIMD-group
// recomputes the norm of its rows, which is free at decode (a few rows)
// and not at prefill.
const maxFuseRows = 8

// hold flushes the op held so far and holds h.
func (b *Backend) hold(h *heldOp) {
	b.flush()
	b.held = h
}

// holdHead holds an in-place per-head norm (QK-norm) for rmsnorm_rope:
// the query's and the key's norms come before both ropes, so up to two
// are held (of distinct tensors; they are independent, and a rope fusing
// one leaves the other held).
func (b *Backend) holdHead(h *heldOp) {
	if b.held != nil || len(b.heads) >= 2 || len(b.heads) == 1 && b.heads[0].normDst == h.normDst {
		b.flush()
	}
	b.heads = append(b.heads, h)
}

// flush encodes the held ops, if any, in the order they were held.
func (b *Backend) flush() {
	if h := b.held; h != nil {
		b.held = nil
		h.emit()
	}
	for len(b.heads) > 0 {
		h := b.heads[0]
		b.heads = b.heads[1:]
		h.emit()
	}
	b.heads = nil
}

// takeHead removes and returns the held per-head norm of x over chunks of
// dim values, or nil.
func (b *Backend) takeHead(x *Tensor, dim int) *heldOp {
	for i, h := range b.heads {
		if h.normDst == x && h.normDim == dim {
			b.heads = append(b.heads[:i:i], b.heads[i+1:]...)
			return h
		}
	}
	return nil
}

// canFuse says whether fusion is on and the kernel exists.
func (b *Backend) canFuse(kernel string) bool { return !b.noFuse && b.pipes[kernel] != nil }

// fusedAdd encodes Add(dst, a, c) as the epilogue of the held product that
// writes a or c; false if there is none (then the caller dispatches add).
func (b *Backend) fusedAdd(dst, a, c *Tensor) bool {
	h := b.held
	if h == nil || h.kind != heldProduct || (h.out != a && h.out != c) || h.out == dst {
		return false
	}
	b.held = nil
	if h.fuse(dst, a, c) {
		return true
	}
	h.emit()
	return false
}

// dispatchUse encodes one dispatch whose kernel reaches bufs through a
// pointer table: they are declared resident (useResources) in the command
// buffer the dispatch goes into.
func (b *Backend) dispatchUse(bufs []gpu.Buffer, name string, groups, threads [3]int, args ...gpu.Arg) {
	b.flush()
	if b.cb == nil {
		b.cb = b.dev.NewCommandBuffer()
	}
	b.cb.Use(bufs...)
	b.dispatch(name, groups, threads, args...)
}

func checkFusedShapes(op string, res, a, c *Tensor) {
	if res.rows != a.rows || res.cols != a.cols || c.rows != a.rows || c.cols != a.cols {
		panic(fmt.Sprintf("metal: %s: add of [%d, %d] and [%d, %d] into [%d, %d]", op, a.rows, a.cols, c.rows, c.cols, res.rows, res.cols))
	}
}

// fusedGate encodes SigmoidMul(dst, x, g) as the epilogue of the held
// attention that writes dst = x; false if there is none.
func (b *Backend) fusedGate(dst, x, g *Tensor) bool {
	h := b.held
	if h == nil || h.kind != heldAttn || h.out != dst || dst != x || g == dst {
		return false
	}
	sameShape("sigmoid_mul", dst, x, g)
	b.held = nil
	h.gate(g)
	return true
}
