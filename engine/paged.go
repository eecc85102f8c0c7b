package engine

// Paged KV cache and prefix cache.
//
// A KVPool owns a fixed budget of KV blocks. A block holds BlockSize
// consecutive positions of every attention layer of one sequence (the
// backend keeps one store per layer, indexed by the same block id). A paged
// Cache keeps a BlockTable (block ids in position order) shared by all its
// attention layers; ops read and write K/V through it (the backend's KV
// view). Blocks are allocated before a forward pass runs (Cache.Reserve,
// also done by Model.Forward), so running out of blocks is an error of the
// call, never a failure inside an op.
//
// Prefix cache: every full block gets the chained hash of all tokens up to
// and including it (BlockHashes). A full block is registered under its hash;
// when the last cache holding it lets go, it stays in the pool as a cached
// block (LRU) until a new allocation needs the space. Cache.Attach looks up
// the longest registered prefix of a new sequence and shares those blocks
// (reference counts) so only the rest is prefilled. Shared blocks are full
// and never written again; a Truncate into a shared block copies it first
// (copy-on-write). Recurrent layers (Gated DeltaNet) cannot be rebuilt from
// KV blocks, so a hybrid model resumes only at a block carrying a snapshot
// of the recurrent states (Cache.SaveSnapshot, taken by the serving layer at
// the prompt's last multiple of SnapshotStride); snapshots are paid for with
// blocks of the same pool, so the budget holds for them too.

import (
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// ErrNoKVBlocks is returned (wrapped) when a KV pool has no free or
// evictable block left for an allocation.
var ErrNoKVBlocks = errors.New("kv pool: no free blocks")

// BlockTable lists, in position order, the pool blocks holding a sequence's
// positions: position p is at offset p%BlockSize of block Blocks[p/BlockSize].
// One table is shared by all attention layers of a sequence; the engine
// owns it (a backend's KV view only reads it).
type BlockTable struct {
	Blocks []int
}

// KVBlocks is a backend's storage of KV blocks for one attention layer.
type KVBlocks interface {
	// View returns the KV cache of one sequence reading and writing through
	// t. The view's Truncate only changes its length (the engine frees blocks).
	View(t *BlockTable) KV
	// CopyBlock copies block src to block dst (copy-on-write).
	CopyBlock(dst, src int)
	// Free releases the storage.
	Free()
}

// PagedKVOps is implemented by backends with a paged KV cache. It is
// optional: without it a model serves with per-sequence KV caches (NewKV)
// and no prefix cache.
type PagedKVOps interface {
	// NewKVBlocks allocates storage for blocks blocks of blockSize positions
	// of one attention layer with kvHeads heads of headDim.
	NewKVBlocks(kvHeads, headDim, blockSize, blocks int) (KVBlocks, error)
}

// KVBudgeter is optionally implemented by backends that know how much
// memory the KV pool may use (on a Mac: the GPU's recommended working set
// minus the weights). KVPoolConfig uses it when no budget is given.
type KVBudgeter interface {
	KVBudgetBytes() int64
}

// PagedArch is implemented by architectures whose caches can be built over
// a paged KV store: NewCache with the attention layers' KV caches made by kv.
type PagedArch interface {
	NewCacheKV(kv func(layer, kvHeads, headDim int) (KV, error)) ([]LayerCache, error)
}

// Snapshotter is implemented by recurrent layer caches that can save their
// state and restore it in another sequence (prefix caching of hybrid models).
type Snapshotter interface {
	// Snapshot copies the state (after Len positions).
	Snapshot() LayerSnapshot
	// Restore replaces the state of an empty cache with s.
	Restore(s LayerSnapshot) error
}

// LayerSnapshot is a saved recurrent state.
type LayerSnapshot interface {
	Len() int     // positions it covers
	Bytes() int64 // memory it holds
}

// KVPoolConfig configures a KVPool. The budget is MaxBlocks if set, else
// MaxBytes, else the backend's KVBudgeter, else DefaultKVBytes.
type KVPoolConfig struct {
	BlockSize int   // positions per block
	MaxBlocks int   // budget in blocks (0: from bytes)
	MaxBytes  int64 // budget in bytes (0: backend or default)
	// MaxPositions caps the budget at the blocks this many positions need
	// (0: no cap), so a small model does not reserve DefaultKVBytes.
	MaxPositions int
	// PrefixCache registers full blocks by hash for reuse by later sequences.
	PrefixCache bool
}

// DefaultKVBytes is the KV budget when neither the config nor the backend
// gives one.
const DefaultKVBytes = 2 << 30

// DefaultKVPoolConfig: blocks of 32 positions, prefix cache on.
func DefaultKVPoolConfig() KVPoolConfig { return KVPoolConfig{BlockSize: 32, PrefixCache: true} }

// Validate checks the configuration.
func (c KVPoolConfig) Validate() error {
	switch {
	case c.BlockSize < 1:
		return fmt.Errorf("kv block size %d must be at least 1", c.BlockSize)
	case c.MaxBlocks < 0:
		return fmt.Errorf("kv max blocks %d must not be negative", c.MaxBlocks)
	case c.MaxBytes < 0:
		return fmt.Errorf("kv max bytes %d must not be negative", c.MaxBytes)
	}
	return nil
}

// BlockHashes returns the chained hash of every full block of tokens:
// hash i covers tokens [0, (i+1)*blockSize). FNV-1a 64 over the previous
// hash and the block's token ids (uint32 little endian), so any process can
// compute the same keys.
func BlockHashes(tokens []int, blockSize int) []uint64 {
	return appendHashes(nil, tokens, blockSize)
}

// appendHashes extends hs (the hashes of the first len(hs) blocks of
// tokens) to every full block of tokens.
func appendHashes(hs []uint64, tokens []int, bs int) []uint64 {
	for i := len(hs); (i+1)*bs <= len(tokens); i++ {
		var prev uint64
		if i > 0 {
			prev = hs[i-1]
		}
		hs = append(hs, blockHash(prev, tokens[i*bs:(i+1)*bs]))
	}
	return hs
}

func blockHash(prev uint64, toks []int) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], prev)
	for _, c := range b {
		h = (h ^ uint64(c)) * prime
	}
	for _, t := range toks {
		binary.LittleEndian.PutUint32(b[:4], uint32(t))
		for _, c := range b[:4] {
			h = (h ^ uint64(c)) * prime
		}
	}
	return h
}

