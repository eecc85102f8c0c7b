package tokenizer

import (
	"strings"
	"sync"
)

// merge is one BPE merge rule: the pair it applies to is the map key.
type merge struct {
	rank uint32 // lower merges first
	id   int32  // the merged token
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// smallWord is the length (bytes) up to which bpe uses the quadratic scan;
// longer words use a heap. Both give the same result (tested).
const smallWord = 48

// bpe appends the tokens of one pre-tokenized piece (raw bytes) to out.
func (t *Tokenizer) bpe(word string, out []int) []int {
	if len(word) == 1 {
		if id := t.byteTok[word[0]]; id >= 0 {
			out = append(out, int(id))
		}
		return out
	}
	if t.ignoreMerges {
		if id, ok := t.bpeVocab[word]; ok {
			return append(out, int(id))
		}
	}
	if ids, ok := t.cache.get(word); ok {
		for _, id := range ids {
			out = append(out, int(id))
		}
		return out
	}
	var ids []int32
	if len(word) <= smallWord {
		ids = t.mergeSmall(word)
	} else {
		ids = t.mergeHeap(word)
	}
	t.cache.put(word, ids)
	for _, id := range ids {
		out = append(out, int(id))
	}
	return out
}

const noRank = ^uint32(0)

// mergeSmall applies the merges to a short word: repeatedly the pair of
// lowest rank, leftmost on ties (the order Hugging Face's BPE uses).
func (t *Tokenizer) mergeSmall(word string) []int32 {
	var symBuf [smallWord]int32
	var rankBuf [smallWord]merge
	syms := symBuf[:0]
	for i := 0; i < len(word); i++ {
		if id := t.byteTok[word[i]]; id >= 0 {
			syms = append(syms, id)
		}
	}
	ranks := rankBuf[:0]
	for i := 0; i+1 < len(syms); i++ {
		ranks = append(ranks, t.lookup(syms[i], syms[i+1]))
	}
	for {
		best := -1
		bestRank := noRank
		for i, m := range ranks {
			if m.rank < bestRank {
				best, bestRank = i, m.rank
			}
		}
		if best < 0 {
			break
		}
		syms[best] = ranks[best].id
		syms = append(syms[:best+1], syms[best+2:]...)
		ranks = append(ranks[:best], ranks[best+1:]...)
		if best > 0 {
			ranks[best-1] = t.lookup(syms[best-1], syms[best])
		}
		if best < len(ranks) {
			ranks[best] = t.lookup(syms[best], syms[best+1])
		}
	}
	return append([]int32(nil), syms...)
}

func (t *Tokenizer) lookup(a, b int32) merge {
	if m, ok := t.merges[pairKey(a, b)]; ok {
		return m
	}
	return merge{rank: noRank}
}

// heapItem is a candidate merge of the symbol at pos with its successor.
type heapItem struct {
	rank uint32
	pos  int32
	id   int32
}

func (a heapItem) less(b heapItem) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

type mergeHeap []heapItem

func (h *mergeHeap) push(x heapItem) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() heapItem {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s[l].less(s[m]) {
			m = l
		}
		if r < n && s[r].less(s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// mergeHeap is mergeSmall in O(n log n) for long words (a line of Chinese
// text is one piece): symbols in a linked list, candidate merges in a heap,
// stale candidates skipped when popped.
func (t *Tokenizer) mergeHeap(word string) []int32 {
	type symbol struct{ id, prev, next int32 }
	syms := make([]symbol, 0, len(word))
	for i := 0; i < len(word); i++ {
		if id := t.byteTok[word[i]]; id >= 0 {
			n := int32(len(syms))
			syms = append(syms, symbol{id: id, prev: n - 1, next: n + 1})
		}
	}
	if len(syms) == 0 {
		return nil
	}
	syms[len(syms)-1].next = -1
	h := make(mergeHeap, 0, len(syms))
	for i := 0; i+1 < len(syms); i++ {
		if m := t.lookup(syms[i].id, syms[i+1].id); m.rank != noRank {
			h.push(heapItem{m.rank, int32(i), m.id})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		s := &syms[top.pos]
		if s.id < 0 || s.next < 0 {
			continue
		}
		nx := s.next
		if m := t.lookup(s.id, syms[nx].id); m.rank != top.rank || m.id != top.id {
			continue // stale: one side has been merged since
		}
		s.id = top.id
		s.next = syms[nx].next
		syms[nx].id = -1
		if s.next >= 0 {
			syms[s.next].prev = top.pos
		}
		if s.prev >= 0 {
			if m := t.lookup(syms[s.prev].id, s.id); m.rank != noRank {
				h.push(heapItem{m.rank, s.prev, m.id})
			}
		}
		if s.next >= 0 {
			if m := t.lookup(s.id, syms[s.next].id); m.rank != noRank {
				h.push(heapItem{m.rank, top.pos, m.id})
			}
		}
	}
	var out []int32
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}

// wordCache remembers the tokens of recent words. It is emptied when full,
// which keeps memory bounded and costs little: word frequencies are skewed.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

const (
	cacheEntries = 1 << 16
	cacheMaxWord = 256 // bytes; longer words are not cached
)

func (c *wordCache) get(w string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[w]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	if len(w) > cacheMaxWord {
		return
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= cacheEntries {
		c.m = make(map[string][]int32, 1024)
	}
	c.m[strings.Clone(w)] = ids // clone: w points into the caller's text
	c.mu.Unlock()
}
