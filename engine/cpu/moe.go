package cpu

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
	"github.com/macpool/macpool/engine/moe"
	"github.com/macpool/macpool/engine/tensor"
)

// The MoE block on the CPU. With quantized expert weights (the default
// path) one MoE call is a handful of parallel jobs whatever the number of
// experts:
//
//  1. the batch is quantized once for the router, every expert and the
//     shared expert (each token goes to TopK experts: quantizing each
//     expert's gathered rows again did the same work TopK times);
//  2. the router's logits, then every token routed (a job over tokens);
//  3. the (token, slot) pairs counting-sorted by expert: each expert's rows
//     are one contiguous range of the buffers, tokens in increasing order;
//  4. one job of units claimed one at a time by the workers: per expert
//     the gather of its tokens' quantized rows, blocks of its gate and up
//     rows (SwiGLU on each block as it is stored; the unit finishing an
//     expert's last block quantizes its activations), blocks of its down
//     rows. A unit waits (spinning) for the units it depends on, which were
//     all claimed before it, so no barrier separates the steps of one
//     expert from another's. Blocks are sized by cost: a prefill runs each
//     expert whole on one worker (hundreds of experts balance by
//     themselves) as one unit on that worker's buffers (gathered rows,
//     gate/up outputs, activations: they stay in its L2), a decode step
//     splits its few experts into blocks so both workers stream weights.
//  5. the weighted sums per token (a job over tokens), each token's experts
//     in increasing expert order and then the gated shared expert, as
//     transformers adds them (kernels.WeightedRows: the sum stays in
//     registers over all of a token's rows).
//
// Every value is computed by the kernels and element-wise functions the
// one-expert-at-a-time loop used, on the same rows: the bits do not change
// (TestMoEBitIdentical compares with that loop, moeFloat on gathered
// float rows).

// moeSharedInput enables the quantized path above (a variable for the test
// that compares it with gathering float rows one expert at a time).
var moeSharedInput = true

// MoE implements engine.MoEOps: route every token, run each chosen expert
// once over all its tokens and add the weighted outputs; then the gated
// shared expert.
func (b *Backend) MoE(dst, x engine.Tensor, w *engine.MoEWeights, p engine.MoEParams) {
	o, xt := tt(dst), tt(x)
	sameShape("moe", o, xt)
	T := xt.rows
	E := len(w.Experts)
	if E == 0 || ww(w.Router).rows != E || p.TopK < 1 || p.TopK > E {
		panic(fmt.Sprintf("cpu: moe with %d experts, router [%d, %d], top-k %d", E, ww(w.Router).rows, ww(w.Router).cols, p.TopK))
	}
	qx := b.moeInput(xt, w)
	if qx != nil {
		defer inputs.Put(qx)
	}
	run := getMoERun()
	defer putMoERun(run)

	logits := b.NewTensor(T, E)
	if rw := ww(w.Router); qx != nil && !b.preciseHybrid && rw.k != nil && rw.k.Quantized() {
		// What MatMulPrecise does without PreciseHybrid, on the batch
		// already quantized.
		b.matmulInputs(qx, []*Tensor{tt(logits)}, []*Weight{rw})
	} else {
		b.MatMulPrecise(logits, x, w.Router) // PreciseHybrid: int8 rounding flips expert choices
	}
	run.route(b, tt(logits).data, T, E, p)
	b.Release(logits)

	if qx == nil {
		b.moeFloat(o, x, w, run.r)
		return
	}
	b.moeQuantized(run, o, xt, qx, w)
}

// moeInput quantizes x for the experts' gate and up projections, or
// returns nil when they do not all run quantized kernels on the same
// activations (float or exact weights: the float path).
func (b *Backend) moeInput(x *Tensor, w *engine.MoEWeights) *kernels.Input {
	if !moeSharedInput || b.exact || x.cols%kernels.QK != 0 {
		return nil
	}
	for _, ex := range w.Experts {
		if !quantizedExpert(ex) {
			return nil
		}
	}
	in := inputs.Get().(*kernels.Input)
	in.Reset(x.data, x.rows, x.cols)
	b.parallel(x.rows, max(1, 8192/x.cols), func(lo, hi, _ int) { in.QuantizeRows(lo, hi) })
	return in
}