// KVPool is a budget of KV blocks shared by the paged caches of one model.
// Safe for concurrent use.
type KVPool struct {
	m      *Model
	cfg    KVPoolConfig
	stores []KVBlocks // per layer; nil for non-attention layers
	bytes  int64      // per block, all layers

	mu         sync.Mutex
	ref        []int32 // per block: caches holding it; -1 = held by a snapshot
	hash       []uint64
	hashed     []bool
	lruElem    []*list.Element
	free       []int
	lru        *list.List // cached blocks (ref 0, hashed), front = oldest
	byHash     map[uint64]int
	snaps      map[int]*snapshot // by the block it ends at
	canSnap    bool              // every non-KV layer is a Snapshotter (or there are none)
	needSnap   bool              // some layer is recurrent: prefixes resume only at snapshots
	snapCached int               // snapshot blocks of cached (evictable) blocks
	stats      KVStats
}

type snapshot struct {
	layers []LayerSnapshot // per layer; nil for KV layers
	blocks []int           // pool blocks paying for it
}

// KVStats are counters of a pool.
type KVStats struct {
	Blocks, BlockSize int
	BlockBytes        int64
	Used              int   // held by caches
	Cached            int   // free but holding a registered prefix block
	Snapshot          int   // paying for recurrent-state snapshots
	Free              int   // empty
	Hits, Lookups     int64 // Attach calls that reused >0 positions / all
	HitTokens         int64 // positions reused
	Evictions         int64
}

