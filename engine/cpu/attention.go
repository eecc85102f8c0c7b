package cpu

import (
	"fmt"
	"unsafe"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
	"github.com/macpool/macpool/engine/tensor"
)

// kvCache is one layer's K and V for one sequence, float32. K is
// dimension-major: value x of head h at position p is k[(h*headDim+x)*cap+p],
// so the scores are long axpys over positions. V is position-major per
// head: v[(h*cap+p)*headDim+x], so a decode step's output reads each head's
// values as one contiguous run (a dimension-major V is 128 short runs a page
// apart, a TLB miss and a prefetcher restart each) and StoreKV writes V
// contiguously. It grows to at least 1.5× the positions asked for, and at
// least doubles (re-laying out rows); stores of 4 MiB
// or more go on transparent huge pages (adviseHuge). With Config.KVF16
// IEEE halves are kept in k16/v16 instead (k and v nil): half the bytes a
// decode step reads, the way llama.cpp keeps its cache by default. Their
// K is position-blocked: blocks of kvBlock positions, each holding every
// head's dimension-major rows, value x of head h at position p at
// k16[kIdx(h*headDim+x, p)]. A decode step then reads each head's keys
// as contiguous 32 KiB runs (head dimension 128), which the hardware
// prefetchers stream, where 128 rows of 256 bytes a row length apart
// read at half V's rate from DRAM (measured on Zen 4); and growing copies
// the blocks as they are.
type kvCache struct {
	heads, headDim, dim int
	cap                 int // positions allocated per row
	k, v                []float32
	k16, v16            []uint16
	f16                 bool
	q8                  *kvQ8 // Config.KVQ8: the 8-bit store instead (kvq8.go)
	n                   int
}

// NewKV allocates an empty cache (float32, f16 with Config.KVF16, 8-bit
// with Config.KVQ8).
func (b *Backend) NewKV(kvHeads, headDim int) (engine.KV, error) {
	if kvHeads <= 0 || headDim <= 0 {
		return nil, fmt.Errorf("cpu: kv cache with %d heads of %d", kvHeads, headDim)
	}
	c := &kvCache{heads: kvHeads, headDim: headDim, dim: kvHeads * headDim, f16: b.kvF16 && !b.kvQ8}
	if b.kvQ8 {
		if err := checkQ8Head(headDim); err != nil {
			return nil, err
		}
		c.q8 = &kvQ8{}
	}
	return c, nil
}

// kvBlock is the f16 K block: the positions AttentionRowF16 scores at a
// time, so a block is one of its chunks.
const kvBlock = kernels.AttnKeyBlock

// kIdx is where value r = h*headDim+x of position p sits in k16.
func (c *kvCache) kIdx(r, p int) int { return (p/kvBlock*c.dim+r)*kvBlock + p%kvBlock }

func (c *kvCache) Len() int { return c.n }

func (c *kvCache) Truncate(n int) error {
	if n < 0 || n > c.n {
		return fmt.Errorf("kv cache: truncate to %d of %d positions", n, c.n)
	}
	c.n = n
	return nil
}

func (c *kvCache) Free() {
	c.k, c.v, c.k16, c.v16, c.n, c.cap = nil, nil, nil, nil, 0, 0
	if c.q8 != nil {
		*c.q8 = kvQ8{}
	}
}

func (c *kvCache) reserve(n int) {
	if n <= c.cap {
		return
	}
	// Half again the asked-for positions: a prompt's prefill reserves its
	// length, and without headroom the first decoded token re-laid out
	// the whole cache (a 512-token prompt's first step copied and faulted
	// in ~175 MB over 28 layers).
	nc := max(n+n/2, 2*c.cap, 64)
	if c.q8 != nil {
		c.q8.regrow(c.heads, c.headDim, c.cap, nc, c.n)
		c.cap = nc
		return
	}
	if c.f16 {
		nc = (nc + kvBlock - 1) / kvBlock * kvBlock
		k := make([]uint16, c.dim*nc)
		adviseHuge(unsafe.Pointer(&k[0]), 2*len(k))
		copy(k, c.k16[:(c.n+kvBlock-1)/kvBlock*kvBlock*c.dim])
		_, c.v16 = regrow(nil, c.v16, 0, c.heads, c.headDim, c.cap, nc, c.n, 2)
		c.k16 = k
	} else {
		c.k, c.v = regrow(c.k, c.v, c.dim, c.heads, c.headDim, c.cap, nc, c.n, 4)
	}
	c.cap = nc
}

// regrow copies the first n positions of a cache laid out for capacity oc
// into new stores for capacity nc (size: bytes per value); dim = 0 leaves K
// (nil).
func regrow[T float32 | uint16](ok, ov []T, dim, heads, hd, oc, nc, n, size int) (k, v []T) {
	if dim > 0 {
		k = make([]T, dim*nc)
		adviseHuge(unsafe.Pointer(&k[0]), size*len(k))
	}
	v = make([]T, heads*hd*nc)
	adviseHuge(unsafe.Pointer(&v[0]), size*len(v))
	for r := 0; r < dim; r++ {
		copy(k[r*nc:r*nc+n], ok[r*oc:r*oc+n])
	}
	for h := 0; h < heads; h++ {
		copy(v[h*nc*hd:(h*nc+n)*hd], ov[h*oc*hd:(h*oc+n)*hd])
	}
	return k, v
}

