package serve

import (
	"container/list"
	"sync"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/engine/prefixkey"
)

// maxPrefixKeys bounds the prefix-routing keys an Engine remembers.
const maxPrefixKeys = 1024

// PrefixSummary is what a worker advertises for prefix-aware routing
// (docs/notes/batching.md): the engine/prefixkey keys of the requests it
// served most recently, and how much KV room it has.
type PrefixSummary struct {
	Keys       []uint64 `json:"keys"`        // most recent first
	BlockSize  int      `json:"block_size"`  // KV positions per block (0: no paged pool)
	Blocks     int      `json:"blocks"`      // KV pool size
	FreeBlocks int      `json:"free_blocks"` // free or evictable now
}

// PrefixSummary returns the keys of up to max recently served prefixes
// (each request contributes one key per message prefix / prompt chunk; the
// deepest is the most recent) and the pool's room.
func (e *Engine) PrefixSummary(max int) PrefixSummary {
	s := PrefixSummary{Keys: e.keys.recent(max)}
	if e.pool != nil {
		st := e.pool.Stats()
		s.BlockSize, s.Blocks, s.FreeBlocks = st.BlockSize, st.Blocks, st.Free+st.Cached
	}
	return s
}

// recordKeys remembers the routing keys of a job about to be served.
func (e *Engine) recordKeys(job *api.Job) {
	var keys []uint64
	switch {
	case job.Chat != nil:
		keys = prefixkey.Chat(job.Chat)
	case job.Completion != nil:
		keys = prefixkey.Completion(job.Completion)
	}
	e.keys.add(keys)
}

// prefixKeys is an LRU set of keys.
type prefixKeys struct {
	mu  sync.Mutex
	l   *list.List // front = oldest
	els map[uint64]*list.Element
}

func (p *prefixKeys) add(keys []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l == nil {
		p.l, p.els = list.New(), map[uint64]*list.Element{}
	}
	for _, k := range keys {
		if el := p.els[k]; el != nil {
			p.l.MoveToBack(el)
			continue
		}
		p.els[k] = p.l.PushBack(k)
		if p.l.Len() > maxPrefixKeys {
			old := p.l.Front()
			delete(p.els, old.Value.(uint64))
			p.l.Remove(old)
		}
	}
}

func (p *prefixKeys) recent(max int) []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []uint64
	if p.l == nil {
		return out
	}
	for el := p.l.Back(); el != nil && len(out) < max; el = el.Prev() {
		out = append(out, el.Value.(uint64))
	}
	return out
}
