package grammar

import (
	"bytes"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Vocab is a tokenizer's vocabulary prepared for mask computation: token
// byte strings sorted so that tokens sharing a prefix are walked once,
// indexed by first byte so that whole groups are skipped when their first
// byte is refused, and classified once as they read inside a string:
// inside a string that takes any text, the tokens that stay in it are
// allowed without a walk.
type Vocab struct {
	tokens [][]byte
	eos    []int
	maxLen int // longest token in bytes

	all      tokenSet
	quoted   tokenSet // tokens that end a string (an unescaped '"')
	plainIn  tokenSet // inStr tokens without a backslash
	escIn    tokenSet // inStr tokens with one
	inStr    []bool   // inStr[id]: the token continues a string body without ending it
	inStrIDs []int32  // the ids with inStr set
	pend     []uint8  // pend[id]: bytes an inStr token leaves pending (inside an escape or character)
	nch      []int32  // nch[id]: code points an inStr token completes
	nInStr   int
}

type tokenSet struct {
	order []int32 // token ids sorted by bytes (empty tokens left out)
	lcp   []int32 // lcp[i]: common prefix length of order[i-1] and order[i]
	plain []int32 // plain[i]: tokens[order[i]][plain[i]:] is plain string text (see plainFrom)
	first [257]int32
}

func newTokenSet(tokens [][]byte, ids []int32) tokenSet {
	ts := tokenSet{order: ids}
	ts.lcp = make([]int32, len(ids))
	ts.plain = make([]int32, len(ids))
	for i, id := range ids {
		ts.plain[i] = int32(plainFrom(tokens[id]))
	}
	for i := 1; i < len(ids); i++ {
		a, b := tokens[ids[i-1]], tokens[ids[i]]
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		ts.lcp[i] = int32(n)
	}
	// first[b]..first[b+1] are the tokens starting with byte b.
	j := 0
	for b := 0; b <= 256; b++ {
		for j < len(ids) && int(tokens[ids[j]][0]) < b {
			j++
		}
		ts.first[b] = int32(j)
	}
	return ts
}

// NewVocab prepares tokens (tokens[id] = the bytes the token decodes to;
// nil for tokens that must never be generated inside JSON, such as special
// and control tokens) and the end-of-sequence ids, allowed once the
// document is complete.
func NewVocab(tokens [][]byte, eos []int) *Vocab {
	v := &Vocab{tokens: tokens, eos: eos, inStr: make([]bool, len(tokens)), pend: make([]uint8, len(tokens)), nch: make([]int32, len(tokens))}
	var order []int32
	for id, t := range tokens {
		if len(t) > 0 {
			order = append(order, int32(id))
			v.maxLen = max(v.maxLen, len(t))
		}
	}
	sort.Slice(order, func(a, b int) bool {
		return bytes.Compare(tokens[order[a]], tokens[order[b]]) < 0
	})
	// Classify every token as it reads inside an unconstrained string:
	// the result does not depend on anything else.
	var quoted []int32
	g := &Grammar{root: stringNode}
	counting := &node{kind: kString, maxLen: -1} // not plain: counts code points
	for _, id := range order {
		f := &frame{parent: &frame{k: fRoot}, n: counting, k: fStr}
		in, ended := true, false
		for _, c := range tokens[id] {
			next := g.step(f, c, nil)
			if len(next) == 0 {
				in = false
				break
			}
			if f = next[0]; f.k != fStr {
				ended = true
				break
			}
		}
		switch {
		case ended:
			quoted = append(quoted, id)
		case in:
			v.inStr[id] = true
			v.inStrIDs = append(v.inStrIDs, id)
			v.nInStr++
			v.nch[id] = f.cnt
			switch f.sub {
			case strEsc:
				v.pend[id] = 1 // a short escape (the strings this serves take one)
			case strHex, strUTF8:
				v.pend[id] = uint8(f.left)
			case strSurr:
				v.pend[id] = 6
			case strSurrU:
				v.pend[id] = 5
			}
		}
	}
	v.all = newTokenSet(tokens, order)
	v.quoted = newTokenSet(tokens, quoted)
	var plainIn, escIn []int32
	for _, id := range v.inStrIDs {
		if bytes.IndexByte(tokens[id], '\\') >= 0 {
			escIn = append(escIn, id)
		} else {
			plainIn = append(plainIn, id)
		}
	}
	v.plainIn = newTokenSet(tokens, plainIn)
	v.escIn = newTokenSet(tokens, escIn)
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
	set := &v.all
	count := 0
	if fastStrings && len(m.states) == 1 && plainOK(m.states[0]) {
		// Inside a string that takes any text: the tokens that stay in
		// it are allowed whatever they spell; only those that end it need
		// a walk.
		set = &v.quoted
		if budget < 0 {
			copy(allowed, v.inStr)
			count = v.nInStr
		} else {
			count = m.inStringBudget(v, allowed, budget)
		}
	}
	if f := m.states[0]; set == &v.all && (budget < 0 || fastStrings) && len(m.states) == 1 && f.k == fStr && f.sub == strBody &&
		!f.key && len(f.n.res) == 0 && !collects(f) {
		// A string with length bounds only: a token fits by its count of
		// code points (one more if it ends inside a character or escape),
		// and a budget by what it leaves pending, the characters minLength
		// still wants, the closing quote and the rest of the document.
		room := costInf
		if budget >= 0 {
			room = budget - (&coster{g: m.g}).after(f.parent) - 1
		}
		for _, id := range v.inStrIDs {
			n := int(f.cnt) + int(v.nch[id])
			if v.pend[id] > 0 {
				n++
			}
			if f.n.maxLen >= 0 && n > f.n.maxLen {
				continue
			}
			if budget >= 0 && int(v.pend[id])+max(f.n.minLen-int(f.cnt)-int(v.nch[id]), 0) > room {
				continue
			}
			allowed[id] = true
			count++
		}
		set = &v.quoted
	}
	if set == &v.all && fastString(m) {
		// A constrained string whose state repeats (a pattern's automaton
		// state): the plain tokens that stay inside it are remembered per
		// state (see instring.go); escapes and the tokens that end it are
		// walked.
		cs := &coster{g: m.g, memo: map[*frame]int{}}
		count = m.maskInString(v, m.inString(v), allowed, budget, cs)
		count += m.walk(v, &v.escIn, allowed, budget)
		set = &v.quoted
	}
	count += m.walk(v, set, allowed, budget)
	if m.Done() {
		for _, id := range v.eos {
			if id >= 0 && id < len(allowed) && !allowed[id] {
				allowed[id] = true
				count++
			}
		}
	}
	return count
}

// cacheable reports whether the tokens allowed inside string frame f
// depend only on its node, automaton states and count of characters:
// nothing collected, not a key.
func cacheable(f *frame) bool {
	return f.k == fStr && f.sub == strBody && !f.key && f.n.strCache != nil && !collects(f)
}

type tokenCache struct {
	m sync.Map // inStrKey → []int32
	n atomic.Int32
}

type inStrKey struct {
	v  *Vocab
	rs string
}

// maxStrCache bounds the automaton states whose token lists a string node
// keeps.
const maxStrCache = 64

// inStringBudget allows the tokens that stay inside the string the single
// state is reading and leave a completion of at most budget bytes: for a
// string, the cost now plus what the token leaves pending (the string's
// text does not change its cost); for a key, the cost of an unlisted key
// or, while the text can still become a listed name, that of the state
// after the token.
func (m *Matcher) inStringBudget(v *Vocab, allowed []bool, budget int) int {
	f := m.states[0]
	cs := &coster{g: m.g, memo: map[*frame]int{}}
	count := 0
	if !f.key || f.free {
		base := cs.minClose(m.states)
		for _, id := range v.inStrIDs {
			if base+int(v.pend[id]) <= budget {
				allowed[id] = true
				count++
			}
		}
		return count
	}
	freeKey := f.with()
	freeKey.free, freeKey.lit = true, ""
	free := cs.closeCost(freeKey)
	// The rest of each listed name the key may still become, by first
	// byte: a token keeps the key a name prefix only if its bytes (those
	// before a pending character) begin one of them.
	var rest [256][][]byte
	for _, p := range f.parent.n.props {
		if len(p.name) > len(f.lit) && strings.HasPrefix(p.name, f.lit) {
			r := []byte(p.name[len(f.lit):])
			rest[r[0]] = append(rest[r[0]], r)
		}
	}
	litPrefix := anyNamePrefix(f.parent.n, f.lit)
	for _, id := range v.inStrIDs {
		t := v.tokens[id]
		c := free + int(v.pend[id])
		u := t[:len(t)-min(int(v.pend[id]), len(t))]
		prefix := len(u) == 0 && litPrefix
		if len(u) > 0 {
			for _, r := range rest[u[0]] {
				if bytes.HasPrefix(r, u) {
					prefix = true
					break
				}
			}
		}
		if prefix {
			s := []*frame{f}
			for _, b := range t {
				if s = m.g.stepAll(s, b, nil); len(s) == 0 {
					break
				}
			}
			if len(s) == 0 {
				continue
			}
			c = cs.minClose(s)
		}
		if c <= budget {
			allowed[id] = true
			count++
		}
	}
	return count
}

// walk sets allowed for the tokens of set the grammar accepts (with a
// budget ≥ 0, only those after which the document can be completed in
// budget tokens) and returns how many.
func (m *Matcher) walk(v *Vocab, set *tokenSet, allowed []bool, budget int) int {
	g := m.g
	cs := &coster{g: g}
	if budget >= 0 {
		cs.memo = map[*frame]int{}
	}
	count := 0
	levels := m.levels[:0]
	for b := 0; b < 256; b++ {
		lo, hi := int(set.first[b]), int(set.first[b+1])
		if lo == hi || !m.allowsByte(byte(b)) {
			continue
		}
		levels = append(levels[:0], m.states)
		failDepth := -1
		for i := lo; i < hi; i++ {
			id := set.order[i]
			t := v.tokens[id]
			l := 0
			if i > lo {
				l = int(set.lcp[i])
			}
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
			if top := levels[d]; d > 0 && len(top) == 1 && top[0].k == fStr && stable(top[0]) && int(set.plain[i]) <= d &&
				(budget < 0 || cs.minClose(top) <= budget) {
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
			if ok && budget >= 0 && cs.minClose(levels[len(t)]) > budget {
				// After this token, budget tokens remain for the rest, and a
				// completion of c bytes needs at most c tokens.
				ok = false
			}
			if ok {
				allowed[id] = true
				count++
			}
		}
	}
	m.levels = levels[:0]
	return count
}

// allowsByte reports whether some stack accepts byte b next.
func (m *Matcher) allowsByte(b byte) bool {
	var buf [8]*frame
	for _, s := range m.states {
		if len(m.g.step(s, b, buf[:0])) > 0 {
			return true
		}
	}
	return false
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