// quantizedExpert: gate and up read quantized activations and down has a
// kernel (quantized or float), so the expert runs on kernels.Matrix.MatMul
// alone.
func quantizedExpert(e engine.Expert) bool {
	for _, m := range []engine.Weight{e.Gate, e.Up} {
		if k := ww(m).k; k == nil || !k.Quantized() {
			return false
		}
	}
	return ww(e.Down).k != nil && ww(e.Gate).rows == ww(e.Up).rows
}

// moeRun holds one MoE call's routing and buffers, reused from call to
// call: a 512-token prefill of a 256-expert model would otherwise allocate
// its ~40 MB of expert outputs every layer, and fresh pages cost a
// page fault and the kernel's zeroing on first touch. They are kept in a
// free list rather than a sync.Pool, which drops them at every GC (a
// decode step's logits make GCs frequent); the list holds one run per MoE
// call that ever ran concurrently.
type moeRun struct {
	r      moe.Routing
	start  []int // start[e]: expert e's first position in the expert-sorted order; start[E] = T*K
	order  []int // sorted position → token*K + slot (experts ascending, tokens ascending within one)
	tokens []int // sorted position → token
	pos    []int // token*K + slot → sorted position

	groups []moeGroup
	units  []moeUnit
	ins    []*kernels.Input // the groups' gathered rows and activations, reused
	qx     [1]*kernels.Input
	wk     []moeWorker  // per worker: the buffers of the experts it runs whole
	g, u   []float32    // every group's gate and up outputs, [rows, inter] each
	y      []float32    // every group's down outputs, [rows, H] each
	next   atomic.Int64 // next unit to claim
}

var moeRuns struct {
	sync.Mutex
	free []*moeRun
}

func getMoERun() *moeRun {
	moeRuns.Lock()
	defer moeRuns.Unlock()
	if n := len(moeRuns.free); n > 0 {
		r := moeRuns.free[n-1]
		moeRuns.free = moeRuns.free[:n-1]
		return r
	}
	return new(moeRun)
}

func putMoERun(r *moeRun) {
	moeRuns.Lock()
	defer moeRuns.Unlock()
	moeRuns.free = append(moeRuns.free, r)
}

// moeWorker is one worker's buffers for the experts it runs in one unit
// (gathered rows, gate and up outputs, activations): reused expert after
// expert, they stay in its L2.
type moeWorker struct {
	buf     []float32
	in, act []*kernels.Input
}

// inputs returns the worker's first n Inputs for gathered rows and for
// activations.
func (w *moeWorker) inputs(n int) (in, act []*kernels.Input) {
	for len(w.in) < n {
		w.in, w.act = append(w.in, new(kernels.Input)), append(w.act, new(kernels.Input))
	}
	return w.in[:n], w.act[:n]
}

// moeGroup is one expert of the call (a routed expert with its tokens, or
// the shared expert over the whole batch).
type moeGroup struct {
	gate, up, down *Weight
	rows, inter    int
	tokens         []int // routed: the rows of the batch it takes (nil: shared, every row)
	// in, act: its rows of the quantized batch and its activations (down's
	// input), in parts of split rows (moeSplit; one part for the shared
	// expert, which is the batch itself).
	in, act []*kernels.Input
	split   int
	g, u, y []float32
	// fused: the whole expert is one unit (phase 3) on worker buffers.
	fused bool
	// state: 0 rows not gathered yet, 1 gathered (gate/up may run), 2
	// activations ready (down may run). left counts gate/up blocks to go.
	state, left atomic.Int32
}

// parts is the number of parts the group's rows go to the kernels in.
func (gr *moeGroup) parts() int { return (gr.rows + gr.split - 1) / gr.split }

