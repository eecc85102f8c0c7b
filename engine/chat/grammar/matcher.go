package grammar

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/macpool/macpool/engine/chat/regex"
)

// The matcher is a nondeterministic pushdown automaton: its state is a set
// of stacks (one per way of reading the text so far, e.g. per anyOf branch
// still alive), each stack a chain of immutable frames, so that a step
// returns new frames sharing the unchanged parents and the mask search can
// branch from any state without copying. Stacks are deduplicated after
// every byte and at most maxStates are kept.
const maxStates = 256

type fkind uint8

const (
	fRoot  fkind = iota // bottom: sub 0 = value pending, 1 = value done
	fValue              // a value of n is expected (leading whitespace allowed)
	fObj
	fArr
	fStr
	fNum
	fLit
)

// object sub-states
const (
	objOpen  = iota // after '{'
	objKey          // a key is being read (child frame)
	objColon        // key done, expecting ':'
	objValue        // value being read (child frame)
	objAfter        // after a value: ',' or '}'
	objNext         // after ',': expecting a key
)

// array sub-states
const (
	arrOpen  = iota // after '['
	arrValue        // item being read (child frame)
	arrAfter        // ',' or ']'
	arrNext         // after ','
)

// string sub-states
const (
	strBody  = iota
	strEsc   // after '\'
	strHex   // left hex digits of \uXXXX to read
	strUTF8  // left continuation bytes to read
	strSurr  // a high surrogate escape was read: expecting '\'
	strSurrU // expecting 'u' of the low surrogate
)

// number sub-states
const (
	numSign = iota // after '-'
	numZero
	numInt
	numDot
	numFrac
	numExp
	numExpSign
	numExpDigits
)

type frame struct {
	parent  *frame
	n       *node
	k       fkind
	sub     uint8
	ws      uint8
	key     bool  // fStr: an object key
	free    bool  // fStr key: no listed name starts with it (its text is not kept)
	counted bool  // fArr: the item being read counts for contains
	left    int8  // fStr: hex digits or UTF-8 bytes left
	ulen    int8  // fStr: length of the UTF-8 sequence being read
	cnt     int32 // fArr: items; fObj: keys; fStr: code points
	aux     int32 // fArr: items counted for contains; fObj: last listed property read (-1 none)
	cur     int32 // fObj: listed property of the current value, -1 for other keys
	r       rune  // fStr: code point being decoded
	hi      rune  // fStr: pending high surrogate
	lit     string
	seen    []uint64 // fObj: listed properties read (copy on write)
	rs      []int32  // fStr: regex states (n.res, then key patterns); copy on write
	vn      *node    // fObj: schema of the current value
	items   []string // fArr with uniqueItems: canonical scalar items so far
}

func (f *frame) with() *frame { g := *f; return &g }

func isWS(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }

func (g *Grammar) space(f *frame, out []*frame) []*frame {
	if int(f.ws) >= g.ws {
		return out
	}
	h := f.with()
	h.ws++
	return append(out, h)
}

func (g *Grammar) step(f *frame, b byte, out []*frame) []*frame {
	switch f.k {
	case fValue:
		if isWS(b) {
			return g.space(f, out)
		}
		return g.start(f.parent, f.n, b, out)
	case fObj:
		return g.stepObject(f, b, out)
	case fArr:
		return g.stepArray(f, b, out)
	case fStr:
		return g.stepString(f, b, out)
	case fNum:
		return g.stepNumber(f, b, out)
	case fLit:
		return g.stepLit(f, b, out)
	}
	return out // nothing follows the document
}

