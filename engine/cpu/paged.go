package cpu

// Paged KV cache (engine.PagedKVOps) and recurrent-state snapshots
// (engine.Snapshotter) for prefix caching; see engine/paged.go.

import (
	"fmt"
	"unsafe"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
)

var (
	_ engine.PagedKVOps  = (*Backend)(nil)
	_ engine.Snapshotter = (*deltaState)(nil)
)

// kvBlocks is the block store of one attention layer. K is dimension-major
// within a block (value x of kv head h at offset o is
// k[(b*dim + h*headDim + x)*bs + o]) so scores are vector ops over
// positions as in the contiguous cache; V is position-major within a block
// (v[(b*bs + o)*dim + h*headDim + x]) so P·V is an accumulation over the
// block's positions with the output in registers (8×32 GEMM tiles for
// prefill, an axpy-sum for decode) instead of short dot products.
//
// With Config.KVF16 the blocks hold IEEE half floats instead (k16, v16, same
// layout; k and v nil): half the memory and half the bytes a decoded token
// reads per cached position, at ~5e-4 relative rounding of K and V.
type kvBlocks struct {
	heads, headDim, dim, bs, blocks int
	k, v                            []float32
	k16, v16                        []uint16
	// Config.KVQ8: K and V both position-major within a block
	// (((b*bs+o)*dim + h*headDim + x)), a float32 scale per 32 values
	// (kvq8.go); k, v, k16, v16 nil.
	k8, v8 []int8
	ks, vs []float32
}

// adviseHuge puts a fresh KV block store of 4 MiB or more on transparent
// huge pages (kernels.AdviseHuge; a no-op off Linux).
func adviseHuge(p unsafe.Pointer, bytes int) {
	if bytes >= 4<<20 {
		kernels.AdviseHuge(unsafe.Slice((*byte)(p), bytes))
	}
}

// NewKVBlocks allocates a layer's block store (float32, zeroed lazily by
// the OS: untouched blocks cost no resident memory). On Linux the store is
// advised to transparent huge pages (adviseHuge): a decode step walks
// every cached position of every sequence, one head's V rows 2 KB apart,
// and with 4 KB pages that is a TLB miss every other row; pages then fill
// 2 MB at a time instead of 4 KB.
func (b *Backend) NewKVBlocks(kvHeads, headDim, blockSize, blocks int) (engine.KVBlocks, error) {
	if kvHeads <= 0 || headDim <= 0 || blockSize <= 0 || blocks <= 0 {
		return nil, fmt.Errorf("cpu: kv blocks: %d blocks of %d positions × %d heads × %d", blocks, blockSize, kvHeads, headDim)
	}
	dim := kvHeads * headDim
	n := blocks * dim * blockSize
	s := &kvBlocks{heads: kvHeads, headDim: headDim, dim: dim, bs: blockSize, blocks: blocks}
	switch {
	case b.kvQ8:
		if err := checkQ8Head(headDim); err != nil {
			return nil, err
		}
		s.k8, s.v8 = make([]int8, n), make([]int8, n)
		s.ks, s.vs = make([]float32, n/q8Block), make([]float32, n/q8Block)
		adviseHuge(unsafe.Pointer(&s.k8[0]), n)
		adviseHuge(unsafe.Pointer(&s.v8[0]), n)
	case b.kvF16:
		s.k16, s.v16 = make([]uint16, n), make([]uint16, n)
		adviseHuge(unsafe.Pointer(&s.k16[0]), 2*n)
		adviseHuge(unsafe.Pointer(&s.v16[0]), 2*n)
	default:
		s.k, s.v = make([]float32, n), make([]float32, n)
		adviseHuge(unsafe.Pointer(&s.k[0]), 4*n)
		adviseHuge(unsafe.Pointer(&s.v[0]), 4*n)
	}
	return s, nil
}

func (s *kvBlocks) View(t *engine.BlockTable) engine.KV { return &pagedKV{st: s, t: t} }