// addGroup appends the group of expert ex over rows of the batch (tokens;
// nil: all of them). Fields are set in place: a group holds atomics.
func (r *moeRun) addGroup(ex engine.Expert, rows int, tokens []int) {
	if len(r.groups) < cap(r.groups) {
		r.groups = r.groups[:len(r.groups)+1]
	} else {
		r.groups = append(r.groups[:cap(r.groups)], make([]moeGroup, cap(r.groups)+1)...)[:len(r.groups)+1]
	}
	gr := &r.groups[len(r.groups)-1]
	gr.gate, gr.up, gr.down = ww(ex.Gate), ww(ex.Up), ww(ex.Down)
	gr.rows, gr.inter, gr.tokens = rows, ww(ex.Gate).rows, tokens
}

// moeUnit is one piece of the expert job: the gather of a group's rows
// (phase 0), weight rows [n0, n1) of its gate and up (phase 1) or of its
// down (phase 2), or the whole expert (phase 3: gather, gate/up and down
// on one worker's buffers).
type moeUnit struct {
	group, phase, n0, n1 int
}

func growInts(buf []int, n int) []int {
	if cap(buf) < n {
		return make([]int, n)
	}
	return buf[:n]
}

func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

// reserveRows allocates a buffer of max(n, reserve) floats and touches
// its pages: the expert outputs of the first call of several tokens take
// room for a whole prefill chunk at once (with the shared expert's rows,
// at most K+1 per token), so the first long prompt does not pay ~40 MB of
// page faults in the middle of its MoE block (17-20 ms of CPU measured
// for a 512-token qwen3-30b-a3b block, ~15% of it), as a prefill after a
// short warm-up did. Runs that only ever decode stay small.
func reserveRows(n, reserve int) []float32 {
	buf := make([]float32, max(n, reserve))
	clear(buf) // fresh pages are mapped on first write: write them now
	return buf[:n]
}

// route fills r.r with every token's experts and weights (moe.RouteInto,
// in parallel over tokens) and sorts the (token, slot) pairs by expert.
func (r *moeRun) route(b *Backend, logits []float32, T, E int, p engine.MoEParams) {
	K := p.TopK
	r.r.K = K
	r.r.Experts, r.r.Weights = growInts(r.r.Experts, T*K), grow(r.r.Weights, T*K)
	b.parallel(T, max(1, 8192/(E*K)), func(lo, hi, w int) {
		sc := b.scratchBuf(w, E)
		for t := lo; t < hi; t++ {
			moe.RouteInto(logits[t*E:(t+1)*E], K, p.Normalize, r.r.Experts[t*K:(t+1)*K], r.r.Weights[t*K:(t+1)*K], sc)
		}
	})
	// Counting sort: the positions of expert e are start[e]..start[e+1]-1,
	// in token order (moe.Routing.ByExpert's order).
	r.start = growInts(r.start, E+1)
	clear(r.start)
	for _, e := range r.r.Experts {
		r.start[e+1]++
	}
	for e := 0; e < E; e++ {
		r.start[e+1] += r.start[e]
	}
	n := T * K
	r.order, r.tokens, r.pos = growInts(r.order, n), growInts(r.tokens, n), growInts(r.pos, n)
	fill := r.start[:E] // advanced below, restored after
	for i, e := range r.r.Experts {
		q := fill[e]
		fill[e]++
		r.order[q], r.tokens[q], r.pos[i] = i, i/K, q
	}
	for e := E; e > 0; e-- { // fill[e-1] now equals the old start[e]
		r.start[e] = r.start[e-1]
	}
	r.start[0] = 0
}

// moeSplit, when > 0, gives a routed expert's rows to the kernels in parts
// of at most that many rows (0: whole; -1: by format, splitRows), and
// moeSubRows (a multiple of 16) is the most weight rows per kernel call
// (variables for A/B runs, BenchmarkMoE).
var (
	moeSplit   = -1
	moeSubRows = 128
)

