// Package regex compiles ECMA-262 regular expressions (the dialect of JSON
// Schema's "pattern") into automata over code points that a constrained
// decoder can step one character at a time, ask whether the text so far
// matches, and ask how many characters at least are still needed.
//
// The source is translated to RE2 syntax (\uXXXX, \u{…}, \cX, [^], \d \w
// \s as ECMA defines them) and compiled with regexp/syntax into an NFA; a
// DFA over sets of NFA states is built lazily and cached, so stepping is a
// map lookup after warm-up. Constructs that are not regular —
// backreferences, lookahead and lookbehind — and word boundaries (which
// need the next character) are refused with an error naming the construct.
package regex

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Dead is the state from which no text matches.
const Dead int32 = -1

// Regex is a compiled expression. It is safe for concurrent use: the lazy
// DFA cache is guarded by a mutex.
type Regex struct {
	src      string
	search   bool // JSON Schema semantics: the pattern may match anywhere
	prog     *syntax.Prog
	dist     []int // dist[pc]: fewest characters from pc to a match
	distByte []int // the same in bytes of their JSON string encoding

	mu     sync.Mutex
	states []*dstate
	index  map[string]int32

	neg *complement // set for Complement's result, which uses none of the above
}

type dstate struct {
	pcs    []uint32       // NFA threads waiting for a character, sorted
	accept bool           // the text so far matches (at end of text)
	all    bool           // a match was found; any continuation matches (search)
	next   map[rune]int32 // non-ASCII transitions
	ascii  [128]int32     // ASCII transitions, as state+1 (0: not built yet)
	min    int            // fewest further characters to a match
	minB   int            // the same in JSON-encoded bytes
}

// ErrUnsupported wraps refusals of non-regular constructs.
var ErrUnsupported = errors.New("regex: not a regular construct")

// Compile compiles an ECMA-262 pattern with JSON Schema semantics: it
// matches a string when it matches some substring (anchor with ^…$).
func Compile(pattern string) (*Regex, error) { return compile(pattern, true) }

// CompileFull compiles a pattern that must match the whole string.
func CompileFull(pattern string) (*Regex, error) { return compile(pattern, false) }

// MustCompileFull is CompileFull for patterns written in this program.
func MustCompileFull(pattern string) *Regex {
	r, err := CompileFull(pattern)
	if err != nil {
		panic(err)
	}
	return r
}

func compile(pattern string, search bool) (*Regex, error) {
	src, err := translate(pattern)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	re = re.Simplify()
	if hasWordBoundary(re) {
		return nil, fmt.Errorf("pattern %q: word boundary \\b or \\B: %w", pattern, ErrUnsupported)
	}
	prog, err := syntax.Compile(re)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	if len(prog.Inst) > 1<<16 {
		return nil, fmt.Errorf("pattern %q: automaton of %d states is too large", pattern, len(prog.Inst))
	}
	r := &Regex{src: pattern, search: search, prog: prog, index: map[string]int32{}}
	r.computeDist()
	return r, nil
}

func hasWordBoundary(re *syntax.Regexp) bool {
	if re.Op == syntax.OpWordBoundary || re.Op == syntax.OpNoWordBoundary {
		return true
	}
	for _, s := range re.Sub {
		if hasWordBoundary(s) {
			return true
		}
	}
	return false
}

// String returns the source pattern.
func (r *Regex) String() string { return r.src }