// start begins a value of n with its first byte b; parent is the frame the
// value belongs to (already in its "value being read" state).
func (g *Grammar) start(parent *frame, n *node, b byte, out []*frame) []*frame {
	switch n.kind {
	case kUnion:
		for _, a := range n.alts {
			out = g.start(parent, a, b, out)
		}
	case kAny:
		var m *node
		switch {
		case b == '{':
			m = anyObject
		case b == '[':
			m = anyArray
		case b == '"':
			m = stringNode
		case b == '-' || b >= '0' && b <= '9':
			m = numberNode
		case b == 't' || b == 'f':
			m = boolNode
		case b == 'n':
			m = nullNode
		default:
			return out
		}
		return g.start(parent, m, b, out)
	case kObject:
		if b == '{' {
			out = append(out, &frame{parent: parent, n: n, k: fObj, sub: objOpen, aux: -1, cur: -1, seen: make([]uint64, len(n.required))})
		}
	case kArray:
		if b == '[' {
			out = append(out, &frame{parent: parent, n: n, k: fArr, sub: arrOpen})
		}
	case kString:
		if b == '"' {
			out = append(out, newString(parent, n, false))
		}
	case kNumber:
		f := &frame{parent: parent, n: n, k: fNum, lit: string(b)}
		switch {
		case b == '-':
			f.sub = numSign
		case b == '0':
			f.sub = numZero
		case b >= '1' && b <= '9':
			f.sub = numInt
		default:
			return out
		}
		if n.num != nil && !n.num.info(f.lit).ok {
			return out
		}
		out = append(out, f)
	case kLiteral:
		f := &frame{parent: parent, n: n, k: fLit, lit: string(b)}
		return g.litAdvance(f, out)
	}
	return out
}

func newString(parent *frame, n *node, key bool) *frame {
	f := &frame{parent: parent, n: n, k: fStr, key: key}
	nr := len(n.res)
	if key {
		nr += len(parent.n.patterns)
	}
	if nr > 0 {
		f.rs = make([]int32, nr)
		for i, re := range n.res {
			f.rs[i] = re.Start()
		}
		if key {
			for i, p := range parent.n.patterns {
				f.rs[len(n.res)+i] = p.re.Start()
			}
		}
	}
	return f
}

// collects reports whether a string frame must keep its text.
func collects(f *frame) bool {
	return f.key && !f.free || len(f.n.notLits) > 0 || f.parent != nil && f.parent.k == fArr && f.parent.n.unique
}

// plainOK reports whether string frame f, in its body, accepts any text
// (it may still record it): an unconstrained string, or a key of an object
// that takes any other key.
func plainOK(f *frame) bool {
	if f.k != fStr || f.sub != strBody || !f.n.plain {
		return false
	}
	if f.key {
		o := f.parent.n
		return o.additional != nil && len(o.patterns) == 0
	}
	return len(f.n.notLits) == 0 && !(f.parent != nil && f.parent.k == fArr && f.parent.n.unique)
}

// stable reports whether plain text (ASCII without quote, backslash or
// control bytes, or whole UTF-8 characters) leaves string frame f as it
// is: an unconstrained string, or a key that can no longer be a listed
// name and has no patterns to follow.
func stable(f *frame) bool {
	if f.sub != strBody || !f.n.plain || collects(f) {
		return false
	}
	return !f.key || len(f.parent.n.patterns) == 0
}

// canonical returns the text a scalar value is compared by (uniqueItems,
// not const/enum).
func canonical(f *frame) string {
	switch f.k {
	case fStr:
		return encodeCompact(f.lit)
	case fNum:
		if r, ok := new(big.Rat).SetString(f.lit); ok {
			if r.IsInt() {
				return r.Num().String()
			}
			return r.RatString()
		}
	}
	return f.lit
}

func canonicalLit(s string) string {
	if r, ok := new(big.Rat).SetString(s); ok && s != "" && (s[0] == '-' || s[0] >= '0' && s[0] <= '9') {
		if r.IsInt() {
			return r.Num().String()
		}
		return r.RatString()
	}
	return s
}

// completed advances parent p past the value of child that just ended.
func (g *Grammar) completed(p, child *frame) (*frame, bool) {
	var text string
	scalar := child != nil && (child.k == fStr || child.k == fNum || child.k == fLit)
	if scalar && (len(child.n.notLits) > 0 || p.k == fArr && p.n.unique) {
		text = canonical(child)
		for _, l := range child.n.notLits {
			if canonicalLit(l) == text {
				return nil, false
			}
		}
	}
	q := p.with()
	q.ws = 0
	switch p.k {
	case fRoot:
		q.sub = 1
	case fObj:
		q.sub = objAfter
		q.vn, q.cur = nil, -1
	case fArr:
		if p.n.unique && scalar {
			if slices.Contains(p.items, text) {
				return nil, false
			}
			q.items = append(p.items[:len(p.items):len(p.items)], text)
		}
		q.sub = arrAfter
		q.cnt++
		if p.counted {
			q.aux = min(q.aux+1, containsCap(p.n))
			q.counted = false
		}
	}
	return q, true
}

