package grammar

import (
	"errors"
	"fmt"
)

// frame kinds
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
	objOpen   = iota // after '{'
	objKey           // inside a fixed-property key (lit holds the bytes so far)
	objKeyStr        // a free key string is being read (child frame)
	objColon         // key done, expecting ':'
	objValue         // value being read (child frame)
	objAfter         // after a value: ',' or '}'
	objNext          // after ',': expecting a key
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
	strBody = iota
	strEsc
	strHex  // cnt hex digits left
	strUTF8 // cnt continuation bytes left
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

// frame is one level of the automaton's stack. Frames are immutable: a step
// returns new frames sharing the unchanged parents, so the mask search can
// branch from any state without copying the stack.
type frame struct {
	parent *frame
	n      *node
	k      fkind
	sub    uint8
	ws     uint8    // whitespace bytes in the current gap
	cnt    int      // array items / hex or UTF-8 bytes left / number length / current property
	lit    string   // literal or key bytes so far
	seen   []uint64 // object: properties seen (copy on write)
}

func (f *frame) with() *frame { g := *f; return &g }

// completed advances parent p past a value that just ended.
func completed(p *frame) *frame {
	g := p.with()
	g.ws = 0
	switch p.k {
	case fRoot:
		g.sub = 1
	case fObj:
		if p.sub == objKeyStr {
			g.sub = objColon
		} else {
			g.sub = objAfter
		}
	case fArr:
		g.sub = arrAfter
		g.cnt++
	}
	return g
}

func isWS(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }

// space consumes a whitespace byte in a gap of f.
func space(f *frame) (*frame, bool) {
	if f.ws >= MaxWhitespace {
		return nil, false
	}
	g := f.with()
	g.ws++
	return g, true
}

// start begins a value of n with its first byte b; parent is the frame the
// value belongs to (already in its "value being read" state).
func start(parent *frame, n *node, b byte) (*frame, bool) {
	switch n.kind {
	case kUnion:
		for _, a := range n.alts {
			if a.firstBytes().has(b) {
				return start(parent, a, b)
			}
		}
		return nil, false
	case kAny:
		switch {
		case b == '{':
			return start(parent, anyObject, b)
		case b == '[':
			return start(parent, anyArray, b)
		case b == '"':
			return start(parent, stringNode, b)
		case b == '-' || b >= '0' && b <= '9':
			return start(parent, numberNode, b)
		case b == 't' || b == 'f':
			return start(parent, boolNode, b)
		case b == 'n':
			return start(parent, nullNode, b)
		}
		return nil, false
	case kObject:
		if b != '{' {
			return nil, false
		}
		return &frame{parent: parent, n: n, k: fObj, sub: objOpen, seen: make([]uint64, len(n.required))}, true
	case kArray:
		if b != '[' {
			return nil, false
		}
		return &frame{parent: parent, n: n, k: fArr, sub: arrOpen}, true
	case kString:
		if b != '"' {
			return nil, false
		}
		return &frame{parent: parent, n: n, k: fStr, sub: strBody}, true
	case kNumber, kInteger:
		f := &frame{parent: parent, n: n, k: fNum, cnt: 1}
		switch {
		case b == '-':
			f.sub = numSign
		case b == '0':
			f.sub = numZero
		case b >= '1' && b <= '9':
			f.sub = numInt
		default:
			return nil, false
		}
		return f, true
	case kLiteral:
		f := &frame{parent: parent, n: n, k: fLit, lit: string(b)}
		return litAdvance(f)
	}
	return nil, false
}

// litAdvance checks a literal frame after a byte was appended: some literal
// must start with lit; one that equals it and cannot be extended ends the value.
func litAdvance(f *frame) (*frame, bool) {
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
		return nil, false
	case exact && !longer:
		return completed(f.parent), true
	}
	return f, true
}

func litExact(f *frame) bool {
	for _, l := range f.n.lits {
		if l == f.lit {
			return true
		}
	}
	return false
}