// NewKVPool creates a paged KV pool for m's caches. It fails if the backend
// or the architecture lacks paging (PagedKVOps, PagedArch).
func (m *Model) NewKVPool(cfg KVPoolConfig) (*KVPool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pb, ok := m.be.(PagedKVOps)
	if !ok {
		return nil, fmt.Errorf("kv pool: backend %s has no paged KV cache", m.be.Name())
	}
	pa, ok := m.arch.(PagedArch)
	if !ok {
		return nil, fmt.Errorf("kv pool: model type %s has no paged caches", m.cfg.ModelType)
	}
	// Probe the layer layout with a throwaway cache.
	type shape struct{ heads, dim int }
	var shapes []shape
	layers, err := pa.NewCacheKV(func(layer, kvHeads, headDim int) (KV, error) {
		for len(shapes) <= layer {
			shapes = append(shapes, shape{})
		}
		shapes[layer] = shape{kvHeads, headDim}
		return m.be.NewKV(kvHeads, headDim)
	})
	if err != nil {
		return nil, fmt.Errorf("kv pool: %w", err)
	}
	p := &KVPool{m: m, cfg: cfg, canSnap: true}
	for i, l := range layers {
		if _, isKV := l.(KV); isKV && i < len(shapes) && shapes[i].heads > 0 {
			continue
		}
		p.needSnap = true
		if _, ok := l.(Snapshotter); !ok {
			p.canSnap = false
		}
	}
	for _, l := range layers {
		l.Free()
	}
	valueBytes := 4.0
	if vs, ok := m.be.(KVValueSizer); ok {
		valueBytes = vs.KVValueBytes()
	}
	for _, s := range shapes {
		p.bytes += int64(2 * float64(s.heads*s.dim*cfg.BlockSize) * valueBytes)
	}
	if p.bytes == 0 && !m.whole() && p.needSnap && p.canSnap {
		// A pipeline stage of a hybrid model with recurrent layers only:
		// its blocks hold no KV, but they still count positions and carry
		// the prefix cache's hashes and snapshots, so that the stage
		// resumes a cached prefix as the stages around it do. A block is
		// priced as one attention layer's would be (the snapshots' memory
		// is paid in blocks).
		p.bytes = int64(2 * float64(max(m.cfg.NumKeyValueHeads, 1)*max(m.cfg.HeadDim, 1)*cfg.BlockSize) * valueBytes)
	}
	if p.bytes == 0 {
		if !m.whole() {
			return nil, fmt.Errorf("kv pool: stage %v has no attention layers (use per-sequence caches: Model.NewCache)", m.stage)
		}
		return nil, fmt.Errorf("kv pool: model has no attention layers")
	}
	n := cfg.MaxBlocks
	if n == 0 {
		budget := cfg.MaxBytes
		if budget == 0 {
			if kb, ok := m.be.(KVBudgeter); ok {
				budget = kb.KVBudgetBytes()
			}
		}
		if budget == 0 {
			budget = DefaultKVBytes
		}
		n = int(budget / p.bytes)
		if cfg.MaxPositions > 0 {
			n = min(n, (cfg.MaxPositions+cfg.BlockSize-1)/cfg.BlockSize)
		}
	}
	if n < 1 {
		return nil, fmt.Errorf("kv pool: budget too small for one block of %d bytes", p.bytes)
	}
	p.stores = make([]KVBlocks, len(shapes))
	for i, s := range shapes {
		if s.heads == 0 {
			continue
		}
		if p.stores[i], err = pb.NewKVBlocks(s.heads, s.dim, cfg.BlockSize, n); err != nil {
			p.Close()
			return nil, fmt.Errorf("kv pool layer %d: %w", i, err)
		}
	}
	p.ref = make([]int32, n)
	p.hash = make([]uint64, n)
	p.hashed = make([]bool, n)
	p.lruElem = make([]*list.Element, n)
	p.free = make([]int, n)
	for i := range p.free {
		p.free[i] = n - 1 - i // pop from the end: block 0 first
	}
	p.lru = list.New()
	p.byHash = map[uint64]int{}
	p.snaps = map[int]*snapshot{}
	return p, nil
}

// Close frees the storage. Caches of the pool must not be used afterwards.
func (p *KVPool) Close() {
	for _, s := range p.stores {
		if s != nil {
			s.Free()
		}
	}
	p.stores = nil
}

// BlockSize is the number of positions per block.
func (p *KVPool) BlockSize() int { return p.cfg.BlockSize }

// Blocks is the pool's size in blocks.
func (p *KVPool) Blocks() int { return len(p.ref) }

// NeedsSnapshots says whether prefixes resume only at recurrent-state
// snapshots (hybrid models; Cache.SaveSnapshot).
func (p *KVPool) NeedsSnapshots() bool { return p.needSnap && p.canSnap && p.cfg.PrefixCache }

