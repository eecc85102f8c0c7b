package metal

// Paged KV cache (engine.PagedKVOps; see engine/paged.go): per attention
// layer one pool of K blocks and one of V blocks in device memory; a
// sequence's view reads and writes them through its engine.BlockTable,
// which travels to the GPU with each StoreKV/Attention call (all sequences
// of the batch in one dispatch: kernels/paged.metal).

import (
	"encoding/binary"
	"fmt"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/metal/gpu"
)

var _ engine.PagedKVOps = (*Backend)(nil)

// kvBlocks is the block store of one attention layer: k and v hold blocks
// of bs positions, position-major (position o of block b, kv dimension d at
// (b*bs + o)*dim + d), float32.
type kvBlocks struct {
	b                               *Backend
	heads, headDim, dim, bs, blocks int
	k, v                            gpu.Buffer
}

// NewKVBlocks implements engine.PagedKVOps.
func (b *Backend) NewKVBlocks(kvHeads, headDim, blockSize, blocks int) (engine.KVBlocks, error) {
	if kvHeads <= 0 || headDim <= 0 || blockSize <= 0 || blocks <= 0 {
		return nil, fmt.Errorf("metal: kv blocks: %d blocks of %d positions × %d heads × %d", blocks, blockSize, kvHeads, headDim)
	}
	if headDim > 256 {
		return nil, fmt.Errorf("metal: head_dim %d above 256 not supported by the attention kernel", headDim)
	}
	for _, n := range []string{"store_kv_paged", "attention_paged"} {
		if b.pipes[n] == nil {
			return nil, fmt.Errorf("metal: paged kv cache: %w", b.missing[n])
		}
	}
	dim := kvHeads * headDim
	size := int64(4) * int64(blocks) * int64(blockSize) * int64(dim)
	if size > 1<<40 || size != int64(int(size)) {
		return nil, fmt.Errorf("metal: kv blocks: %d bytes per layer is too large", size)
	}
	k, err := b.dev.NewBuffer(int(size))
	if err != nil {
		return nil, fmt.Errorf("metal: kv blocks of %d bytes: %w", size, err)
	}
	v, err := b.dev.NewBuffer(int(size))
	if err != nil {
		k.Release()
		return nil, fmt.Errorf("metal: kv blocks of %d bytes: %w", size, err)
	}
	return &kvBlocks{b: b, heads: kvHeads, headDim: headDim, dim: dim, bs: blockSize, blocks: blocks, k: k, v: v}, nil
}

func (s *kvBlocks) View(t *engine.BlockTable) engine.KV { return &pagedKV{st: s, t: t} }

// CopyBlock copies a block of K and of V on the GPU, in command order.
func (s *kvBlocks) CopyBlock(dst, src int) {
	if dst < 0 || src < 0 || dst >= s.blocks || src >= s.blocks {
		panic(fmt.Sprintf("metal: copy kv block %d to %d of %d", src, dst, s.blocks))
	}
	s.b.copy2d(s.k, s.dim, dst*s.bs, 0, s.k, s.dim, src*s.bs, 0, s.bs, s.dim)
	s.b.copy2d(s.v, s.dim, dst*s.bs, 0, s.v, s.dim, src*s.bs, 0, s.bs, s.dim)
}

// Free releases the storage (after the next sync if work is in flight).
func (s *kvBlocks) Free() {
	if s.k != nil {
		s.b.retire(s.k, s.v)
	}
	s.k, s.v = nil, nil
}

// pagedKV is one sequence's view of a layer's blocks. Free and Truncate
// only change its length: the engine owns the blocks.
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

// rowTable lays out the per-row table (position, start of the sequence's
// block table; position -1 for rows of no paged sequence) and the block
// tables of seqs (all over one store) for a batch of rows rows, covering
// positions up to Pos+N of every sequence.
func rowTable(op string, rows int, seqs []engine.AttnSeq) (st *kvBlocks, ri, tab []byte) {
	pos := make([]int32, 2*rows)
	for i := 0; i < rows; i++ {
		pos[2*i] = -1
	}
	var blocks []int32
	for _, s := range seqs {
		c := s.KV.(*pagedKV)
		if st == nil {
			st = c.st
		}
		need := ceil(s.Pos+s.N, c.st.bs)
		if c.st != st || s.Row < 0 || s.N < 0 || s.Row+s.N > rows || need > len(c.t.Blocks) {
			panic(fmt.Sprintf("metal: %s rows [%d,+%d) of %d at position %d over %d blocks of a paged cache (same store: %v)",
				op, s.Row, s.N, rows, s.Pos, len(c.t.Blocks), c.st == st))
		}
		off := int32(len(blocks))
		for _, id := range c.t.Blocks[:need] {
			if id < 0 || id >= st.blocks {
				panic(fmt.Sprintf("metal: %s: block %d outside the pool of %d", op, id, st.blocks))
			}
			blocks = append(blocks, int32(id))
		}
		for i := 0; i < s.N; i++ {
			pos[2*(s.Row+i)], pos[2*(s.Row+i)+1] = int32(s.Pos+i), off
		}
	}
	if len(blocks) == 0 {
		blocks = append(blocks, 0) // no zero-length arguments
	}
	return st, i32bytes(pos), i32bytes(blocks)
}