func (s *kvBlocks) CopyBlock(dst, src int) {
	w := s.dim * s.bs
	if s.k8 != nil {
		copy(s.k8[dst*w:(dst+1)*w], s.k8[src*w:(src+1)*w])
		copy(s.v8[dst*w:(dst+1)*w], s.v8[src*w:(src+1)*w])
		copy(s.ks[dst*w/q8Block:(dst+1)*w/q8Block], s.ks[src*w/q8Block:(src+1)*w/q8Block])
		copy(s.vs[dst*w/q8Block:(dst+1)*w/q8Block], s.vs[src*w/q8Block:(src+1)*w/q8Block])
		return
	}
	if s.k16 != nil {
		copy(s.k16[dst*w:(dst+1)*w], s.k16[src*w:(src+1)*w])
		copy(s.v16[dst*w:(dst+1)*w], s.v16[src*w:(src+1)*w])
		return
	}
	copy(s.k[dst*w:(dst+1)*w], s.k[src*w:(src+1)*w])
	copy(s.v[dst*w:(dst+1)*w], s.v[src*w:(src+1)*w])
}

func (s *kvBlocks) Free() {
	s.k, s.v, s.k16, s.v16 = nil, nil, nil, nil
	s.k8, s.v8, s.ks, s.vs = nil, nil, nil, nil
}

// block returns K of kv head h in block b (headDim rows of bs positions)
// and V of block b from kv head h on (bs rows of stride dim).
func (s *kvBlocks) block(b, h int) (k, v []float32) {
	o := (b*s.dim + h*s.headDim) * s.bs
	n := s.headDim * s.bs
	vo := b*s.dim*s.bs + h*s.headDim
	return s.k[o : o+n : o+n], s.v[vo : (b+1)*s.dim*s.bs]
}

// block16 is block for f16 blocks.
func (s *kvBlocks) block16(b, h int) (k, v []uint16) {
	o := (b*s.dim + h*s.headDim) * s.bs
	n := s.headDim * s.bs
	vo := b*s.dim*s.bs + h*s.headDim
	return s.k16[o : o+n : o+n], s.v16[vo : (b+1)*s.dim*s.bs]
}

// pagedKV is one sequence's view of a layer's blocks through its table.
type pagedKV struct {
	st *kvBlocks
	t  *engine.BlockTable
	n  int
}

func (c *pagedKV) Len() int     { return c.n }
func (c *pagedKV) SetLen(n int) { c.n = n }
func (c *pagedKV) Free()        { c.n = 0 }
func (c *pagedKV) Truncate(n int) error {
	if n < 0 || n > c.n {
		return fmt.Errorf("kv cache: truncate to %d of %d positions", n, c.n)
	}
	c.n = n
	return nil
}

// splitPaged separates paged sequences from contiguous ones.
func splitPaged(seqs []engine.AttnSeq) (paged, plain []engine.AttnSeq) {
	for _, s := range seqs {
		if _, ok := s.KV.(*pagedKV); ok {
			paged = append(paged, s)
		} else {
			plain = append(plain, s)
		}
	}
	return paged, plain
}

func (b *Backend) storeKVPaged(kt, vt *Tensor, seqs []engine.AttnSeq) {
	for _, s := range seqs {
		c := s.KV.(*pagedKV)
		st := c.st
		if kt.cols != st.dim || s.Pos > c.n || s.Row < 0 || s.Row+s.N > kt.rows || (s.Pos+s.N+st.bs-1)/st.bs > len(c.t.Blocks) {
			panic(fmt.Sprintf("cpu: storekv rows [%d,+%d) of [%d, %d] at position %d into paged cache of %d×%d holding %d in %d blocks",
				s.Row, s.N, kt.rows, kt.cols, s.Pos, st.heads, st.headDim, c.n, len(c.t.Blocks)))
		}
		for i := 0; i < s.N; {
			p := s.Pos + i
			blk, o := c.t.Blocks[p/st.bs], p%st.bs
			m := min(st.bs-o, s.N-i) // positions going into this block
			base := blk * st.dim * st.bs
			if st.k8 != nil {
				storeQ8Paged(st, kt, vt, s.Row+i, blk, o, m)
				i += m
				continue
			}
			if st.k16 != nil {
				storeF16(st, kt, vt, s.Row+i, base, o, m)
				i += m
				continue
			}
			for r := 0; r < st.dim; r++ {
				dk := st.k[base+r*st.bs+o : base+r*st.bs+o+m]
				for j := range dk {
					dk[j] = kt.data[(s.Row+i+j)*st.dim+r]
				}
			}
			copy(st.v[base+o*st.dim:base+(o+m)*st.dim], vt.data[(s.Row+i)*st.dim:(s.Row+i+m)*st.dim])
			i += m
		}
		c.n = s.Pos + s.N
	}
}

