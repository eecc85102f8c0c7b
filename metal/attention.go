package metal

import (
	"fmt"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/metal/gpu"
)

// kvCache is one layer's K and V for one sequence: two float32 device
// buffers, position-major [cap, kvHeads*headDim], growing by doubling (the
// copy of the old contents is a dispatch, so growth needs no sync). A paged
// pool with block tables is in paged.go (engine.PagedKVOps).
type kvCache struct {
	b        *Backend
	heads    int
	headDim  int
	dim, cap int
	n        int
	k, v     gpu.Buffer
}

// NewKV implements engine.Backend.
func (b *Backend) NewKV(kvHeads, headDim int) (engine.KV, error) {
	if kvHeads <= 0 || headDim <= 0 {
		return nil, fmt.Errorf("metal: kv cache with %d heads of %d", kvHeads, headDim)
	}
	if headDim > 256 {
		return nil, fmt.Errorf("metal: head_dim %d above 256 not supported by the attention kernel", headDim)
	}
	return &kvCache{b: b, heads: kvHeads, headDim: headDim, dim: kvHeads * headDim}, nil
}

func (c *kvCache) Len() int { return c.n }

func (c *kvCache) Truncate(n int) error {
	if n < 0 || n > c.n {
		return fmt.Errorf("kv cache: truncate to %d of %d positions", n, c.n)
	}
	c.n = n
	return nil
}

func (c *kvCache) Free() {
	if c.k != nil {
		c.b.retire(c.k, c.v)
	}
	c.k, c.v, c.n, c.cap = nil, nil, 0, 0
}

func (c *kvCache) reserve(n, keep int) {
	if n <= c.cap {
		return
	}
	nc := max(n, 2*c.cap, 64)
	k, err := c.b.dev.NewBuffer(4 * nc * c.dim)
	if err != nil {
		panic(fmt.Sprintf("metal: kv cache of %d positions: %v", nc, err))
	}
	v, err := c.b.dev.NewBuffer(4 * nc * c.dim)
	if err != nil {
		panic(fmt.Sprintf("metal: kv cache of %d positions: %v", nc, err))
	}
	if c.k != nil {
		c.b.copy2d(k, c.dim, 0, 0, c.k, c.dim, 0, 0, keep, c.dim)
		c.b.copy2d(v, c.dim, 0, 0, c.v, c.dim, 0, 0, keep, c.dim)
		c.b.pending = append(c.b.pending, c.k, c.v)
	}
	c.k, c.v, c.cap = k, v, nc
}

// StoreKV implements engine.Backend.
func (b *Backend) StoreKV(k, v engine.Tensor, seqs []engine.AttnSeq) {
	kt, vt := tt(k), tt(v)
	sameShape("storekv", kt, vt)
	paged, seqs := splitPaged(seqs)
	if len(paged) > 0 {
		b.storeKVPaged(kt, vt, paged)
	}
	for _, s := range seqs {
		c := s.KV.(*kvCache)
		if kt.cols != c.dim || s.Pos > c.n || s.Row < 0 || s.Row+s.N > kt.rows {
			panic(fmt.Sprintf("metal: storekv rows [%d,+%d) of [%d, %d] at position %d into cache of %d×%d holding %d",
				s.Row, s.N, kt.rows, kt.cols, s.Pos, c.heads, c.headDim, c.n))
		}
		if s.N == 0 {
			continue
		}
		c.reserve(s.Pos+s.N, s.Pos)
		if h := b.held; h != nil && h.kind == heldRope && h.out == kt && vt != kt && len(seqs) == 1 && s.Row == 0 && s.N == kt.rows {
			// The key's QK-norm + rope held: it writes the cache rows too.
			b.held = nil
			h.store(c.k, c.v, vt, s.Pos, c.dim)
			c.n = s.Pos + s.N
			continue
		}
		n := s.N * c.dim
		b.dispatch("store_kv", [3]int{ceil(n, 256), 1, 1}, [3]int{256, 1, 1},
			buf(c.k), buf(c.v), buf(kt.buf), buf(vt.buf), gpu.Arg{Bytes: pack(s.Row, s.N, s.Pos, c.dim)})
		c.n = s.Pos + s.N
	}
}

// Attention implements engine.Backend: one dispatch per sequence.
func (b *Backend) Attention(dst, q engine.Tensor, seqs []engine.AttnSeq, p engine.AttnParams) {
	d, qt := tt(dst), tt(q)
	sameShape("attention", d, qt)
	if d == qt || p.KVHeads <= 0 || p.Heads%p.KVHeads != 0 || qt.cols != p.Heads*p.HeadDim || p.HeadDim > 256 {
		panic(fmt.Sprintf("metal: attention %d heads (%d kv) × %d over [%d, %d]", p.Heads, p.KVHeads, p.HeadDim, qt.rows, qt.cols))
	}
	paged, seqs := splitPaged(seqs)
	if len(paged) > 0 {
		b.attentionPaged(d, qt, paged, p)
	}
	for _, s := range seqs {
		c := s.KV.(*kvCache)
		if c.heads != p.KVHeads || c.headDim != p.HeadDim || s.Pos+s.N > c.n || s.Row < 0 || s.Row+s.N > qt.rows {
			panic(fmt.Sprintf("metal: attention rows [%d,+%d) at %d over cache %d×%d holding %d", s.Row, s.N, s.Pos, c.heads, c.headDim, c.n))
		}
		if s.N == 0 {
			continue
		}
		// Rows past one chunk: the split kernels (as paged caches; batch
		// invariance), with the contiguous cache as one block of c.cap
		// positions (rows before s.Row skip).
		if s.Pos+s.N > b.attnChunk {
			ri := make([]int32, 2*(s.Row+s.N))
			for r := 0; r < s.Row; r++ {
				ri[2*r] = -1
			}
			for i := 0; i < s.N; i++ {
				ri[2*(s.Row+i)] = int32(s.Pos + i)
			}
			if b.splitAttention(d, qt, c.k, c.v, b.hostArg(i32bytes(ri)), gpu.Arg{Bytes: i32bytes([]int32{0})}, s.Row+s.N, c.cap, s.Pos+s.N, p) {
				continue
			}
		}
		args := []gpu.Arg{buf(d.buf), buf(qt.buf), buf(c.k), buf(c.v),
			gpu.Arg{Bytes: pack(s.Row, s.N, s.Pos, p.Heads, p.KVHeads, p.HeadDim, p.Scale)}}
		grid := [3]int{p.Heads, s.N, 1}
		if len(paged) == 0 && len(seqs) == 1 && s.Row == 0 && s.N == d.rows && b.canFuse("attention_gated") {
			// Held: an output gate (SigmoidMul of d in place) that follows
			// becomes its epilogue (attention_gated).
			b.hold(&heldOp{kind: heldAttn, out: d, emit: func() { b.dispatch("attention", grid, [3]int{32, 1, 1}, args...) },
				gate: func(g *Tensor) {
					b.dispatch("attention_gated", grid, [3]int{32, 1, 1}, append(args[:5:5], buf(g.buf))...)
				}})
			continue
		}
		b.dispatch("attention", grid, [3]int{32, 1, 1}, args...)
	}
}