// SnapshotStride is the position multiple at which the serving layer takes
// recurrent-state snapshots: the least common multiple of the block size and
// DeltaNetChunk. There a prompt's recurrent state is made of whole delta-rule
// chunks, the same bits however the prompt was split into calls, so a
// sequence resuming from it computes what it would have computed without it
// (docs/engine.md, "Batch invariance").
func (p *KVPool) SnapshotStride() int {
	a, b := p.cfg.BlockSize, DeltaNetChunk
	for b != 0 {
		a, b = b, a%b
	}
	return p.cfg.BlockSize / a * DeltaNetChunk
}

// BlockBytes is the memory of one block (all attention layers).
func (p *KVPool) BlockBytes() int64 { return p.bytes }

// BlocksFor is the number of blocks n positions occupy.
func (p *KVPool) BlocksFor(n int) int { return (n + p.cfg.BlockSize - 1) / p.cfg.BlockSize }

// Stats returns the pool's counters.
func (p *KVPool) Stats() KVStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Blocks, s.BlockSize, s.BlockBytes = len(p.ref), p.cfg.BlockSize, p.bytes
	s.Cached, s.Free = p.lru.Len(), len(p.free)
	for _, r := range p.ref {
		switch {
		case r > 0:
			s.Used++
		case r < 0:
			s.Snapshot++
		}
	}
	return s
}

// Available is the number of blocks an allocation can get now (free +
// evictable cached blocks).
func (p *KVPool) Available() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.available()
}

// available counts free blocks, cached blocks and the snapshot blocks of
// cached blocks (evicting a cached block frees its snapshot). p.mu held.
func (p *KVPool) available() int { return len(p.free) + p.lru.Len() + p.snapCached }

// alloc takes a block (free first, else the least recently used cached
// block). p.mu held.
func (p *KVPool) alloc() (int, bool) {
	if n := len(p.free); n > 0 {
		id := p.free[n-1]
		p.free = p.free[:n-1]
		p.ref[id] = 1
		return id, true
	}
	e := p.lru.Front()
	if e == nil {
		return 0, false
	}
	id := e.Value.(int)
	p.evict(id)
	p.ref[id] = 1
	return id, true
}

// evict removes cached block id from the LRU and the hash index (with its
// snapshot). p.mu held.
func (p *KVPool) evict(id int) {
	p.lru.Remove(p.lruElem[id])
	p.lruElem[id] = nil
	delete(p.byHash, p.hash[id])
	p.hashed[id] = false
	if s := p.snaps[id]; s != nil {
		delete(p.snaps, id)
		p.snapCached -= len(s.blocks)
		for _, b := range s.blocks {
			p.ref[b] = 0
			p.free = append(p.free, b)
		}
	}
	p.stats.Evictions++
}

// release drops one reference to block id. p.mu held.
func (p *KVPool) release(id int) {
	p.ref[id]--
	if p.ref[id] > 0 {
		return
	}
	p.ref[id] = 0
	if p.hashed[id] {
		p.lruElem[id] = p.lru.PushBack(id)
		if sn := p.snaps[id]; sn != nil {
			p.snapCached += len(sn.blocks)
		}
	} else {
		p.free = append(p.free, id)
	}
}

// retain adds a reference to block id (taking it out of the LRU). p.mu held.
func (p *KVPool) retain(id int) {
	if p.ref[id] == 0 && p.lruElem[id] != nil {
		p.lru.Remove(p.lruElem[id])
		p.lruElem[id] = nil
		if sn := p.snaps[id]; sn != nil {
			p.snapCached -= len(sn.blocks)
		}
	}
	p.ref[id]++
}

// register indexes full block id under h unless another block has it.
// p.mu held.
func (p *KVPool) register(id int, h uint64) {
	if !p.cfg.PrefixCache || p.hashed[id] {
		return
	}
	if _, dup := p.byHash[h]; dup {
		return
	}
	p.byHash[h], p.hash[id], p.hashed[id] = id, h, true
}

// pagedCache is the paged part of a Cache.
type pagedCache struct {
	pool   *KVPool
	table  BlockTable
	tokens []int    // tokens at positions [0, Cache.n)
	hashes []uint64 // chained hashes of the full blocks of tokens
}