func numFinal(f *frame) bool {
	switch f.sub {
	case numZero, numInt, numFrac, numExpDigits:
		return true
	}
	return false
}

// step consumes byte b in state f.
func step(f *frame, b byte) (*frame, bool) {
	switch f.k {
	case fRoot:
		if f.sub == 1 && isWS(b) {
			return space(f)
		}
		return nil, false

	case fValue:
		if isWS(b) {
			return space(f)
		}
		return start(f.parent, f.n, b)

	case fObj:
		return stepObject(f, b)

	case fArr:
		n := f.n
		switch f.sub {
		case arrOpen, arrNext:
			if isWS(b) {
				return space(f)
			}
			if b == ']' && f.sub == arrOpen && n.minItems == 0 {
				return completed(f.parent), true
			}
			if n.maxItems >= 0 && f.cnt >= n.maxItems {
				return nil, false
			}
			g := f.with()
			g.sub, g.ws = arrValue, 0
			return start(g, n.items, b)
		case arrAfter:
			switch {
			case isWS(b):
				return space(f)
			case b == ',' && (n.maxItems < 0 || f.cnt < n.maxItems):
				g := f.with()
				g.sub, g.ws = arrNext, 0
				return g, true
			case b == ']' && f.cnt >= n.minItems:
				return completed(f.parent), true
			}
		}
		return nil, false

	case fStr:
		return stepString(f, b)

	case fNum:
		return stepNumber(f, b)

	case fLit:
		g := f.with()
		g.lit += string(b)
		if h, ok := litAdvance(g); ok {
			return h, true
		}
		// The literal may have ended (e.g. enum [1, 12] after "1"): the
		// byte then belongs to the parent.
		if litExact(f) {
			return step(completed(f.parent), b)
		}
		return nil, false
	}
	return nil, false
}

func stepObject(f *frame, b byte) (*frame, bool) {
	n := f.n
	switch f.sub {
	case objOpen, objNext:
		if isWS(b) {
			return space(f)
		}
		if b == '}' && f.sub == objOpen && requiredDone(f) {
			return completed(f.parent), true
		}
		if b != '"' {
			return nil, false
		}
		g := f.with()
		g.ws = 0
		if n.free != nil {
			g.sub = objKeyStr
			return &frame{parent: g, n: stringNode, k: fStr, sub: strBody}, true
		}
		if !anyPropLeft(f) {
			return nil, false
		}
		g.sub, g.lit = objKey, ""
		return g, true
	case objKey:
		if b == '"' {
			for i, p := range n.props {
				if p.name == f.lit && !isSeen(f, i) {
					g := f.with()
					g.sub, g.cnt, g.lit = objColon, i, ""
					g.seen = append([]uint64(nil), f.seen...)
					g.seen[i/64] |= 1 << (i % 64)
					return g, true
				}
			}
			return nil, false
		}
		lit := f.lit + string(b)
		for i, p := range n.props {
			if len(p.name) >= len(lit) && p.name[:len(lit)] == lit && !isSeen(f, i) {
				g := f.with()
				g.lit = lit
				return g, true
			}
		}
		return nil, false
	case objColon:
		if isWS(b) {
			return space(f)
		}
		if b != ':' {
			return nil, false
		}
		g := f.with()
		g.sub, g.ws = objValue, 0
		vn := n.free
		if vn == nil {
			vn = n.props[f.cnt].n
		}
		return &frame{parent: g, n: vn, k: fValue}, true
	case objAfter:
		switch {
		case isWS(b):
			return space(f)
		case b == ',' && (n.free != nil || anyPropLeft(f)):
			g := f.with()
			g.sub, g.ws = objNext, 0
			return g, true
		case b == '}' && requiredDone(f):
			return completed(f.parent), true
		}
	}
	return nil, false
}

func isSeen(f *frame, i int) bool { return f.seen[i/64]&(1<<(i%64)) != 0 }

