package grammar

import (
	"bytes"
	"sort"
	"unicode/utf8"
)

// Vocab is a tokenizer's vocabulary prepared for mask computation: token
// byte strings sorted so that tokens sharing a prefix are walked once.
type Vocab struct {
	tokens [][]byte
	order  []int32 // token ids sorted by bytes (empty tokens left out)
	lcp    []int32 // lcp[i]: common prefix length of order[i-1] and order[i]
	plain  []int32 // plain[i]: tokens[order[i]][plain[i]:] is plain string text (see isPlain)
	eos    []int
	maxLen int // longest token in bytes
}

// NewVocab prepares tokens (tokens[id] = the bytes the token decodes to;
// nil for tokens that must never be generated inside JSON, such as special
// and control tokens) and the end-of-sequence ids, allowed once the
// document is complete.
func NewVocab(tokens [][]byte, eos []int) *Vocab {
	v := &Vocab{tokens: tokens, eos: eos}
	for id, t := range tokens {
		if len(t) > 0 {
			v.order = append(v.order, int32(id))
			v.maxLen = max(v.maxLen, len(t))
		}
	}
	sort.Slice(v.order, func(a, b int) bool {
		return bytes.Compare(tokens[v.order[a]], tokens[v.order[b]]) < 0
	})
	v.lcp = make([]int32, len(v.order))
	v.plain = make([]int32, len(v.order))
	for i, id := range v.order {
		v.plain[i] = int32(plainFrom(tokens[id]))
	}
	for i := 1; i < len(v.order); i++ {
		a, b := tokens[v.order[i-1]], tokens[v.order[i]]
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		v.lcp[i] = int32(n)
	}
	return v
}

// Size is the number of token ids.
func (v *Vocab) Size() int { return len(v.tokens) }

// Mask sets allowed[id] for every token that may come next and clears the
// rest; len(allowed) must be v.Size(). It returns how many are allowed.
func (m *Matcher) Mask(v *Vocab, allowed []bool) int { return m.mask(v, allowed, -1) }

// MaskBudget is Mask for a generation that may produce at most left more
// tokens before its end-of-sequence token: a token is allowed only if the
// document can still be completed within the budget after it, so that the
// output is never cut short (see the package comment). With no budget
// left, only the end of sequence is allowed, once the document is done.
func (m *Matcher) MaskBudget(v *Vocab, allowed []bool, left int) int {
	if left < 1 {
		clear(allowed)
		count := 0
		if m.Done() {
			for _, id := range v.eos {
				if id >= 0 && id < len(allowed) {
					allowed[id] = true
					count++
				}
			}
		}
		return count
	}
	// A token adds at most v.maxLen bytes, each of which can open a value
	// costing at most maxCost: with that much room the budget binds nothing.
	c := m.MinCloseBytes()
	if left-1-c > v.maxLen*(m.g.maxCost+2) || c > left {
		// Plenty of room, or too little for any completion: then the
		// output is cut at the budget as without this rule.
		return m.mask(v, allowed, -1)
	}
	return m.mask(v, allowed, left-1)
}

func (m *Matcher) mask(v *Vocab, allowed []bool, budget int) int {
	clear(allowed)
	g := m.g
	levels := m.levels[:0]
	levels = append(levels, m.states)
	count := 0
	failDepth := -1
	for i, id := range v.order {
		t := v.tokens[id]
		l := int(v.lcp[i])
		if failDepth >= 0 && l > failDepth {
			continue // shares the prefix that already failed
		}
		failDepth = -1
		if len(levels) > l+1 {
			levels = levels[:l+1]
		}
		// levels[d] are the states after t's first d bytes; a plain tail
		// inside an unconstrained string body leaves the state as it is,
		// so it is allowed without stepping (most tokens, inside strings).
		d := len(levels) - 1
		if top := levels[d]; budget < 0 && len(top) == 1 && top[0].k == fStr && top[0].sub == strBody &&
			top[0].n.plain && !collects(top[0]) && int(v.plain[i]) <= d {
			allowed[id] = true
			count++
			continue
		}
		ok := true
		for ; d < len(t); d++ {
			var buf []*frame
			if d+1 < len(m.bufs) {
				buf = m.bufs[d+1][:0]
			}
			s := g.stepAll(levels[d], t[d], buf)
			if len(s) == 0 {
				failDepth, ok = d, false
				break
			}
			for len(m.bufs) <= d+1 {
				m.bufs = append(m.bufs, nil)
			}
			m.bufs[d+1] = s
			levels = append(levels, s)
		}
		if ok && budget >= 0 && g.minClose(levels[len(t)]) > budget {
			// After this token, budget tokens remain for the rest, and a
			// completion of c bytes needs at most c tokens.
			ok = false
		}
		if ok {
			allowed[id] = true
			count++
		}
	}
	m.levels = levels[:0]
	if m.Done() {
		for _, id := range v.eos {
			if id >= 0 && id < len(allowed) {
				allowed[id] = true
				count++
			}
		}
	}
	return count
}

// plainFrom returns the smallest k such that t[k:] leaves a JSON string body
// state unchanged: complete, valid UTF-8 without '"', '\\' or control bytes.
func plainFrom(t []byte) int {
	k := len(t)
	for k > 0 {
		b := t[k-1]
		if b < 0x80 {
			if b < 0x20 || b == '"' || b == '\\' {
				break
			}
			k--
			continue
		}
		// Step back over one whole multi-byte character, if t[k-n:k] is one.
		n := 0
		for j := k - 1; j >= 0 && j >= k-4; j-- {
			if r, size := utf8.DecodeRune(t[j:k]); r != utf8.RuneError && size == k-j {
				n = size
				break
			}
		}
		if n == 0 {
			break
		}
		k -= n
	}
	return k
}

// Accept advances over token id of v.
func (m *Matcher) Accept(v *Vocab, id int) error {
	for _, e := range v.eos {
		if id == e {
			if m.Done() {
				return nil
			}
			return ErrRejected
		}
	}
	if id < 0 || id >= len(v.tokens) || len(v.tokens[id]) == 0 {
		return ErrRejected
	}
	return m.AcceptBytes(v.tokens[id])
}

// byteLevel maps GPT-2 byte-level BPE characters back to bytes.
var byteLevel = func() map[rune]byte {
	m := map[rune]byte{}
	n := 0
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			m[rune(b)] = byte(b)
		} else {
			m[rune(256+n)] = byte(b)
			n++
		}
	}
	return m
}()

// ByteLevelBytes returns the bytes a byte-level BPE token string (as stored
// in tokenizer.json's vocabulary, e.g. "Ġworld") stands for, or nil if the
// string is not byte-level encoded.
func ByteLevelBytes(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := byteLevel[r]
		if !ok {
			return nil
		}
		out = append(out, b)
	}
	return out
}