// storeF16 writes rows [row, row+m) of kt/vt at offset o of the f16 block
// starting at base: V rows converted in place (position-major), K rows
// converted through a small buffer and transposed (dimension-major).
func storeF16(st *kvBlocks, kt, vt *Tensor, row, base, o, m int) {
	kernels.F32ToF16(st.v16[base+o*st.dim:base+(o+m)*st.dim], vt.data[row*st.dim:(row+m)*st.dim])
	var buf [256]uint16
	for c0 := 0; c0 < st.dim; c0 += len(buf) {
		c1 := min(st.dim, c0+len(buf))
		for j := range m {
			h := buf[:c1-c0]
			kernels.F32ToF16(h, kt.data[(row+j)*st.dim+c0:(row+j)*st.dim+c1])
			for r, x := range h {
				st.k16[base+(c0+r)*st.bs+o+j] = x
			}
		}
	}
}

// pagedRows is how many query rows of one kv-head group a paged attention
// task handles: each K/V block is loaded once per task, so prefill wants
// many (32 rows × group heads per GEMM).
const pagedRows = 32

// attentionPaged is Attention over paged caches: per task (sequence, kv
// head, up to attnRows query rows), scores block by block (acc += Σ_x
// q[x]·K[x][block], accumulator in registers), softmax over the row as the
// contiguous path does, then the output block by block (dot of the
// probabilities with each dimension's values).
func (b *Backend) attentionPaged(d, qt *Tensor, seqs []engine.AttnSeq, p engine.AttnParams) {
	hd := p.HeadDim
	group := p.Heads / p.KVHeads
	type task struct {
		seq, kvHead, r0, r1 int
		gemm                bool
	}
	var tasks []task
	maxLen := 0
	for si, s := range seqs {
		c := s.KV.(*pagedKV)
		if c.st.heads != p.KVHeads || c.st.headDim != hd || c.n < s.Pos+s.N || s.Row+s.N > qt.rows {
			panic(fmt.Sprintf("cpu: attention rows [%d,+%d) at position %d over paged cache %d×%d holding %d", s.Row, s.N, s.Pos, c.st.heads, c.st.headDim, c.n))
		}
		maxLen = max(maxLen, s.Pos+s.N)
		// Prompt rows [0, g) may run as GEMMs (one FMA chain per score and
		// per block of the output, whatever the chunking); generated rows
		// [g, N) run the per-row kernels of a decode step (AttnSeq.GEMMRows).
		g := s.GEMMRows
		for h := 0; h < p.KVHeads; h++ {
			for r := 0; r < s.N; {
				r1 := min(s.N, r+pagedRows)
				var gemm bool
				switch {
				case g < 0:
					gemm = (r1-r)*group >= 8 && !b.rowAttn
				case r < g:
					r1, gemm = min(r1, g), true
				}
				tasks = append(tasks, task{si, h, r, r1, gemm})
				r = r1
			}
		}
	}
	mMax := pagedRows * group
	conv := 0 // f16 blocks widened for the prefill GEMMs, 8-bit K and V blocks for every task
	if len(seqs) > 0 && seqs[0].KV.(*pagedKV).st.k16 != nil {
		conv = hd * seqs[0].KV.(*pagedKV).st.bs
	}
	if len(seqs) > 0 && seqs[0].KV.(*pagedKV).st.k8 != nil {
		conv = 2 * hd * seqs[0].KV.(*pagedKV).st.bs
	}
	b.parallel(len(tasks), 1, func(lo, hi, w int) {
		buf := b.scratchBuf(w, 3*mMax*hd+mMax*maxLen+conv)
		for _, t := range tasks[lo:hi] {
			b.pagedTask(d, qt, seqs[t.seq], t.kvHead, t.r0, t.r1, t.gemm, group, p, buf)
		}
	})
}