func requiredDone(f *frame) bool {
	for i, r := range f.n.required {
		if f.seen[i]&r != r {
			return false
		}
	}
	return true
}

func anyPropLeft(f *frame) bool {
	for i := range f.n.props {
		if !isSeen(f, i) {
			return true
		}
	}
	return false
}

func stepString(f *frame, b byte) (*frame, bool) {
	if f.sub == strBody && b >= 0x20 && b < 0x80 && b != '"' && b != '\\' {
		return f, true // the common case: no new state
	}
	g := f.with()
	switch f.sub {
	case strBody:
		switch {
		case b == '"':
			return completed(f.parent), true
		case b == '\\':
			g.sub = strEsc
		case b < 0x80:
			return nil, false
		case b >= 0xC2 && b <= 0xDF:
			g.sub, g.cnt = strUTF8, 1
		case b >= 0xE0 && b <= 0xEF:
			g.sub, g.cnt = strUTF8, 2
		case b >= 0xF0 && b <= 0xF4:
			g.sub, g.cnt = strUTF8, 3
		default:
			return nil, false
		}
	case strEsc:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			g.sub = strBody
		case 'u':
			g.sub, g.cnt = strHex, 4
		default:
			return nil, false
		}
	case strHex:
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F') {
			return nil, false
		}
		if g.cnt--; g.cnt == 0 {
			g.sub = strBody
		}
	case strUTF8:
		if b < 0x80 || b > 0xBF {
			return nil, false
		}
		if g.cnt--; g.cnt == 0 {
			g.sub = strBody
		}
	}
	return g, true
}

func stepNumber(f *frame, b byte) (*frame, bool) {
	digit := b >= '0' && b <= '9'
	integer := f.n.kind == kInteger
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
		case b == '.' && !integer:
			next = numDot
		case (b == 'e' || b == 'E') && !integer:
			next = numExp
		}
	case numDot, numFrac:
		if digit {
			next = numFrac
		} else if (b == 'e' || b == 'E') && f.sub == numFrac {
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
	if next >= 0 {
		if f.cnt >= MaxNumberLen {
			return nil, false
		}
		g := f.with()
		g.sub, g.cnt = uint8(next), f.cnt+1
		return g, true
	}
	if numFinal(f) {
		return step(completed(f.parent), b)
	}
	return nil, false
}

// canEnd reports whether the text so far is a complete document.
func canEnd(f *frame) bool {
	switch f.k {
	case fRoot:
		return f.sub == 1
	case fNum:
		return numFinal(f) && canEnd(completed(f.parent))
	case fLit:
		return litExact(f) && canEnd(completed(f.parent))
	}
	return false
}

// Matcher follows one generation through a Grammar. Not safe for concurrent use.
type Matcher struct {
	g     *Grammar
	state *frame
}

// ErrRejected is returned by Accept for text the grammar does not allow.
var ErrRejected = errors.New("grammar: text not allowed")

// NewMatcher starts a generation.
func (g *Grammar) NewMatcher() *Matcher {
	root := &frame{k: fRoot}
	return &Matcher{g: g, state: &frame{parent: root, n: g.root, k: fValue}}
}

// AcceptBytes advances over generated bytes; on ErrRejected the state is unchanged.
func (m *Matcher) AcceptBytes(b []byte) error {
	s := m.state
	for i, c := range b {
		var ok bool
		if s, ok = step(s, c); !ok {
			return fmt.Errorf("%w: byte %d (%q) of %q", ErrRejected, i, c, b)
		}
	}
	m.state = s
	return nil
}

// Allows reports whether bytes b may come next (without consuming them).
func (m *Matcher) Allows(b []byte) bool {
	s := m.state
	for _, c := range b {
		var ok bool
		if s, ok = step(s, c); !ok {
			return false
		}
	}
	return true
}

// Done reports whether the text so far is a complete document, so that an
// end-of-sequence token may come next.
func (m *Matcher) Done() bool { return canEnd(m.state) }