// StoreKV writes the new K and V rows of every sequence into its cache.
func (b *Backend) StoreKV(k, v engine.Tensor, seqs []engine.AttnSeq) {
	kt, vt := tt(k), tt(v)
	sameShape("storekv", kt, vt)
	if paged, plain := splitPaged(seqs); len(paged) > 0 {
		b.storeKVPaged(kt, vt, paged)
		seqs = plain
	}
	for _, s := range seqs {
		c := s.KV.(*kvCache)
		if kt.cols != c.dim || s.Pos > c.n || s.Row < 0 || s.Row+s.N > kt.rows {
			panic(fmt.Sprintf("cpu: storekv rows [%d,+%d) of [%d, %d] at position %d into cache of %d×%d holding %d",
				s.Row, s.N, kt.rows, kt.cols, s.Pos, c.heads, c.headDim, c.n))
		}
		c.reserve(s.Pos + s.N)
		// K: transpose in blocks of 16 positions, so each cache row gets
		// one cache line of writes while the 16 source rows stay in cache.
		// Cache rows are split between the threads: a decode step's dim
		// K writes each miss the cache (and mostly the TLB). V rows are
		// copied whole (position-major per head).
		hd := c.headDim
		if c.q8 != nil {
			b.parallel(c.heads, 1, func(lo, hi, _ int) { storeKVQ8(c, kt, vt, s.Row, s.Pos, s.N, lo, hi) })
			c.n = s.Pos + s.N
			continue
		}
		if c.f16 {
			b.parallel(c.dim, 64, func(lo, hi, _ int) { storeKVF16(c, kt, vt, s, lo, hi) })
			c.n = s.Pos + s.N
			continue
		}
		b.parallel(c.dim, 64, func(lo, hi, _ int) {
			for i0 := 0; i0 < s.N; i0 += 16 {
				i1 := min(s.N, i0+16)
				for r := lo; r < hi; r++ {
					dk := c.k[r*c.cap+s.Pos+i0 : r*c.cap+s.Pos+i1]
					for i := range dk {
						dk[i] = kt.data[(s.Row+i0+i)*c.dim+r]
					}
				}
			}
			for i := 0; i < s.N; i++ {
				for r := lo; r < hi; {
					h, x := r/hd, r%hd
					e := min(hi-r, hd-x)
					copy(c.v[(h*c.cap+s.Pos+i)*hd+x:][:e], vt.data[(s.Row+i)*c.dim+r:][:e])
					r += e
				}
			}
		})
		c.n = s.Pos + s.N
	}
}

// storeKVF16 is StoreKV's work on cache rows [lo, hi) of an f16 cache,
// rounding as kernels.F32ToF16 (to nearest even, tensor.F32ToF16).
func storeKVF16(c *kvCache, kt, vt *Tensor, s engine.AttnSeq, lo, hi int) {
	hd := c.headDim
	if s.N == 1 { // a decode step: one scattered half per cache row, stored in place
		for r := lo; r < hi; r++ {
			c.k16[c.kIdx(r, s.Pos)] = tensor.F32ToF16(kt.data[s.Row*c.dim+r])
		}
	}
	// Prompt rows: runs of up to 16 positions (stopping at block ends) and
	// 256 cache rows are rounded position-major into scratch (contiguous
	// conversions), then transposed into the blocks' rows of 16 halves.
	const runPos, runRows = 16, 256
	var half [runPos * runRows]uint16
	for i0, i1 := 0, 0; i0 < s.N && s.N > 1; i0 = i1 {
		p := s.Pos + i0
		i1 = min(s.N, i0+runPos, i0+kvBlock-p%kvBlock)
		n := i1 - i0
		for r0 := lo; r0 < hi; r0 += runRows {
			w := min(hi-r0, runRows)
			for i := range n {
				kernels.F32ToF16(half[i*w:(i+1)*w], kt.data[(s.Row+i0+i)*c.dim+r0:][:w])
			}
			for r := range w {
				dst := c.k16[c.kIdx(r0+r, p):][:n]
				for i := range dst {
					dst[i] = half[i*w+r]
				}
			}
		}
	}
	for i := 0; i < s.N; i++ {
		for r := lo; r < hi; {
			h, x := r/hd, r%hd
			e := min(hi-r, hd-x)
			kernels.F32ToF16(c.v16[(h*c.cap+s.Pos+i)*hd+x:][:e], vt.data[(s.Row+i)*c.dim+r:][:e])
			r += e
		}
	}
}

// attnRows is how many query rows of one head one task handles.
const attnRows = 8