// containsCap is where the contains count saturates (keeps states few).
func containsCap(n *node) int32 {
	if n.maxContains >= 0 {
		return int32(n.maxContains) + 1
	}
	return int32(n.minContains)
}

// litAdvance checks a literal frame after a byte was appended: some literal
// must start with lit; one that equals it and cannot be extended ends the value.
func (g *Grammar) litAdvance(f *frame, out []*frame) []*frame {
	prefix, exact, longer := false, false, false
	for _, l := range f.n.lits {
		if len(l) >= len(f.lit) && l[:len(f.lit)] == f.lit {
			prefix = true
			if len(l) == len(f.lit) {
				exact = true
			} else {
				longer = true
			}
		}
	}
	switch {
	case !prefix:
		return out
	case exact && !longer:
		if q, ok := g.completed(f.parent, f); ok {
			out = append(out, q)
		}
		return out
	}
	return append(out, f)
}

func litExact(f *frame) bool { return slices.Contains(f.n.lits, f.lit) }

func (g *Grammar) stepLit(f *frame, b byte, out []*frame) []*frame {
	h := f.with()
	h.lit += string([]byte{b})
	out = g.litAdvance(h, out)
	// The literal may have ended (e.g. enum [1, 12] after "1"): the byte
	// then belongs to the parent.
	if litExact(f) {
		if q, ok := g.completed(f.parent, f); ok {
			out = g.step(q, b, out)
		}
	}
	return out
}

func (g *Grammar) stepArray(f *frame, b byte, out []*frame) []*frame {
	n := f.n
	switch f.sub {
	case arrOpen, arrNext:
		if isWS(b) {
			return g.space(f, out)
		}
		if b == ']' && f.sub == arrOpen && arrClosable(f) {
			if q, ok := g.completed(f.parent, f); ok {
				out = append(out, q)
			}
			return out
		}
		if n.maxItems >= 0 && int(f.cnt) >= n.maxItems {
			return out
		}
		it, ct := n.itemAt(int(f.cnt))
		if it != nil {
			h := f.with()
			h.sub, h.ws, h.counted = arrValue, 0, false
			out = g.start(h, it, b, out)
		}
		if ct != nil && (n.maxContains < 0 || int(f.aux) < n.maxContains) {
			h := f.with()
			h.sub, h.ws, h.counted = arrValue, 0, true
			out = g.start(h, ct, b, out)
		}
	case arrAfter:
		switch {
		case isWS(b):
			return g.space(f, out)
		case b == ',' && arrMore(f):
			h := f.with()
			h.sub, h.ws = arrNext, 0
			out = append(out, h)
		case b == ']' && arrClosable(f):
			if q, ok := g.completed(f.parent, f); ok {
				out = append(out, q)
			}
		}
	}
	return out
}

func arrClosable(f *frame) bool {
	return int(f.cnt) >= f.n.minItems && (!f.n.hasContains || int(f.aux) >= f.n.minContains)
}

func arrMore(f *frame) bool {
	if f.n.maxItems >= 0 && int(f.cnt) >= f.n.maxItems {
		return false
	}
	it, ct := f.n.itemAt(int(f.cnt))
	return it != nil || ct != nil
}

func isSeen(f *frame, i int) bool { return f.seen[i/64]&(1<<(i%64)) != 0 }

// needed returns the listed properties an object must have: required
// ones and, transitively, the dependencies (dependentRequired) of those and
// of the properties read.
func needed(f *frame) []uint64 {
	n := f.n
	if !n.hasDeps {
		return n.required
	}
	set := slices.Clone(n.required)
	for i := range set {
		set[i] |= f.seen[i]
	}
	for changed := true; changed; {
		changed = false
		for i := range n.props {
			if set[i/64]&(1<<(i%64)) == 0 {
				continue
			}
			for _, j := range n.deps[i] {
				if set[j/64]&(1<<(j%64)) == 0 {
					set[j/64] |= 1 << (j % 64)
					changed = true
				}
			}
		}
	}
	return set
}

func has(set []uint64, j int) bool { return set[j/64]&(1<<(j%64)) != 0 }