// splitRows is the part size for an expert whose gate is w: 8 rows for
// 4-bit weights, whose AMX kernels unpack every call's codes into a buffer
// before the tiles run, which the ~16-32 rows of a prefill's expert do not
// pay back: the 8-row VNNI kernels, which decode in registers and prefetch
// the weights, took 20% less CPU time over a qwen3-30b-a3b Q4_0 MoE block
// of 512 tokens (BenchmarkMoE -moe-threads 1); Q8_0 experts measured the
// same either way and stay whole.
func splitRows(w *Weight) int {
	if moeSplit >= 0 {
		return moeSplit
	}
	if w.format == tensor.Q8_0 {
		return 0
	}
	return 8
}

// moeTarget is how many pieces, per worker, the expert job aims at for
// each of an expert's projections: enough that the workers finish
// together when the experts are few (decode), none when they are many.
const moeTarget = 8

// moeQuantized is the MoE on quantized expert weights (the steps in the
// file comment).
func (b *Backend) moeQuantized(r *moeRun, o, x *Tensor, qx *kernels.Input, w *engine.MoEWeights) {
	T, H := x.rows, x.cols
	E := len(w.Experts)
	K := r.r.K
	shared := w.Shared != nil && quantizedExpert(*w.Shared)

	// Groups: the routed experts with tokens, then the shared expert.
	r.groups = r.groups[:0]
	for e := 0; e < E; e++ {
		if n := r.start[e+1] - r.start[e]; n > 0 {
			r.addGroup(w.Experts[e], n, r.tokens[r.start[e]:r.start[e+1]])
		}
	}
	if shared {
		r.addGroup(*w.Shared, T, nil)
	}
	parts := 0
	for i := range r.groups {
		gr := &r.groups[i]
		gr.split = gr.rows
		if sp := splitRows(gr.gate); gr.tokens != nil && sp > 0 && gr.rows > sp {
			gr.split = sp
		}
	}
	r.qx[0] = qx
	cost := 0
	for i := range r.groups {
		cost += r.groups[i].rows * r.groups[i].inter
	}
	target := moeTarget * b.threads
	blocks := func(gr *moeGroup, n int) int { // rows per block of a projection with n rows
		nb := max(1, min((n+15)/16, (target*gr.rows*gr.inter+cost/2)/max(cost, 1)))
		return (n/nb + 15) &^ 15
	}
	// An expert whose gate and up are one unit, and whose down reads only
	// quantized activations, keeps its gate/up outputs in the worker's own
	// buffer (in L2; moeUnit): only the others take room in r.g, r.u.
	whole := func(gr *moeGroup) bool { return blocks(gr, gr.inter) >= gr.inter && gr.down.k.Quantized() }
	// A routed expert whose down is one unit too runs whole in one unit
	// (a prefill's experts): its gathered rows and activations need no
	// buffers of their own, only the worker's.
	gu, ys := 0, 0
	for i := range r.groups {
		gr := &r.groups[i]
		gr.fused = gr.tokens != nil && whole(gr) && blocks(gr, H) >= H
		if !gr.fused {
			parts += 2 * gr.parts()
		}
		if !whole(gr) {
			gu += gr.rows * gr.inter
		}
		ys += gr.rows * H
	}
	for len(r.ins) < parts {
		r.ins = append(r.ins, new(kernels.Input))
	}
	r.g, r.u = grow(r.g, gu), grow(r.u, gu)
	if cap(r.y) < ys {
		reserve := 0
		if T > 1 {
			reserve = ys / T * engine.PrefillChunk
		}
		r.y = reserveRows(ys, reserve)
	}
	r.y = r.y[:ys]
	gu, ys, parts = 0, 0, 0
	for i := range r.groups {
		gr := &r.groups[i]
		gr.g, gr.u = nil, nil
		if !whole(gr) {
			gr.g, gr.u = r.g[gu:gu+gr.rows*gr.inter], r.u[gu:gu+gr.rows*gr.inter]
			gu += gr.rows * gr.inter
		}
		gr.y = r.y[ys : ys+gr.rows*H]
		ys += gr.rows * H
		gr.in, gr.act = nil, nil
		if gr.fused {
			continue
		}
		np := gr.parts()
		gr.act, parts = r.ins[parts:parts+np], parts+np
		if gr.tokens == nil {
			gr.in = r.qx[:]
			gr.state.Store(1)
		} else {
			gr.in, parts = r.ins[parts:parts+np], parts+np
			gr.state.Store(0)
		}
	}

	// Units: gathers, then gate/up blocks and whole experts, then down
	// blocks, the costliest groups first in each (the small ones fill the
	// end).
	byCost := make([]int, len(r.groups))
	for i := range byCost {
		byCost[i] = i
	}
	slices.SortStableFunc(byCost, func(a, c int) int { return r.groups[c].rows*r.groups[c].inter - r.groups[a].rows*r.groups[a].inter })
	r.units = r.units[:0]
	for _, i := range byCost {
		if gr := &r.groups[i]; gr.tokens != nil && !gr.fused {
			r.units = append(r.units, moeUnit{group: i, phase: 0})
		}
	}
	for _, i := range byCost {
		gr := &r.groups[i]
		if gr.fused {
			r.units = append(r.units, moeUnit{group: i, phase: 3})
			continue
		}
		bs := blocks(gr, gr.inter)
		gr.left.Store(int32((gr.inter + bs - 1) / bs))
		for n0 := 0; n0 < gr.inter; n0 += bs {
			r.units = append(r.units, moeUnit{group: i, phase: 1, n0: n0, n1: min(gr.inter, n0+bs)})
		}
	}
	for _, i := range byCost {
		gr := &r.groups[i]
		if gr.fused {
			continue
		}
		bs := blocks(gr, H)
		for n0 := 0; n0 < H; n0 += bs {
			r.units = append(r.units, moeUnit{group: i, phase: 2, n0: n0, n1: min(H, n0+bs)})
		}
	}
	for len(r.wk) < b.threads {
		r.wk = append(r.wk, moeWorker{})
	}
	r.next.Store(0)
	b.parallel(b.threads, 1, func(_, _, wk int) {
		for {
			i := r.next.Add(1) - 1
			if i >= int64(len(r.units)) {
				return
			}
			b.moeUnit(r, r.units[i], qx, H, wk)
		}
	})

	// Weighted sums: each token's experts in increasing expert order (the
	// sorted positions of a token's slots), then the shared expert, whose
	// outputs are the last T rows of r.y (the last group).
	var sg []float32
	if shared {
		g := b.NewTensor(T, 1)
		defer b.Release(g)
		b.MatMul(g, x, w.SharedGate, nil)
		sg = tt(g).data
	}
	shRow := len(r.y)/H - T
	b.parallel(T, max(1, 16384/(H*(K+1))), func(lo, hi, _ int) {
		var ps [65]int
		var ws [65]float32
		p, pw := ps[:0], ws[:0]
		if K+1 > len(ps) {
			p, pw = make([]int, 0, K+1), make([]float32, 0, K+1)
		}
		for t := lo; t < hi; t++ {
			p = append(p[:0], r.pos[t*K:(t+1)*K]...)
			slices.Sort(p) // positions ascend with the expert
			pw = pw[:0]
			for _, q := range p {
				pw = append(pw, r.r.Weights[r.order[q]])
			}
			if shared {
				p, pw = append(p, shRow+t), append(pw, moe.SharedGate(sg[t]))
			}
			kernels.WeightedRows(o.row(t), r.y, p, pw)
		}
	})
	if w.Shared != nil && !shared {
		b.sharedFloat(o, x, w)
	}
}

