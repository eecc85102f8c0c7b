package cpu

import (
	"fmt"
	"unsafe"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
)

// kvCache is one layer's K and V for one sequence, float32. K is
// dimension-major: value x of head h at position p is k[(h*headDim+x)*cap+p],
// so the scores are long axpys over positions. V is position-major per
// head: v[(h*cap+p)*headDim+x], so a decode step's output reads each head's
// values as one contiguous run (a dimension-major V is 128 short runs a page
// apart, a TLB miss and a prefetcher restart each) and StoreKV writes V
// contiguously. It grows by doubling (re-laying out rows); stores of 4 MiB
// or more go on transparent huge pages (adviseHuge).
type kvCache struct {
	heads, headDim, dim int
	cap                 int // positions allocated per row
	k, v                []float32
	n                   int
}

// NewKV allocates an empty cache.
func (b *Backend) NewKV(kvHeads, headDim int) (engine.KV, error) {
	if kvHeads <= 0 || headDim <= 0 {
		return nil, fmt.Errorf("cpu: kv cache with %d heads of %d", kvHeads, headDim)
	}
	return &kvCache{heads: kvHeads, headDim: headDim, dim: kvHeads * headDim}, nil
}

func (c *kvCache) Len() int { return c.n }

func (c *kvCache) Truncate(n int) error {
	if n < 0 || n > c.n {
		return fmt.Errorf("kv cache: truncate to %d of %d positions", n, c.n)
	}
	c.n = n
	return nil
}

func (c *kvCache) Free() { c.k, c.v, c.n, c.cap = nil, nil, 0, 0 }

func (c *kvCache) reserve(n int) {
	if n <= c.cap {
		return
	}
	nc := max(n, 2*c.cap, 64)
	k, v := make([]float32, c.dim*nc), make([]float32, c.dim*nc)
	adviseHuge(unsafe.Pointer(&k[0]), 4*len(k))
	adviseHuge(unsafe.Pointer(&v[0]), 4*len(v))
	for r := 0; r < c.dim; r++ {
		copy(k[r*nc:r*nc+c.n], c.k[r*c.cap:r*c.cap+c.n])
	}
	hd := c.headDim
	for h := 0; h < c.heads; h++ {
		copy(v[h*nc*hd:(h*nc+c.n)*hd], c.v[h*c.cap*hd:(h*c.cap+c.n)*hd])
	}
	c.k, c.v, c.cap = k, v, nc
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
	maxLen := 0
	for si, s := range seqs {
		c := s.KV.(*kvCache)
		if c.heads != p.KVHeads || c.headDim != hd || c.n < s.Pos+s.N || s.Row+s.N > qt.rows {
			panic(fmt.Sprintf("cpu: attention rows [%d,+%d) at position %d over cache %d×%d holding %d", s.Row, s.N, s.Pos, c.heads, c.headDim, c.n))
		}
		maxLen = max(maxLen, s.Pos+s.N)
		for h := 0; h < p.KVHeads; h++ {
			for r := 0; r < s.N; r += attnRows {
				tasks = append(tasks, task{si, h, r, min(s.N, r+attnRows)})
			}
		}
	}
	b.parallel(len(tasks), 1, func(lo, hi, w int) {
		// Each task is two GEMMs over the dimension-major cache
		// (kernels.AttentionRows, owner: kernels).
		buf := b.scratchBuf(w, kernels.AttentionScratch(attnRows, group, hd, maxLen))
		for _, t := range tasks[lo:hi] {
			s := seqs[t.seq]
			c := s.KV.(*kvCache)
			h0, row := t.kvHead*group, s.Row+t.r0
			kernels.AttentionRows(d.data[row*d.cols+h0*hd:], d.cols, qt.data[row*qt.cols+h0*hd:], qt.cols,
				t.r1-t.r0, group, hd, c.k[t.kvHead*hd*c.cap:], c.cap, c.v[t.kvHead*c.cap*hd:], s.Pos+t.r0, p.Scale, buf)
		}
	})
}