// candidate reports whether listed property i may be the next key.
func (g *Grammar) candidate(f *frame, i int) bool {
	if isSeen(f, i) || f.n.props[i].n.kind == kNever {
		return false
	}
	if !g.ordered {
		return true
	}
	if int32(i) <= f.aux {
		return false
	}
	need := needed(f)
	for j := int(f.aux) + 1; j < i; j++ {
		if has(need, j) {
			return false // would skip a required property for good
		}
	}
	for _, j := range f.n.deps[i] {
		if j < i && !isSeen(f, j) {
			return false
		}
	}
	return true
}

func freeKeys(n *node) bool { return n.additional != nil || len(n.patterns) > 0 }

func (g *Grammar) keyPossible(f *frame) bool {
	n := f.n
	if n.maxProps >= 0 && int(f.cnt) >= n.maxProps {
		return false
	}
	if freeKeys(n) {
		return true
	}
	for i := range n.props {
		if g.candidate(f, i) {
			return true
		}
	}
	return false
}

func objClosable(f *frame) bool {
	if int(f.cnt) < f.n.minProps {
		return false
	}
	need := needed(f)
	for j := range f.n.props {
		if !isSeen(f, j) && has(need, j) {
			return false
		}
	}
	return true
}

func (g *Grammar) stepObject(f *frame, b byte, out []*frame) []*frame {
	n := f.n
	switch f.sub {
	case objOpen, objNext:
		if isWS(b) {
			return g.space(f, out)
		}
		if b == '}' && f.sub == objOpen && objClosable(f) {
			if q, ok := g.completed(f.parent, f); ok {
				out = append(out, q)
			}
			return out
		}
		if b != '"' || !g.keyPossible(f) {
			return out
		}
		h := f.with()
		h.sub, h.ws = objKey, 0
		return append(out, newString(h, n.keyNode, true))
	case objColon:
		if isWS(b) {
			return g.space(f, out)
		}
		if b != ':' {
			return out
		}
		h := f.with()
		h.sub, h.ws = objValue, 0
		return append(out, &frame{parent: h, n: f.vn, k: fValue})
	case objAfter:
		switch {
		case isWS(b):
			return g.space(f, out)
		case b == ',' && g.keyPossible(f):
			h := f.with()
			h.sub, h.ws = objNext, 0
			out = append(out, h)
		case b == '}' && objClosable(f):
			if q, ok := g.completed(f.parent, f); ok {
				out = append(out, q)
			}
		}
	}
	return out
}

// keyDone advances object o past the key k just read.
func (g *Grammar) keyDone(o, k *frame) (*frame, bool) {
	n := o.n
	name := k.lit
	q := o.with()
	q.sub, q.ws = objColon, 0
	q.cnt++
	if i, ok := n.propIndex[name]; ok && !k.free {
		if !g.candidate(o, i) {
			return nil, false
		}
		q.cur, q.vn = int32(i), n.props[i].n
		q.seen = slices.Clone(o.seen)
		q.seen[i/64] |= 1 << (i % 64)
		if g.ordered {
			q.aux = int32(i)
		}
		return q, true
	}
	mask := 0
	for i := range n.patterns {
		if n.patterns[i].re.Accepting(k.rs[len(k.n.res)+i]) {
			mask |= 1 << i
		}
	}
	vn := n.additional
	if mask != 0 {
		if len(n.combos) > 0 {
			vn = n.combos[mask&(len(n.combos)-1)]
			if mask&(len(n.combos)-1) == 0 {
				// Only patterns past the fourth matched: the first of them.
				for i := range n.patterns {
					if mask&(1<<i) != 0 {
						vn = n.patterns[i].n
						break
					}
				}
			}
		}
	}
	if vn == nil || vn.kind == kNever {
		return nil, false
	}
	q.cur, q.vn = -1, vn
	return q, true
}

func anyNamePrefix(n *node, s string) bool {
	for _, p := range n.props {
		if strings.HasPrefix(p.name, s) {
			return true
		}
	}
	return false
}

// keyFeasible reports whether a key being read can still become an
// acceptable key of its object.
func (g *Grammar) keyFeasible(k *frame) bool {
	o := k.parent
	n := o.n
	if n.additional != nil {
		return true
	}
	for i := range n.patterns {
		if k.rs[len(k.n.res)+i] != regex.Dead {
			return true
		}
	}
	if k.free {
		return false
	}
	for i, p := range n.props {
		if len(p.name) >= len(k.lit) && p.name[:len(k.lit)] == k.lit && g.candidate(o, i) {
			return true
		}
	}
	return false
}