// work is worker wk's buffer of n floats.
func (r *moeRun) work(wk, n int) []float32 {
	r.wk[wk].buf = grow(r.wk[wk].buf, n)
	return r.wk[wk].buf
}

// moeUnit runs one unit of the expert job on worker wk.
func (b *Backend) moeUnit(r *moeRun, u moeUnit, qx *kernels.Input, H, wk int) {
	gr := &r.groups[u.group]
	switch u.phase {
	case 0:
		gr.gather(gr.in, qx)
		gr.state.Store(1)
	case 1:
		waitState(&gr.state, 1)
		gb, ub := gr.g, gr.u
		if gb == nil {
			// The whole expert in this unit, and down reads only the
			// quantized activations: gate and up land in the worker's own
			// buffer, which stays in L2.
			gb, ub = r.gateUp(gr, wk)
		}
		b.gateUp(gr, gr.in, gb, ub, u.n0, u.n1, wk, false)
		if gr.left.Add(-1) == 0 { // the last block: the activations are whole
			gr.activations(gr.act, gb)
			gr.state.Store(2)
		}
	case 2:
		waitState(&gr.state, 2)
		gr.downRows(gr.act, u.n0, u.n1, H, false)
	case 3:
		in, act := r.wk[wk].inputs(gr.parts())
		gr.gather(in, qx)
		gb, ub := r.gateUp(gr, wk)
		b.gateUp(gr, in, gb, ub, 0, gr.inter, wk, true)
		gr.activations(act, gb)
		gr.downRows(act, 0, H, H, true)
	}
}