func i32bytes(v []int32) []byte {
	out := make([]byte, 0, 4*len(v))
	for _, x := range v {
		out = binary.LittleEndian.AppendUint32(out, uint32(x))
	}
	return out
}

// storeKVPaged writes the rows of every paged sequence in one dispatch.
func (b *Backend) storeKVPaged(kt, vt *Tensor, seqs []engine.AttnSeq) {
	for _, s := range seqs {
		c := s.KV.(*pagedKV)
		if kt.cols != c.st.dim || s.Pos > c.n {
			panic(fmt.Sprintf("metal: storekv rows [%d,+%d) of [%d, %d] at position %d into paged cache of %d×%d holding %d",
				s.Row, s.N, kt.rows, kt.cols, s.Pos, c.st.heads, c.st.headDim, c.n))
		}
	}
	st, ri, tab := rowTable("storekv", kt.rows, seqs)
	if kt.rows > 0 {
		b.dispatch("store_kv_paged", [3]int{ceil(kt.rows*st.dim, 256), 1, 1}, [3]int{256, 1, 1},
			buf(st.k), buf(st.v), buf(kt.buf), buf(vt.buf), b.hostArg(ri), b.hostArg(tab),
			gpu.Arg{Bytes: pack(kt.rows, st.dim, st.bs)})
	}
	for _, s := range seqs {
		s.KV.(*pagedKV).n = s.Pos + s.N
	}
}

// attentionPaged runs attention for every paged sequence in one dispatch.
func (b *Backend) attentionPaged(d, qt *Tensor, seqs []engine.AttnSeq, p engine.AttnParams) {
	for _, s := range seqs {
		c := s.KV.(*pagedKV)
		if c.st.heads != p.KVHeads || c.st.headDim != p.HeadDim || s.Pos+s.N > c.n {
			panic(fmt.Sprintf("metal: attention rows [%d,+%d) at %d over paged cache %d×%d holding %d", s.Row, s.N, s.Pos, c.st.heads, c.st.headDim, c.n))
		}
	}
	st, ri, tab := rowTable("attention", qt.rows, seqs)
	if qt.rows == 0 {
		return
	}
	riArg, tabArg := b.hostArg(ri), b.hostArg(tab)
	maxPos := 0
	for _, s := range seqs {
		maxPos = max(maxPos, s.Pos+s.N)
	}
	if b.splitAttention(d, qt, st.k, st.v, riArg, tabArg, qt.rows, st.bs, maxPos, p) {
		return
	}
	b.dispatch("attention_paged", [3]int{p.Heads, qt.rows, 1}, [3]int{32, 1, 1},
		buf(d.buf), buf(qt.buf), buf(st.k), buf(st.v), riArg, tabArg,
		gpu.Arg{Bytes: pack(p.Heads, p.KVHeads, p.HeadDim, st.bs, p.Scale)})
}

// splitAttention runs attention for batch rows [0, rows) (row table ri,
// block tables tab, blocks of bs positions in k and v) with each row's
// positions split into chunks of attnChunk, whenever a row reaches past one
// chunk. It reports whether it did; otherwise (every row within one chunk)
// the caller runs the one-pass kernel, which gives those rows the same bits.
// The choice depends on no other row's length or count, so a row's result
// is the same whatever shares its batch (decode beside a prefill, a resume
// prefilling generated tokens): batch invariance.
func (b *Backend) splitAttention(d, qt *Tensor, k, v gpu.Buffer, ri, tab gpu.Arg, rows, bs, maxPos int, p engine.AttnParams) bool {
	splits := ceil(maxPos, b.attnChunk)
	if splits < 2 {
		return false
	}
	if b.pipes["attention_paged_part"] == nil || b.pipes["attention_combine"] == nil {
		panic(fmt.Sprintf("metal: %v", b.missing["attention_paged_part"]))
	}
	// Blocks of rows bound the scratch; one scratch for all blocks and
	// layers: a block's combine runs before the next part kernel
	// overwrites it (serial dispatch).
	perRow := 4 * p.Heads * splits * (p.HeadDim + 2)
	block := max(1, min(rows, splitMaxScratch/perRow))
	part := b.scratchBuf(&b.attnPart, block*perRow)
	for r0 := 0; r0 < rows; r0 += block {
		n := min(block, rows-r0)
		b.dispatch("attention_paged_part", [3]int{p.Heads, n, splits}, [3]int{32, 1, 1},
			buf(part), buf(qt.buf), buf(k), buf(v), ri, tab,
			gpu.Arg{Bytes: pack(p.Heads, p.KVHeads, p.HeadDim, bs, p.Scale, b.attnChunk, splits, r0)})
		b.dispatch("attention_combine", [3]int{p.Heads, n, 1}, [3]int{32, 1, 1},
			buf(d.buf), buf(part), ri, gpu.Arg{Bytes: pack(p.Heads, p.HeadDim, splits, r0)})
	}
	return true
}

// Split (flash-decoding) attention: positions per split, and the scratch
// one block of rows may use.
const (
	defaultAttnChunk = 128
	splitMaxScratch  = 16 << 20
)