func (g *Grammar) stepString(f *frame, b byte, out []*frame) []*frame {
	if b >= 0x20 && b < 0x80 && b != '"' && b != '\\' && stable(f) {
		return append(out, f) // the common case: no new state
	}
	h := f.with()
	switch f.sub {
	case strBody:
		switch {
		case b == '"':
			if !g.strClosable(f) {
				return out
			}
			var q *frame
			var ok bool
			if f.key {
				q, ok = g.keyDone(f.parent, f)
			} else {
				q, ok = g.completed(f.parent, f)
			}
			if ok {
				out = append(out, q)
			}
			return out
		case b == '\\':
			h.sub = strEsc
			if !g.rangeFeasible(h, 0, utf8.MaxRune) {
				return out
			}
			return append(out, h)
		case b < 0x20:
			return out
		case b < 0x80:
			return g.strRune(h, rune(b), out)
		case b >= 0xC2 && b <= 0xDF:
			h.sub, h.left, h.ulen, h.r = strUTF8, 1, 2, rune(b&0x1F)
		case b >= 0xE0 && b <= 0xEF:
			h.sub, h.left, h.ulen, h.r = strUTF8, 2, 3, rune(b&0x0F)
		case b >= 0xF0 && b <= 0xF4:
			h.sub, h.left, h.ulen, h.r = strUTF8, 3, 4, rune(b&0x07)
		default:
			return out
		}
		if !g.partialFeasible(h, b) {
			return out
		}
		return append(out, h)
	case strEsc:
		var r rune
		switch b {
		case '"', '\\', '/':
			r = rune(b)
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			h.sub, h.left, h.r = strHex, 4, 0
			return append(out, h)
		default:
			return out
		}
		h.sub = strBody
		return g.strRune(h, r, out)
	case strHex:
		var d rune
		switch {
		case b >= '0' && b <= '9':
			d = rune(b - '0')
		case b >= 'a' && b <= 'f':
			d = rune(b-'a') + 10
		case b >= 'A' && b <= 'F':
			d = rune(b-'A') + 10
		default:
			return out
		}
		h.r = h.r<<4 | d
		if h.left--; h.left > 0 {
			lo, hi := h.r<<(4*uint(h.left)), (h.r+1)<<(4*uint(h.left))-1
			if h.hi != 0 {
				// Only a low surrogate may follow a high one.
				if hi < 0xDC00 || lo > 0xDFFF {
					return out
				}
				return append(out, h)
			}
			if lo >= 0xDC00 && hi <= 0xDFFF {
				return out
			}
			if lo >= 0xD800 && hi <= 0xDBFF {
				lo, hi = 0x10000, 0x10FFFF // a high surrogate: a supplementary character
			}
			if !g.rangeFeasible(h, lo, hi) {
				return out
			}
			return append(out, h)
		}
		r := h.r
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if h.hi != 0 {
				return out
			}
			h.hi, h.sub = r, strSurr
			return append(out, h)
		case r >= 0xDC00 && r < 0xE000:
			if h.hi == 0 {
				return out // a lone low surrogate
			}
			r = 0x10000 + (h.hi-0xD800)<<10 + (r - 0xDC00)
			h.hi = 0
		case h.hi != 0:
			return out
		}
		h.sub = strBody
		return g.strRune(h, r, out)
	case strSurr:
		if b != '\\' {
			return out
		}
		h.sub = strSurrU
		return append(out, h)
	case strSurrU:
		if b != 'u' {
			return out
		}
		h.sub, h.left, h.r = strHex, 4, 0
		return append(out, h)
	case strUTF8:
		if b < 0x80 || b > 0xBF {
			return out
		}
		h.r = h.r<<6 | rune(b&0x3F)
		if h.left--; h.left > 0 {
			if !g.partialFeasible(h, b) {
				return out
			}
			return append(out, h)
		}
		r := h.r
		if !utf8.ValidRune(r) || utf8.RuneLen(r) != int(h.ulen) {
			return out
		}
		h.sub = strBody
		if collects(h) {
			h.lit += string([]byte{b}) // the earlier bytes are in already
		}
		return g.strRuneRaw(h, r, out, true)
	}
	return out
}