// pagedTask is attention for query rows [r0, r1) of one sequence and the
// group of q heads sharing kv head kvHead, as m = rows·group query vectors.
// Prefill tasks (m ≥ 8) run two GEMMs per block (S = Q·K_block, O += P·V_blockᵀ,
// AVX-512 tiles); decode tasks register-accumulated axpy-sums (scores over
// the block's positions, output over its values).
func (b *Backend) pagedTask(d, qt *Tensor, s engine.AttnSeq, kvHead, r0, r1 int, gemm bool, group int, p engine.AttnParams, buf []float32) {
	c := s.KV.(*pagedKV)
	st := c.st
	hd, bs := p.HeadDim, st.bs
	rows := r1 - r0
	m, n := rows*group, s.Pos+r1
	a := buf[:m*hd]
	sc := buf[m*hd : m*hd+m*n]
	o := buf[m*hd+m*n : 2*m*hd+m*n]
	tmp := buf[2*m*hd+m*n : 3*m*hd+m*n]
	f16 := st.k16 != nil
	var wide []float32 // one f16 block widened to float32 (prefill GEMMs)
	if f16 {
		wide = buf[3*m*hd+m*n : 3*m*hd+m*n+hd*bs]
	}
	// 8-bit blocks are widened (K, then V with stride hd) and run the
	// float32 kernels.
	q8 := st.k8 != nil
	var wk, wv []float32
	vstride := st.dim
	if q8 {
		wk, wv = buf[3*m*hd+m*n:3*m*hd+m*n+hd*bs], buf[3*m*hd+m*n+hd*bs:3*m*hd+m*n+2*hd*bs]
		vstride = hd
	}
	h0 := kvHead * group
	for r := range rows {
		row := s.Row + r0 + r
		for g := range group {
			src := qt.data[row*qt.cols+(h0+g)*hd : row*qt.cols+(h0+g+1)*hd]
			dst := a[(r*group+g)*hd : (r*group+g+1)*hd]
			for x, v := range src {
				dst[x] = v * p.Scale
			}
		}
	}
	valid := func(i int) int { return s.Pos + r0 + i/group + 1 } // keys query i sees
	// Per-row path: query i's segment of block bi is its first l ≤ L
	// positions (l = 0: none). Two queries whose segments have the same
	// length (the group vectors of one row; consecutive rows in a full
	// block) share each K/V load through the two-row kernels, which give
	// each row exactly the one-row kernel's bits; other queries run alone.
	var bi, L int
	segLen := func(i int) (l int, pair bool) {
		l = max(0, min(L, valid(i)-bi*bs))
		return l, l > 0 && i+1 < m && min(L, valid(i+1)-bi*bs) == l
	}
	// f16 per-row path: while the first pair of queries sums block bi its
	// kernel prefetches the same rows of block bi+1 (K in the score loop, V
	// in the output loop), and the first block's rows are asked for before
	// each loop. A decode step streams every sequence's whole cache from
	// DRAM and one head's rows are runs too short (K 8 KB, V 256 bytes 2 KB
	// apart) for the hardware prefetchers; the float32 kernels gained
	// nothing from it (measured) and do not prefetch.
	nb := (n + bs - 1) / bs
	nextBlock := func(bi int, k bool) []uint16 {
		if bi+1 >= nb {
			return nil
		}
		kb, vb := st.block16(c.t.Blocks[bi+1], kvHead)
		if k {
			return kb
		}
		return vb
	}
	if f16 && !gemm {
		kb, _ := st.block16(c.t.Blocks[0], kvHead)
		kernels.PrefetchF16(kb, 1, 0, len(kb))
	}
	for bi = 0; bi*bs < n; bi++ {
		L = min(bs, n-bi*bs)
		if f16 {
			kb, _ := st.block16(c.t.Blocks[bi], kvHead)
			if gemm {
				kernels.F16ToF32(wide, kb)
				kernels.GemmF32NN(sc[bi*bs:], n, a, hd, wide, bs, m, L, hd)
				continue
			}
			next := nextBlock(bi, true)
			for i := 0; i < m; {
				l, pair := segLen(i)
				seg := sc[i*n+bi*bs : i*n+bi*bs+l]
				clear(seg)
				if pair {
					seg1 := sc[(i+1)*n+bi*bs : (i+1)*n+bi*bs+l]
					clear(seg1)
					kernels.AxpysF16x2Next(seg, seg1, a[i*hd:(i+1)*hd], a[(i+1)*hd:(i+2)*hd], kb, next, bs, hd)
					next = nil
					i += 2
					continue
				}
				if l > 0 {
					kernels.AxpysF16(seg, a[i*hd:(i+1)*hd], kb, bs, hd)
				}
				i++
			}
			continue
		}
		if q8 && !gemm { // the block's int8 keys read in place
			at := c.t.Blocks[bi]*bs*st.dim + kvHead*hd
			k8, ks := st.k8[at:], st.ks[at/q8Block:]
			for i := 0; i < m; {
				l, pair := segLen(i)
				if l == 0 {
					i++
					continue
				}
				var s1, q1 []float32 // nil alone
				if pair {
					s1, q1 = sc[(i+1)*n+bi*bs:(i+1)*n+bi*bs+l], a[(i+1)*hd:(i+2)*hd]
				}
				kernels.DotsQ8x2(sc[i*n+bi*bs:i*n+bi*bs+l], s1, a[i*hd:(i+1)*hd], q1, k8, ks, st.dim, st.dim/q8Block, l)
				i++
				if pair {
					i++
				}
			}
			continue
		}
		var kb []float32
		if q8 {
			widenQ8Block(st, c.t.Blocks[bi], kvHead, L, wk, wv)
			kb = wk
		} else {
			kb, _ = st.block(c.t.Blocks[bi], kvHead)
		}
		if gemm {
			kernels.GemmF32NN(sc[bi*bs:], n, a, hd, kb, bs, m, L, hd)
			continue
		}
		for i := 0; i < m; {
			l, pair := segLen(i)
			seg := sc[i*n+bi*bs : i*n+bi*bs+l]
			clear(seg)
			if pair {
				seg1 := sc[(i+1)*n+bi*bs : (i+1)*n+bi*bs+l]
				clear(seg1)
				kernels.AxpysF32x2(seg, seg1, a[i*hd:(i+1)*hd], a[(i+1)*hd:(i+2)*hd], kb, bs, hd)
				i += 2
				continue
			}
			if l > 0 {
				kernels.AxpysF32(seg, a[i*hd:(i+1)*hd], kb, bs, hd)
			}
			i++
		}
	}
	if f16 && !gemm {
		_, vb := st.block16(c.t.Blocks[0], kvHead)
		kernels.PrefetchF16(vb, min(bs, n), st.dim, hd)
	}
	sums := make([]float32, m)
	for i := range m {
		v := valid(i)
		row := sc[i*n : i*n+v]
		sums[i] = kernels.ExpSubF32(row, kernels.MaxF32(row))
		clear(sc[i*n+v : (i+1)*n])
	}
	clear(o)
	for bi = 0; bi*bs < n; bi++ {
		L = min(bs, n-bi*bs)
		if f16 {
			_, vb := st.block16(c.t.Blocks[bi], kvHead)
			if gemm {
				for j := range L { // rows of this kv head's values
					kernels.F16ToF32(wide[j*hd:(j+1)*hd], vb[j*st.dim:j*st.dim+hd])
				}
				kernels.GemmF32NN(tmp, hd, sc[bi*bs:], n, wide, hd, m, hd, L)
				kernels.AxpyF32(o, 1, tmp)
				continue
			}
			next := nextBlock(bi, false)
			for i := 0; i < m; {
				l, pair := segLen(i)
				p0 := sc[i*n+bi*bs : i*n+bi*bs+l]
				if pair {
					kernels.AxpysF16x2Next(o[i*hd:(i+1)*hd], o[(i+1)*hd:(i+2)*hd], p0, sc[(i+1)*n+bi*bs:(i+1)*n+bi*bs+l], vb, next, st.dim, l)
					next = nil
					i += 2
					continue
				}
				if l > 0 {
					kernels.AxpysF16(o[i*hd:(i+1)*hd], p0, vb, st.dim, l)
				}
				i++
			}
			continue
		}
		if q8 && !gemm { // the block's int8 values read in place
			at := c.t.Blocks[bi]*bs*st.dim + kvHead*hd
			v8, vs := st.v8[at:], st.vs[at/q8Block:]
			for i := 0; i < m; {
				l, pair := segLen(i)
				if l == 0 {
					i++
					continue
				}
				var o1, p1 []float32 // nil alone
				if pair {
					o1, p1 = o[(i+1)*hd:(i+2)*hd], sc[(i+1)*n+bi*bs:(i+1)*n+bi*bs+l]
				}
				kernels.AxpysQ8x2(o[i*hd:(i+1)*hd], o1, sc[i*n+bi*bs:i*n+bi*bs+l], p1, v8, vs, st.dim, st.dim/q8Block, l)
				i++
				if pair {
					i++
				}
			}
			continue
		}
		var vb []float32
		if q8 {
			widenQ8Block(st, c.t.Blocks[bi], kvHead, L, wk, wv)
			vb = wv
		} else {
			_, vb = st.block(c.t.Blocks[bi], kvHead)
		}
		if gemm {
			kernels.GemmF32NN(tmp, hd, sc[bi*bs:], n, vb, vstride, m, hd, L)
			kernels.AxpyF32(o, 1, tmp)
			continue
		}
		for i := 0; i < m; {
			l, pair := segLen(i)
			p0 := sc[i*n+bi*bs : i*n+bi*bs+l]
			if pair {
				kernels.AxpysF32x2(o[i*hd:(i+1)*hd], o[(i+1)*hd:(i+2)*hd], p0, sc[(i+1)*n+bi*bs:(i+1)*n+bi*bs+l], vb, vstride, l)
				i += 2
				continue
			}
			if l > 0 {
				kernels.AxpysF32(o[i*hd:(i+1)*hd], p0, vb, vstride, l)
			}
			i++
		}
	}
	for r := range rows {
		row := s.Row + r0 + r
		for g := range group {
			i := r*group + g
			f := 1 / sums[i]
			out := d.data[row*d.cols+(h0+g)*hd : row*d.cols+(h0+g+1)*hd]
			for x, v := range o[i*hd : (i+1)*hd] {
				out[x] = v * f
			}
		}
	}
}

// deltaSnapshot is a copy of a Gated DeltaNet state.
type deltaSnapshot struct {
	conv, rule []float32
	n          int
}

func (s *deltaSnapshot) Len() int     { return s.n }
func (s *deltaSnapshot) Bytes() int64 { return int64(4 * (len(s.conv) + len(s.rule))) }

// Snapshot copies the state (engine.Snapshotter).
func (s *deltaState) Snapshot() engine.LayerSnapshot {
	return &deltaSnapshot{conv: append([]float32(nil), s.conv...), rule: append([]float32(nil), s.rule...), n: s.n}
}

// Restore replaces the state with a snapshot of a state of the same shape.
func (s *deltaState) Restore(ls engine.LayerSnapshot) error {
	sn, ok := ls.(*deltaSnapshot)
	if !ok || len(sn.conv) != len(s.conv) || len(sn.rule) != len(s.rule) {
		return fmt.Errorf("restore recurrent state: snapshot %T does not fit", ls)
	}
	copy(s.conv, sn.conv)
	copy(s.rule, sn.rule)
	s.n, s.prevN = sn.n, -1
	return nil
}