// gateUp is worker wk's buffer for a whole expert's gate and up outputs.
func (r *moeRun) gateUp(gr *moeGroup, wk int) (g, u []float32) {
	n := gr.rows * gr.inter
	w := r.work(wk, 2*n)
	return w[:n], w[n:]
}

// gather sets the parts in to the group's rows of the quantized batch.
func (gr *moeGroup) gather(in []*kernels.Input, qx *kernels.Input) {
	for j, p := range in {
		p.GatherRows(qx, gr.tokens[j*gr.split:min(gr.rows, (j+1)*gr.split)])
	}
}

// gateUp computes the group's gate and up rows [n0, n1) over the parts in
// into gb, ub ([rows, inter] each) and applies SwiGLU to them in gb. With
// prefetch (in is this worker's own), the parts after the first bring the
// next sub-block of gate and up rows to L2 (prefetchNext).
func (b *Backend) gateUp(gr *moeGroup, in []*kernels.Input, gb, ub []float32, n0, n1, wk int, prefetch bool) {
	I := gr.inter
	// Weight rows in sub-blocks that stay in L2 while every part of the
	// rows passes over them (the AMX kernels unpack a call's 4-bit
	// weights into a buffer twice their size).
	for s0 := n0; s0 < n1; s0 += moeSubRows {
		s1 := min(n1, s0+moeSubRows)
		s2 := min(n1, s1+moeSubRows)
		for j, p := range in {
			if prefetch {
				prefetchNext(p, gr.gate.k, j, len(in), s1, s2)
			}
			gr.gate.k.MatMul(gb[j*gr.split*I:], I, p, s0, s1)
			if prefetch {
				prefetchNext(p, gr.up.k, j, len(in), s1, s2)
			}
			gr.up.k.MatMul(ub[j*gr.split*I:], I, p, s0, s1)
		}
	}
	e := b.scratchBuf(wk, n1-n0)
	for i := 0; i < gr.rows; i++ {
		g, up := gb[i*I+n0:i*I+n1], ub[i*I+n0:i*I+n1]
		swiglu(g, g, up, e)
	}
}

// activations points the parts act at the group's SwiGLU outputs gb,
// quantized when down reads quantized activations.
func (gr *moeGroup) activations(act []*kernels.Input, gb []float32) {
	I := gr.inter
	for j, a := range act {
		r0 := j * gr.split
		a.Reset(gb[r0*I:], min(gr.rows, r0+gr.split)-r0, I)
		if gr.down.k.Quantized() {
			a.QuantizeRows(0, a.M)
			a.X = nil // the quantized kernels only; gb may be a worker's buffer
		}
	}
}