// strRune records one decoded character of a string frame h (already a
// copy) and keeps it if the string can still satisfy its constraints.
func (g *Grammar) strRune(h *frame, r rune, out []*frame) []*frame {
	return g.strRuneRaw(h, r, out, false)
}

// partialFeasible checks a string frame h in the middle of a multi-byte
// character (b its latest byte): some character with these leading bytes
// must be acceptable, or the mask would allow a dead end.
func (g *Grammar) partialFeasible(h *frame, b byte) bool {
	if collects(h) {
		h.lit += string([]byte{b})
	}
	lo, hi, ok := utf8State{left: h.left, ulen: h.ulen, r: h.r}.codeRange()
	if !ok {
		return false
	}
	return g.rangeFeasible(h, lo, hi)
}

// rangeFeasible reports whether some character in [lo, hi] may come next
// in string frame h.
func (g *Grammar) rangeFeasible(h *frame, lo, hi rune) bool {
	if h.n.plain && !h.key {
		return true
	}
	if h.n.maxLen >= 0 && int(h.cnt) >= h.n.maxLen {
		return false
	}
	for i, re := range h.n.res {
		if !re.AcceptsRange(h.rs[i], lo, hi) {
			return false
		}
	}
	if h.key && h.parent.n.additional == nil {
		o := h.parent
		for i := range o.n.patterns {
			if o.n.patterns[i].re.AcceptsRange(h.rs[len(h.n.res)+i], lo, hi) {
				return true
			}
		}
		for i, p := range o.n.props {
			if h.free || !strings.HasPrefix(p.name, h.lit) || !g.candidate(o, i) {
				continue
			}
			if h.sub == strUTF8 {
				return true // lit holds the bytes read so far
			}
			if r, size := utf8.DecodeRuneInString(p.name[len(h.lit):]); size > 0 && r >= lo && r <= hi {
				return true
			}
		}
		return false
	}
	return true
}

func (g *Grammar) strRuneRaw(h *frame, r rune, out []*frame, raw bool) []*frame {
	n := h.n
	h.cnt++
	if n.maxLen >= 0 && int(h.cnt) > n.maxLen {
		return out
	}
	if len(h.rs) > 0 {
		rs := make([]int32, len(h.rs))
		for i, re := range n.res {
			s := re.Step(h.rs[i], r)
			if s == regex.Dead {
				return out
			}
			if n.maxLen >= 0 {
				if mc, _ := re.MinChars(s); mc > n.maxLen-int(h.cnt) {
					return out
				}
			}
			rs[i] = s
		}
		if h.key {
			for i, p := range h.parent.n.patterns {
				rs[len(n.res)+i] = p.re.Step(h.rs[len(n.res)+i], r)
			}
		}
		h.rs = rs
	}
	if collects(h) && !raw {
		h.lit += string(r)
	}
	if h.key && !h.free && !raw {
		h.free = !anyNamePrefix(h.parent.n, h.lit)
		if h.free {
			h.lit = ""
		}
	}
	if h.key && !g.keyFeasible(h) {
		return out
	}
	return append(out, h)
}

func (g *Grammar) strClosable(f *frame) bool {
	if int(f.cnt) < f.n.minLen {
		return false
	}
	for i, re := range f.n.res {
		if !re.Accepting(f.rs[i]) {
			return false
		}
	}
	return true
}

func numFinal(f *frame) bool {
	switch f.sub {
	case numZero, numInt, numFrac, numExpDigits:
		return f.n.num == nil || f.n.num.final(f.lit)
	}
	return false
}

func (g *Grammar) stepNumber(f *frame, b byte, out []*frame) []*frame {
	digit := b >= '0' && b <= '9'
	nc := f.n.num
	next := -1
	switch f.sub {
	case numSign:
		if b == '0' {
			next = numZero
		} else if digit {
			next = numInt
		}
	case numZero, numInt:
		switch {
		case digit && f.sub == numInt:
			next = numInt
		case b == '.' && (nc == nil || !nc.integer):
			// Integers are generated without a fraction (1, never 1.0).
			next = numDot
		case (b == 'e' || b == 'E') && nc == nil:
			next = numExp
		}
	case numDot, numFrac:
		if digit {
			next = numFrac
		} else if (b == 'e' || b == 'E') && f.sub == numFrac && nc == nil {
			next = numExp
		}
	case numExp:
		if b == '+' || b == '-' {
			next = numExpSign
		} else if digit {
			next = numExpDigits
		}
	case numExpSign, numExpDigits:
		if digit {
			next = numExpDigits
		}
	}
	if next >= 0 && len(f.lit)+1+numNeed(next) <= MaxNumberLen {
		h := f.with()
		h.sub = uint8(next)
		h.lit = f.lit + string(b)
		if nc == nil || nc.info(h.lit).ok {
			out = append(out, h)
		}
	}
	if numFinal(f) {
		if q, ok := g.completed(f.parent, f); ok {
			out = g.step(q, b, out)
		}
	}
	return out
}