// NewCache allocates an empty paged cache for one sequence.
func (p *KVPool) NewCache() (*Cache, error) {
	m := p.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	pc := &pagedCache{pool: p}
	layers, err := m.arch.(PagedArch).NewCacheKV(func(layer, _, _ int) (KV, error) {
		if layer >= len(p.stores) || p.stores[layer] == nil {
			return nil, fmt.Errorf("kv pool: layer %d has no block store", layer)
		}
		return p.stores[layer].View(&pc.table), nil
	})
	if err != nil {
		return nil, err
	}
	return &Cache{m: m, layers: layers, paged: pc}, nil
}

// Paged says whether the cache takes its KV blocks from a pool.
func (c *Cache) Paged() bool { return c.paged != nil }

// Tokens returns the tokens the cache holds (paged caches only; nil else).
func (c *Cache) Tokens() []int {
	if c.paged == nil {
		return nil
	}
	return append([]int(nil), c.paged.tokens...)
}

// Blocks is the number of pool blocks the cache holds.
func (c *Cache) Blocks() int {
	if c.paged == nil {
		return 0
	}
	return len(c.paged.table.Blocks)
}

// Reserve makes sure the cache has blocks for n more positions, allocating
// from the pool (evicting cached prefix blocks if needed). All or nothing:
// on ErrNoKVBlocks nothing is allocated. A non-paged cache always succeeds.
func (c *Cache) Reserve(n int) error {
	pc := c.paged
	if pc == nil {
		return nil
	}
	p := pc.pool
	need := p.BlocksFor(c.n+n) - len(pc.table.Blocks)
	if need <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.available() < need {
		return fmt.Errorf("%w: %d needed, %d available of %d", ErrNoKVBlocks, need, p.available(), len(p.ref))
	}
	for range need {
		id, _ := p.alloc()
		pc.table.Blocks = append(pc.table.Blocks, id)
	}
	return nil
}

// trimBlocks releases blocks past those needed for n positions. p.mu not held.
func (pc *pagedCache) trimBlocks(n int) {
	p := pc.pool
	keep := p.BlocksFor(n)
	if keep >= len(pc.table.Blocks) {
		return
	}
	p.mu.Lock()
	for i := len(pc.table.Blocks) - 1; i >= keep; i-- {
		p.release(pc.table.Blocks[i])
	}
	p.mu.Unlock()
	pc.table.Blocks = pc.table.Blocks[:keep]
}

// truncate cuts the paged state to n positions (n <= Cache.n), copying a
// shared block that later writes would change.
func (pc *pagedCache) truncate(n int) error {
	p := pc.pool
	bs := p.cfg.BlockSize
	pc.trimBlocks(n)
	if n%bs != 0 {
		i := n / bs
		old := pc.table.Blocks[i]
		p.mu.Lock()
		shared := p.ref[old] > 1 || p.hashed[old]
		var id int
		ok := true
		if shared {
			id, ok = p.alloc()
		}
		p.mu.Unlock()
		if !ok {
			return fmt.Errorf("truncate: copy of shared block: %w", ErrNoKVBlocks)
		}
		if shared {
			for _, s := range p.stores {
				if s != nil {
					s.CopyBlock(id, old)
				}
			}
			p.mu.Lock()
			p.release(old)
			p.mu.Unlock()
			pc.table.Blocks[i] = id
		}
	}
	pc.tokens = pc.tokens[:n]
	if len(pc.hashes) > n/bs {
		pc.hashes = pc.hashes[:n/bs]
	}
	return nil
}

// appended records tokens written at the end and registers new full blocks.
func (pc *pagedCache) appended(tokens []int) {
	p := pc.pool
	pc.tokens = append(pc.tokens, tokens...)
	old := len(pc.hashes)
	pc.hashes = appendHashes(pc.hashes, pc.tokens, p.cfg.BlockSize)
	if len(pc.hashes) == old {
		return
	}
	p.mu.Lock()
	for i := old; i < len(pc.hashes); i++ {
		p.register(pc.table.Blocks[i], pc.hashes[i])
	}
	p.mu.Unlock()
}