// downRows computes the group's down rows [n0, n1) over the parts act
// (with prefetch, as gateUp).
func (gr *moeGroup) downRows(act []*kernels.Input, n0, n1, H int, prefetch bool) {
	for s0 := n0; s0 < n1; s0 += moeSubRows {
		s1 := min(n1, s0+moeSubRows)
		for j, a := range act {
			if prefetch {
				prefetchNext(a, gr.down.k, j, len(act), s1, min(n1, s1+moeSubRows))
			}
			gr.down.k.MatMul(gr.y[j*gr.split*H:], H, a, s0, s1)
		}
	}
}

// prefetchNext has part j of parts (all but the first, which reads the
// current sub-block from DRAM) prefetch its share of w's rows [s1, s2),
// the next sub-block, during its pass over the current one: the first
// part of the next sub-block then finds its weights in L2
// (kernels.Input.Prefetch).
func prefetchNext(p *kernels.Input, w *kernels.Matrix, j, parts, s1, s2 int) {
	if j == 0 || s2 <= s1 {
		return
	}
	next := w.PackedRows(s1, s2)
	share := (len(next) + parts - 2) / (parts - 1)
	if lo := (j - 1) * share; lo < len(next) {
		p.Prefetch(next[lo:min(len(next), lo+share)])
	}
}

// waitState spins until s reaches v: a unit's dependencies were claimed
// before it by running workers, so the wait is at most one unit's time.
func waitState(s *atomic.Int32, v int32) {
	for i := 1; s.Load() < v; i++ {
		kernels.Pause()
		if i%256 == 0 {
			osYield()
		}
	}
}

// swiglu sets h = silu(g) * u element-wise (h may alias g or u), with e
// (len(g)) as scratch: Backend.SwiGLU's arithmetic, so the bits do not
// depend on how a matrix is cut.
func swiglu(h, g, u, e []float32) {
	kernels.SiLUMul(h, g, u, negExp(e[:len(g)], g))
}

// moeFloat is the MoE one expert at a time on gathered float rows: the path
// of float or exact expert weights.
func (b *Backend) moeFloat(o *Tensor, x engine.Tensor, w *engine.MoEWeights, r moe.Routing) {
	H := o.cols
	clear(o.data)
	for _, as := range r.ByExpert(len(w.Experts)) {
		ex := w.Experts[as.Expert]
		n, inter := len(as.Tokens), ww(ex.Gate).rows
		xs := b.NewTensor(n, H)
		b.Gather(xs, x, as.Tokens)
		y := b.expert(xs, ex, n, inter, H)
		b.Release(xs)
		yd := tt(y).data
		for i, tok := range as.Tokens {
			moe.Accumulate(o.row(tok), r.Weights[tok*r.K+as.Slots[i]], yd[i*H:(i+1)*H])
		}
		b.Release(y)
	}
	if w.Shared != nil {
		b.sharedFloat(o, x, w)
	}
}

// sharedFloat adds the gated shared expert, run by MatMul.
func (b *Backend) sharedFloat(o *Tensor, x engine.Tensor, w *engine.MoEWeights) {
	T, H := o.rows, o.cols
	y := b.expert(x, *w.Shared, T, ww(w.Shared.Gate).rows, H)
	g := b.NewTensor(T, 1)
	b.MatMul(g, x, w.SharedGate, nil)
	yd, gd := tt(y).data, tt(g).data
	for t := 0; t < T; t++ {
		moe.Accumulate(o.row(t), moe.SharedGate(gd[t]), yd[t*H:(t+1)*H])
	}
	b.Release(y)
	b.Release(g)
}

// expert runs one SwiGLU MLP over the n rows of x and returns a new [n, H] tensor.
func (b *Backend) expert(x engine.Tensor, e engine.Expert, n, inter, H int) engine.Tensor {
	g, u := b.NewTensor(n, inter), b.NewTensor(n, inter)
	b.MatMul(g, x, e.Gate, nil)
	b.MatMul(u, x, e.Up, nil)
	b.SwiGLU(g, g, u)
	y := b.NewTensor(n, H)
	b.MatMul(y, g, e.Down, nil)
	b.Release(g)
	b.Release(u)
	return y
}