// translate rewrites ECMA-262 syntax that RE2 spells differently and
// refuses what RE2 cannot express.
func translate(p string) (string, error) {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\':
			if i+1 >= len(p) {
				return "", errors.New("trailing backslash")
			}
			e := p[i+1]
			i++
			switch {
			case e >= '1' && e <= '9' && !inClass:
				return "", fmt.Errorf("backreference \\%c: %w", e, ErrUnsupported)
			case e == 'k' && i+1 < len(p) && p[i+1] == '<':
				return "", fmt.Errorf("named backreference \\k<…>: %w", ErrUnsupported)
			case e == 'u':
				r, n, err := unicodeEscape(p[i+1:])
				if err != nil {
					return "", err
				}
				i += n
				writeRune(&b, r)
			case e == 'x' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]):
				b.WriteString(`\x` + p[i+1:i+3])
				i += 2
			case e == 'c' && i+1 < len(p) && (p[i+1]|0x20) >= 'a' && (p[i+1]|0x20) <= 'z':
				writeRune(&b, rune(p[i+1]%32))
				i++
			case e == 'd':
				if inClass {
					b.WriteString(`0-9`)
				} else {
					b.WriteString(`[0-9]`)
				}
			case e == 'D':
				if inClass {
					b.WriteString(`\x00-/:-\x{10FFFF}`)
				} else {
					b.WriteString(`[^0-9]`)
				}
			case e == 'w':
				if inClass {
					b.WriteString(`0-9A-Za-z_`)
				} else {
					b.WriteString(`[0-9A-Za-z_]`)
				}
			case e == 'W':
				if inClass {
					b.WriteString(`\x00-/:-@\[-\^\x60\{-\x{10FFFF}`)
				} else {
					b.WriteString(`[^0-9A-Za-z_]`)
				}
			case e == 's':
				if inClass {
					b.WriteString(ecmaSpace)
				} else {
					b.WriteString(`[` + ecmaSpace + `]`)
				}
			case e == 'S':
				if inClass {
					// A negated set inside a class has no RE2 spelling; the
					// complement of ECMA's white space as ranges.
					b.WriteString(notSpace)
				} else {
					b.WriteString(`[^` + ecmaSpace + `]`)
				}
			case e == 'b' && inClass:
				b.WriteString(`\x08`)
			case e == '0':
				b.WriteString(`\x00`)
			case e == 'p' || e == 'P':
				b.WriteByte('\\')
				b.WriteByte(e)
				if i+1 < len(p) && p[i+1] == '{' {
					end := strings.IndexByte(p[i+1:], '}')
					if end < 0 {
						return "", errors.New(`bad \p{…} class`)
					}
					b.WriteString(p[i+1 : i+2+end])
					i += end + 1
				}
			case e == '/' || e == '-':
				b.WriteString(`\` + string(e))
			case e < 0x80 && !isAlnum(e):
				b.WriteString(`\` + string(e))
			case e == 'b' || e == 'B' || e == 'n' || e == 'r' || e == 't' || e == 'f' || e == 'v' || e == 'A' || e == 'z':
				b.WriteString(`\` + string(e))
			default:
				// Identity escape of a letter (allowed without the u flag).
				b.WriteByte(e)
			}
		case inClass:
			if c == ']' {
				inClass = false
			} else if c == '[' {
				b.WriteString(`\[`)
				continue
			}
			b.WriteByte(c)
		case c == '[':
			if strings.HasPrefix(p[i:], "[^]") {
				b.WriteString(`[\x00-\x{10FFFF}]`)
				i += 2
				continue
			}
			if strings.HasPrefix(p[i:], "[]") {
				b.WriteString(`[^\x00-\x{10FFFF}]`)
				i++
				continue
			}
			inClass = true
			b.WriteByte(c)
			if i+1 < len(p) && p[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' {
				b.WriteString(`\]`)
				i++
			}
		case c == '(' && strings.HasPrefix(p[i:], "(?="):
			return "", fmt.Errorf("lookahead (?=…): %w", ErrUnsupported)
		case c == '(' && strings.HasPrefix(p[i:], "(?!"):
			return "", fmt.Errorf("negative lookahead (?!…): %w", ErrUnsupported)
		case c == '(' && strings.HasPrefix(p[i:], "(?<="):
			return "", fmt.Errorf("lookbehind (?<=…): %w", ErrUnsupported)
		case c == '(' && strings.HasPrefix(p[i:], "(?<!"):
			return "", fmt.Errorf("negative lookbehind (?<!…): %w", ErrUnsupported)
		case c == '.':
			// ECMA's dot excludes the four line terminators.
			b.WriteString(`[^\n\r\x{2028}\x{2029}]`)
		case c == '$':
			b.WriteString(`\z`)
		case c == '^':
			b.WriteString(`\A`)
		case c == '{':
			// A brace that does not start a quantifier is a literal in ECMA.
			if j := quantEnd(p, i); j > 0 {
				b.WriteString(p[i:j])
				i = j - 1
			} else {
				b.WriteString(`\{`)
			}
		case c == '}':
			b.WriteString(`\}`)
		default:
			b.WriteByte(c)
		}
	}
	if inClass {
		return "", errors.New("unterminated character class")
	}
	return b.String(), nil
}

// ECMA-262 WhiteSpace and LineTerminator code points.
const ecmaSpace = `\t\n\x0B\f\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}`
const notSpace = `\x00-\x08\x0E-\x1F!-\x{9F}\x{A1}-\x{167F}\x{1681}-\x{1FFF}\x{200B}-\x{2027}\x{202A}-\x{202E}\x{2030}-\x{205E}\x{2060}-\x{2FFF}\x{3001}-\x{FEFE}\x{FF00}-\x{10FFFF}`

func quantEnd(p string, i int) int {
	j := i + 1
	digits := 0
	for j < len(p) && p[j] >= '0' && p[j] <= '9' {
		j++
		digits++
	}
	if digits == 0 {
		return -1
	}
	if j < len(p) && p[j] == ',' {
		j++
		for j < len(p) && p[j] >= '0' && p[j] <= '9' {
			j++
		}
	}
	if j < len(p) && p[j] == '}' {
		return j + 1
	}
	return -1
}

func unicodeEscape(s string) (rune, int, error) {
	if strings.HasPrefix(s, "{") {
		end := strings.IndexByte(s, '}')
		if end < 0 {
			return 0, 0, errors.New(`bad \u{…} escape`)
		}
		v, err := strconv.ParseUint(s[1:end], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return 0, 0, errors.New(`bad \u{…} escape`)
		}
		return rune(v), end + 1, nil
	}
	if len(s) < 4 {
		return 0, 0, errors.New(`bad \u escape`)
	}
	v, err := strconv.ParseUint(s[:4], 16, 32)
	if err != nil {
		return 0, 0, errors.New(`bad \u escape`)
	}
	r := rune(v)
	// A surrogate pair written as two escapes is one code point.
	if r >= 0xD800 && r < 0xDC00 && len(s) >= 10 && s[4] == '\\' && s[5] == 'u' {
		if lo, err := strconv.ParseUint(s[6:10], 16, 32); err == nil && lo >= 0xDC00 && lo < 0xE000 {
			return 0x10000 + (r-0xD800)<<10 + rune(lo-0xDC00), 10, nil
		}
	}
	return r, 4, nil
}

func writeRune(b *strings.Builder, r rune) {
	fmt.Fprintf(b, `\x{%X}`, r)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// EncLen is the number of bytes r takes inside a compact JSON string.
func EncLen(r rune) int {
	switch {
	case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20:
		return 6
	case r < 0x80:
		return 1
	case r >= 0xD800 && r < 0xE000:
		return 6 // lone surrogates only as escapes
	}
	return utf8.RuneLen(r)
}

// cheapest returns the rune of an instruction with the shortest JSON
// encoding, preferring a plain letter, and that length.
func cheapest(in *syntax.Inst) (rune, int) {
	switch in.Op {
	case syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
		return 'a', 1
	case syntax.InstRune1:
		return in.Rune[0], EncLen(in.Rune[0])
	}
	if len(in.Rune) == 1 {
		return in.Rune[0], EncLen(in.Rune[0])
	}
	best, bestLen := rune(-1), 1<<30
	for i := 0; i+1 < len(in.Rune); i += 2 {
		lo, hi := in.Rune[i], in.Rune[i+1]
		for _, r := range []rune{lo, 'a', 'A', '0', ' ', hi} {
			if r < lo || r > hi {
				continue
			}
			if l := EncLen(r); l < bestLen || l == bestLen && r == 'a' {
				best, bestLen = r, l
			}
		}
		if lo > 0x20 && lo < 0x80 && lo != '"' && lo != '\\' && bestLen > 1 {
			best, bestLen = lo, 1
		}
	}
	if best < 0 {
		return 0, 1 << 30
	}
	return best, bestLen
}

const inf = 1 << 30

// computeDist finds, for every NFA state, the fewest characters (and JSON
// bytes) to a match, by relaxing edges until nothing changes.
func (r *Regex) computeDist() {
	n := len(r.prog.Inst)
	r.dist = make([]int, n)
	r.distByte = make([]int, n)
	for i := range r.dist {
		r.dist[i], r.distByte[i] = inf, inf
	}
	for changed := true; changed; {
		changed = false
		for pc := n - 1; pc >= 0; pc-- {
			in := &r.prog.Inst[pc]
			d, db := inf, inf
			switch in.Op {
			case syntax.InstMatch:
				d, db = 0, 0
			case syntax.InstAlt, syntax.InstAltMatch:
				d = min(r.dist[in.Out], r.dist[in.Arg])
				db = min(r.distByte[in.Out], r.distByte[in.Arg])
			case syntax.InstCapture, syntax.InstNop:
				d, db = r.dist[in.Out], r.distByte[in.Out]
			case syntax.InstEmptyWidth:
				// Only end-of-text assertions can hold after the start; the
				// start-of-text ones are resolved when the start state is built.
				if syntax.EmptyOp(in.Arg)&^(syntax.EmptyEndText|syntax.EmptyEndLine) == 0 {
					d, db = r.dist[in.Out], r.distByte[in.Out]
				}
			case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
				if r.dist[in.Out] < inf {
					_, l := cheapest(in)
					if l < inf {
						d = r.dist[in.Out] + 1
						db = r.distByte[in.Out] + l
					}
				}
			}
			if d < r.dist[pc] || db < r.distByte[pc] {
				r.dist[pc] = min(d, r.dist[pc])
				r.distByte[pc] = min(db, r.distByte[pc])
				changed = true
			}
		}
	}
}

// closure adds to set the threads reachable from pc without a character.
// atStart allows start-of-text assertions; atEnd end-of-text ones.
// It reports whether a match is reachable.
func (r *Regex) closure(pc uint32, atStart, atEnd bool, seen []bool, set *[]uint32) bool {
	if seen[pc] {
		return false
	}
	seen[pc] = true
	in := &r.prog.Inst[pc]
	switch in.Op {
	case syntax.InstMatch:
		return true
	case syntax.InstAlt, syntax.InstAltMatch:
		a := r.closure(in.Out, atStart, atEnd, seen, set)
		b := r.closure(in.Arg, atStart, atEnd, seen, set)
		return a || b
	case syntax.InstCapture, syntax.InstNop:
		return r.closure(in.Out, atStart, atEnd, seen, set)
	case syntax.InstEmptyWidth:
		op := syntax.EmptyOp(in.Arg)
		if op&(syntax.EmptyBeginText|syntax.EmptyBeginLine) != 0 && !atStart {
			return false
		}
		if op&(syntax.EmptyEndText|syntax.EmptyEndLine) != 0 {
			if !atEnd {
				// Keep the thread: it may match when the text ends here.
				*set = append(*set, pc)
				return false
			}
		}
		return r.closure(in.Out, atStart, atEnd, seen, set)
	case syntax.InstFail:
		return false
	}
	*set = append(*set, pc)
	return false
}

// intern returns the DFA state of a thread set; r.mu must be held.
func (r *Regex) intern(pcs []uint32, matched bool) int32 {
	all := matched && r.search
	slices.Sort(pcs)
	pcs = slices.Compact(pcs)
	if len(pcs) == 0 && !matched {
		return Dead
	}
	var kb strings.Builder
	if all {
		kb.WriteByte('*')
	} else if matched {
		kb.WriteByte('+')
	}
	for _, pc := range pcs {
		kb.WriteString(strconv.FormatUint(uint64(pc), 36))
		kb.WriteByte(',')
	}
	key := kb.String()
	if id, ok := r.index[key]; ok {
		return id
	}
	s := &dstate{pcs: pcs, all: all, accept: matched, next: map[rune]int32{}, min: inf, minB: inf}
	if all {
		s.accept, s.min, s.minB = true, 0, 0
	} else {
		seen := make([]bool, len(r.prog.Inst))
		var tmp []uint32
		for _, pc := range pcs {
			if r.closure(pc, false, true, seen, &tmp) {
				s.accept = true
			}
			s.min = min(s.min, r.dist[pc])
			s.minB = min(s.minB, r.distByte[pc])
		}
		if s.accept {
			s.min, s.minB = 0, 0
		}
	}
	id := int32(len(r.states))
	r.states = append(r.states, s)
	r.index[key] = id
	return id
}

// Start returns the state before any character.
func (r *Regex) Start() int32 {
	if r.neg != nil {
		return r.neg.start()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.states) > 0 {
		return 0
	}
	seen := make([]bool, len(r.prog.Inst))
	var set []uint32
	matched := r.closure(uint32(r.prog.Start), true, false, seen, &set)
	id := r.intern(set, matched)
	if id == Dead {
		// Keep state 0 the start state even when nothing matches.
		r.states = append(r.states, &dstate{next: map[rune]int32{}, min: inf, minB: inf})
		return 0
	}
	return id
}

// Step returns the state after character c, or Dead.
func (r *Regex) Step(s int32, c rune) int32 {
	if s < 0 {
		return Dead
	}
	if r.neg != nil {
		return r.neg.step(s, c)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.states[s]
	if st.all {
		return s
	}
	if c >= 0 && c < 128 {
		if n := st.ascii[c]; n != 0 {
			return n - 1
		}
	} else if n, ok := st.next[c]; ok {
		return n
	}
	seen := make([]bool, len(r.prog.Inst))
	var set []uint32
	matched := false
	for _, pc := range st.pcs {
		in := &r.prog.Inst[pc]
		if in.Op == syntax.InstEmptyWidth {
			continue // an end-of-text thread dies on a character
		}
		if in.MatchRune(c) {
			if r.closure(in.Out, false, false, seen, &set) {
				matched = true
			}
		}
	}
	if r.search {
		// Unanchored: a match may also begin after this character, but
		// not where the pattern starts with ^.
		if r.closure(uint32(r.prog.Start), false, false, seen, &set) {
			matched = true
		}
	}
	n := r.intern(set, matched)
	if c >= 0 && c < 128 {
		st.ascii[c] = n + 1
	} else if len(st.next) < 4096 {
		st.next[c] = n
	}
	return n
}

// Accepting reports whether the text that led to s matches.
func (r *Regex) Accepting(s int32) bool {
	if s < 0 {
		return false
	}
	if r.neg != nil {
		return r.neg.accepting(s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.states[s].accept
}

// MinChars returns the fewest further characters for a match from s, and
// the fewest bytes they take in a JSON string; large when none is possible.
func (r *Regex) MinChars(s int32) (chars, bytes int) {
	if s < 0 {
		return inf, inf
	}
	if r.neg != nil {
		return r.neg.minChars(s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.states[s].min, r.states[s].minB
}

// CheapestNext returns a character that leads from s towards a match along
// a shortest path (in JSON bytes), and false if s cannot reach a match or
// already accepts.
func (r *Regex) CheapestNext(s int32) (rune, bool) {
	if s < 0 {
		return 0, false
	}
	if r.neg != nil {
		if r.neg.accepting(s) {
			return 0, false
		}
		for _, c := range r.neg.reps {
			if t := r.neg.step(s, c); t != Dead && r.neg.accepting(t) {
				return c, true
			}
		}
		return 0, false
	}
	r.mu.Lock()
	st := r.states[s]
	r.mu.Unlock()
	if st.accept {
		return 0, false
	}
	for _, pc := range st.pcs {
		in := &r.prog.Inst[pc]
		if in.Op == syntax.InstEmptyWidth || r.distByte[pc] != st.minB {
			continue
		}
		c, l := cheapest(in)
		if l < inf && r.distByte[in.Out]+l == st.minB {
			return c, true
		}
	}
	return 0, false
}

// MatchString runs the automaton over s (for tests and literal checks).
func (r *Regex) MatchString(s string) bool {
	st := r.Start()
	for _, c := range s {
		if st = r.Step(st, c); st == Dead {
			return false
		}
	}
	return r.Accepting(st)
}

// AcceptsRange reports whether some character in [lo, hi] can follow state
// s (used while the bytes of a multi-byte character arrive one by one).
func (r *Regex) AcceptsRange(s int32, lo, hi rune) bool {
	if s < 0 {
		return false
	}
	if r.neg != nil {
		return r.neg.acceptsRange(s, lo, hi)
	}
	r.mu.Lock()
	st := r.states[s]
	r.mu.Unlock()
	if st.all {
		return true
	}
	for _, pc := range st.pcs {
		in := &r.prog.Inst[pc]
		switch in.Op {
		case syntax.InstRuneAny:
			return true
		case syntax.InstRuneAnyNotNL:
			if lo != '\n' || hi != '\n' {
				return true
			}
		case syntax.InstRune1:
			if in.Rune[0] >= lo && in.Rune[0] <= hi {
				return true
			}
		case syntax.InstRune:
			if syntax.Flags(in.Arg)&syntax.FoldCase != 0 {
				if foldOverlaps(in.Rune, lo, hi) {
					return true
				}
				continue
			}
			if len(in.Rune) == 1 {
				if in.Rune[0] >= lo && in.Rune[0] <= hi {
					return true
				}
				continue
			}
			for i := 0; i+1 < len(in.Rune); i += 2 {
				if in.Rune[i] <= hi && in.Rune[i+1] >= lo {
					return true
				}
			}
		}
	}
	return false
}

// foldOverlaps reports whether a case-folded rune class (pairs of range
// bounds, or one rune) has a member, or a case variant of one, in [lo, hi].
func foldOverlaps(ranges []rune, lo, hi rune) bool {
	if len(ranges) == 1 {
		ranges = []rune{ranges[0], ranges[0]}
	}
	for i := 0; i+1 < len(ranges); i += 2 {
		a, b := ranges[i], ranges[i+1]
		if a <= hi && b >= lo {
			return true
		}
		if b-a > 512 {
			return true // too wide to enumerate: assume a variant overlaps
		}
		for c := a; c <= b; c++ {
			for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
				if f >= lo && f <= hi {
					return true
				}
			}
		}
	}
	return false
}