// Attention is causal grouped-query attention over each sequence's cache.
// Scores are float32; the softmax subtracts the row maximum and sums in
// float64.
func (b *Backend) Attention(dst, q engine.Tensor, seqs []engine.AttnSeq, p engine.AttnParams) {
	d, qt := tt(dst), tt(q)
	sameShape("attention", d, qt)
	hd := p.HeadDim
	if p.Heads*hd != qt.cols || p.KVHeads <= 0 || p.Heads%p.KVHeads != 0 {
		panic(fmt.Sprintf("cpu: attention %d heads (%d kv) × %d over [%d, %d]", p.Heads, p.KVHeads, hd, qt.rows, qt.cols))
	}
	if paged, plain := splitPaged(seqs); len(paged) > 0 {
		b.attentionPaged(d, qt, paged, p)
		seqs = plain
	}
	group := p.Heads / p.KVHeads
	// Tasks are (sequence, kv head, block of rows): the q heads sharing a
	// kv head are processed together, so each K/V row is read from memory
	// once per group and reused from L1 for the other heads.
	type task struct{ seq, kvHead, r0, r1 int }
	var tasks []task
	maxLen, wide := 0, false // wide: some task widens its K and V into scratch
	for si, s := range seqs {
		c := s.KV.(*kvCache)
		wide = wide || c.f16 || c.q8 != nil
		if c.heads != p.KVHeads || c.headDim != hd || c.n < s.Pos+s.N || s.Row+s.N > qt.rows {
			panic(fmt.Sprintf("cpu: attention rows [%d,+%d) at position %d over cache %d×%d holding %d", s.Row, s.N, s.Pos, c.heads, c.headDim, c.n))
		}
		maxLen = max(maxLen, s.Pos+s.N)
		for h := 0; h < p.KVHeads; h++ {
			if (c.f16 && s.N > 1) || c.q8 != nil { // one task per head: its K/V widened once (attentionF16, attentionQ8)
				tasks = append(tasks, task{si, h, 0, s.N})
				continue
			}
			for r := 0; r < s.N; r += attnRows {
				tasks = append(tasks, task{si, h, r, min(s.N, r+attnRows)})
			}
		}
	}
	b.parallel(len(tasks), 1, func(lo, hi, w int) {
		// Each task is two GEMMs over the cache (kernels.AttentionRows),
		// or one decode row's axpy-sums.
		n := kernels.AttentionScratch(attnRows, group, hd, maxLen)
		if wide {
			n += 2 * hd * maxLen // the task's K and V widened to float32 for the GEMMs
		}
		buf := b.scratchBuf(w, n)
		for _, t := range tasks[lo:hi] {
			s := seqs[t.seq]
			c := s.KV.(*kvCache)
			h0, row := t.kvHead*group, s.Row+t.r0
			if c.q8 != nil {
				attentionQ8(c, d, qt, t.kvHead, group, hd, row, s.Pos+t.r0, t.r1-t.r0, p.Scale, buf, kernels.AttentionRows)
				continue
			}
			if c.f16 {
				attentionF16(c, d, qt, t.kvHead, group, hd, row, s.Pos+t.r0, t.r1-t.r0, p.Scale, buf)
				continue
			}
			kernels.AttentionRows(d.data[row*d.cols+h0*hd:], d.cols, qt.data[row*qt.cols+h0*hd:], qt.cols,
				t.r1-t.r0, group, hd, c.k[t.kvHead*hd*c.cap:], c.cap, c.v[t.kvHead*c.cap*hd:], s.Pos+t.r0, p.Scale, buf)
		}
	})
}

// attentionF16 is one attention task over an f16 cache: a decode row reads
// the halves in place (kernels.AttentionRowF16); prompt rows (all of one
// head's, one task) widen the head's K and V up to their last position
// into scratch once and run the float32 GEMMs (kernels.AttentionRows) on
// blocks of attnRows rows. buf is the task's scratch (AttentionScratch for
// attnRows rows + 2·hd·(pos+rows) floats).
func attentionF16(c *kvCache, d, qt *Tensor, kvHead, group, hd, row, pos, rows int, scale float32, buf []float32) {
	out, q := d.data[row*d.cols+kvHead*group*hd:], qt.data[row*qt.cols+kvHead*group*hd:]
	n := pos + rows
	kt := c.k16[c.kIdx(kvHead*hd, 0):]
	v := c.v16[kvHead*c.cap*hd:]
	if rows == 1 {
		kernels.AttentionRowF16(out, q, group, hd, kt, kvBlock, kvBlock*c.dim, v, pos, scale, buf)
		return
	}
	wk, wv := buf[:hd*n], buf[hd*n:2*hd*n]
	for j := 0; j < n; j += kvBlock {
		e := min(n, j+kvBlock)
		for x := range hd {
			kernels.F16ToF32(wk[x*n+j:x*n+e], kt[(j/kvBlock*c.dim+x)*kvBlock:][:e-j])
		}
	}
	kernels.F16ToF32(wv, v[:n*hd])
	for r := 0; r < rows; r += attnRows {
		rr := min(rows-r, attnRows)
		kernels.AttentionRows(out[r*d.cols:], d.cols, q[r*qt.cols:], qt.cols, rr, group, hd, wk, n, wv, pos+r, scale, buf[2*hd*n:])
	}
}