// numNeed is the fewest bytes that make a number in sub-state sub final.
func numNeed(sub int) int {
	switch sub {
	case numSign, numDot, numExp, numExpSign:
		return 1
	}
	return 0
}

// canEnd reports whether the text so far is a complete document.
func (g *Grammar) canEnd(f *frame) bool {
	switch f.k {
	case fRoot:
		return f.sub == 1
	case fNum:
		if !numFinal(f) {
			return false
		}
	case fLit:
		if !litExact(f) {
			return false
		}
	default:
		return false
	}
	q, ok := g.completed(f.parent, f)
	return ok && g.canEnd(q)
}

func sameFrame(a, b *frame) bool {
	for a != b {
		if a == nil || b == nil {
			return false
		}
		if a.n != b.n || a.k != b.k || a.sub != b.sub || a.ws != b.ws || a.key != b.key || a.free != b.free ||
			a.counted != b.counted || a.left != b.left || a.cnt != b.cnt || a.aux != b.aux ||
			a.ulen != b.ulen || a.cur != b.cur || a.r != b.r || a.hi != b.hi || a.lit != b.lit || a.vn != b.vn ||
			!slices.Equal(a.seen, b.seen) || !slices.Equal(a.rs, b.rs) || !slices.Equal(a.items, b.items) {
			return false
		}
		a, b = a.parent, b.parent
	}
	return true
}

// dedupe removes repeated stacks in place and caps their number.
func dedupe(s []*frame) []*frame {
	if len(s) < 2 {
		return s
	}
	out := s[:0]
	for _, f := range s {
		dup := false
		for _, o := range out {
			if sameFrame(f, o) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, f)
			if len(out) == maxStates {
				break
			}
		}
	}
	return out
}

// stepAll advances every stack of states over b into out.
func (g *Grammar) stepAll(states []*frame, b byte, out []*frame) []*frame {
	for _, s := range states {
		out = g.step(s, b, out)
	}
	return dedupe(out)
}

// Matcher follows one generation through a Grammar. Not safe for concurrent use.
type Matcher struct {
	g      *Grammar
	states []*frame

	// Scratch space of the mask search.
	levels [][]*frame
	bufs   [][]*frame
}

// ErrRejected is returned by Accept for text the grammar does not allow.
var ErrRejected = errors.New("grammar: text not allowed")

// NewMatcher starts a generation.
func (g *Grammar) NewMatcher() *Matcher {
	root := &frame{k: fRoot}
	return &Matcher{g: g, states: []*frame{{parent: root, n: g.root, k: fValue}}}
}

// AcceptBytes advances over generated bytes; on ErrRejected the state is unchanged.
func (m *Matcher) AcceptBytes(b []byte) error {
	s := m.states
	for i, c := range b {
		if s = m.g.stepAll(s, c, nil); len(s) == 0 {
			return fmt.Errorf("%w: byte %d (%q) of %q", ErrRejected, i, c, b)
		}
	}
	m.states = s
	return nil
}

// Allows reports whether bytes b may come next (without consuming them).
func (m *Matcher) Allows(b []byte) bool {
	s := m.states
	for _, c := range b {
		if s = m.g.stepAll(s, c, nil); len(s) == 0 {
			return false
		}
	}
	return true
}

// Done reports whether the text so far is a complete document, so that an
// end-of-sequence token may come next.
func (m *Matcher) Done() bool { return m.g.anyEnd(m.states) }

func (g *Grammar) anyEnd(states []*frame) bool {
	for _, s := range states {
		if g.canEnd(s) {
			return true
		}
	}
	return false
}