// Attach starts an empty paged cache with the longest cached prefix of
// tokens, leaving at least one token to compute (the caller needs its
// logits). For models with recurrent layers only prefixes ending at a
// snapshot qualify. It returns the number of positions now in the cache
// (a multiple of the block size, possibly 0).
func (c *Cache) Attach(tokens []int) (int, error) {
	pc := c.paged
	if pc == nil || c.n != 0 {
		return 0, nil
	}
	p := pc.pool
	bs := p.cfg.BlockSize
	hs := BlockHashes(tokens[:max(0, len(tokens)-1)], bs)
	p.mu.Lock()
	p.stats.Lookups++
	if !p.cfg.PrefixCache || (p.needSnap && !p.canSnap) {
		p.mu.Unlock()
		return 0, nil
	}
	var ids []int
	for _, h := range hs {
		id, ok := p.byHash[h]
		if !ok {
			break
		}
		ids = append(ids, id)
	}
	var snap *snapshot
	if p.needSnap {
		for len(ids) > 0 {
			if snap = p.snaps[ids[len(ids)-1]]; snap != nil {
				break
			}
			ids = ids[:len(ids)-1]
		}
	}
	if len(ids) == 0 {
		p.mu.Unlock()
		return 0, nil
	}
	for _, id := range ids {
		p.retain(id)
	}
	p.stats.Hits++
	p.stats.HitTokens += int64(len(ids) * bs)
	p.mu.Unlock()

	n := len(ids) * bs
	if snap != nil {
		for i, l := range c.layers {
			if s := snap.layers[i]; s != nil {
				if err := l.(Snapshotter).Restore(s); err != nil {
					p.mu.Lock()
					for _, id := range ids {
						p.release(id)
					}
					p.mu.Unlock()
					for _, l := range c.layers {
						l.Truncate(0)
					}
					return 0, fmt.Errorf("attach: layer %d: %w", i, err)
				}
			}
		}
	}
	pc.table.Blocks = append(pc.table.Blocks[:0], ids...)
	for _, l := range c.layers {
		if kv, ok := l.(KV); ok {
			setKVLen(kv, n)
		}
	}
	pc.tokens = append(pc.tokens[:0], tokens[:n]...)
	pc.hashes = append(pc.hashes[:0], hs[:len(ids)]...)
	c.n = n
	return n, nil
}

// KVLenSetter is implemented by paged KV views: Attach sets their length to
// the attached prefix.
type KVLenSetter interface {
	SetLen(n int)
}

func setKVLen(kv KV, n int) {
	if s, ok := kv.(KVLenSetter); ok {
		s.SetLen(n)
	}
}

// SaveSnapshot stores the recurrent states of the cache with the block
// ending at its current length, so Attach can resume there. It does nothing
// (false) unless the cache is paged, its length is a positive multiple of
// the block size, that block is registered, has no snapshot yet, and the
// pool can pay for the snapshot's memory with blocks.
func (c *Cache) SaveSnapshot() bool {
	pc := c.paged
	if pc == nil {
		return false
	}
	p := pc.pool
	bs := p.cfg.BlockSize
	if !p.needSnap || !p.canSnap || c.n == 0 || c.n%bs != 0 || len(pc.hashes) < c.n/bs {
		return false
	}
	id := pc.table.Blocks[c.n/bs-1]
	p.mu.Lock()
	ok := p.hashed[id] && p.byHash[p.hash[id]] == id && p.snaps[id] == nil
	p.mu.Unlock()
	if !ok {
		return false
	}
	s := &snapshot{layers: make([]LayerSnapshot, len(c.layers))}
	var bytes int64
	for i, l := range c.layers {
		if sn, ok := l.(Snapshotter); ok {
			s.layers[i] = sn.Snapshot()
			bytes += s.layers[i].Bytes()
		}
	}
	need := int((bytes + p.bytes - 1) / p.bytes)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.available() < need || p.snaps[id] != nil {
		return false
	}
	for range need {
		b, _ := p.alloc()
		p.ref[b] = -1
		s.blocks = append(s.blocks, b)
	}
	// alloc may have evicted id itself only if it was cached (ref 0); it is
	// held by this cache, so it is still registered.
	p.snaps[id] = s
	return true
}

// freePaged releases every block of the cache.
func (pc *pagedCache) free() {
	pc.trimBlocks(0)
	pc.tokens, pc.hashes = nil, nil
}
