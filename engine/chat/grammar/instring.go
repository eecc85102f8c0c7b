package grammar

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/macpool/macpool/engine/chat/regex"
)

// The tokens that continue a pattern or format string without ending it
// depend only on the string's node and its automaton states. They are
// found once per state by a walk of the vocabulary's plain string tokens
// (no quote, no backslash) that steps the automata directly — no frames,
// prefixes shared as in walk — and remembered with what each leaves to
// close the string, so that budgeted masks reuse them too. Tokens with
// escapes and tokens that end the string take the ordinary walk.

// inStrEntry is what a string state allows without ending the string:
// ids (sorted by bytes) and, per id, the fewest bytes the automata still
// need before the closing quote (costInf: none can match).
type inStrEntry struct {
	ids   []int32
	need  []int32 // bytes
	chars []int32 // the same in characters (for maxLength)
}

// fastStrings may be turned off by tests to compare with the ordinary walk.
var fastStrings = true

// fastString reports whether the single state f may take the cached
// in-string path.
func fastString(m *Matcher) bool {
	return fastStrings && len(m.states) == 1 && cacheable(m.states[0])
}

// inString returns the entry of the string m's single state is reading.
func (m *Matcher) inString(v *Vocab) *inStrEntry {
	f := m.states[0]
	var kb strings.Builder
	for _, r := range f.rs[:len(f.n.res)] {
		kb.WriteString(strconv.Itoa(int(r)))
		kb.WriteByte(',')
	}
	key := inStrKey{v, kb.String()}
	if e, ok := f.n.strCache.m.Load(key); ok {
		return e.(*inStrEntry)
	}
	e := walkInString(v, f.n.res, f.rs[:len(f.n.res)])
	if f.n.strCache.n.Load() < maxStrCache {
		f.n.strCache.n.Add(1)
		f.n.strCache.m.Store(key, e)
	}
	return e
}

// utf8State is a character being read: continuation bytes left, its
// length and the bits so far.
type utf8State struct {
	left, ulen int8
	r          rune
}

// codeRange is the range of code points a UTF-8 sequence can still become
// whose leading bits are r, with left continuation bytes to come; ok is
// false when only overlong forms, surrogates or code points past U+10FFFF
// remain.
func (u utf8State) codeRange() (lo, hi rune, ok bool) {
	shift := 6 * uint(u.left)
	lo, hi = u.r<<shift, (u.r+1)<<shift-1
	switch u.ulen {
	case 2:
		lo = max(lo, 0x80)
	case 3:
		lo = max(lo, 0x800)
		if lo >= 0xD800 && hi <= 0xDFFF {
			return 0, 0, false
		}
	case 4:
		lo, hi = max(lo, 0x10000), min(hi, 0x10FFFF)
	}
	return lo, hi, lo <= hi
}

// walkInString walks v.plainIn from automaton states start.
func walkInString(v *Vocab, res []*regex.Regex, start []int32) *inStrEntry {
	k := len(res)
	set := &v.plainIn
	rs := make([]int32, (v.maxLen+1)*k)
	us := make([]utf8State, v.maxLen+1)
	copy(rs, start)
	e := &inStrEntry{}
	// step computes level d+1 from level d and byte c.
	step := func(d int, c byte) bool {
		src, dst := rs[d*k:(d+1)*k], rs[(d+1)*k:(d+2)*k]
		u := us[d]
		var r rune
		switch {
		case u.left == 0 && c < 0x80:
			r = rune(c) // the set holds no quote, backslash or control byte
		case u.left == 0:
			var n utf8State
			switch {
			case c >= 0xC2 && c <= 0xDF:
				n = utf8State{1, 2, rune(c & 0x1F)}
			case c >= 0xE0 && c <= 0xEF:
				n = utf8State{2, 3, rune(c & 0x0F)}
			case c >= 0xF0 && c <= 0xF4:
				n = utf8State{3, 4, rune(c & 0x07)}
			default:
				return false
			}
			copy(dst, src)
			us[d+1] = n
			return partialOK(res, src, n)
		default:
			if c < 0x80 || c > 0xBF {
				return false
			}
			n := utf8State{u.left - 1, u.ulen, u.r<<6 | rune(c&0x3F)}
			if n.left > 0 {
				copy(dst, src)
				us[d+1] = n
				return partialOK(res, src, n)
			}
			if !utf8.ValidRune(n.r) || utf8.RuneLen(n.r) != int(n.ulen) {
				return false
			}
			r = n.r
		}
		for i, re := range res {
			s := re.Step(src[i], r)
			if s == regex.Dead {
				return false
			}
			dst[i] = s
		}
		us[d+1] = utf8State{}
		return true
	}
	for b := 0; b < 256; b++ {
		lo, hi := int(set.first[b]), int(set.first[b+1])
		depth, failDepth := 0, -1 // levels 0..depth are valid
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
			depth = min(depth, l)
			ok := true
			for d := depth; d < len(t); d++ {
				if !step(d, t[d]) {
					failDepth, ok = d, false
					break
				}
				depth = d + 1
			}
			if !ok {
				continue
			}
			need, needChars := 0, 0
			for j, re := range res {
				chars, bytes := re.MinChars(rs[len(t)*k+j])
				if chars >= 1<<29 {
					need, needChars = costInf, costInf
					break
				}
				need, needChars = max(need, bytes), max(needChars, chars)
			}
			e.ids = append(e.ids, id)
			e.need = append(e.need, int32(need))
			e.chars = append(e.chars, int32(needChars))
		}
	}
	return e
}

// partialOK reports whether some character with the leading bytes of u
// is acceptable to every automaton (see Grammar.partialFeasible).
func partialOK(res []*regex.Regex, rs []int32, u utf8State) bool {
	lo, hi, ok := u.codeRange()
	if !ok {
		return false
	}
	for i, re := range res {
		if !re.AcceptsRange(rs[i], lo, hi) {
			return false
		}
	}
	return true
}

// maskInString sets allowed for the entry's tokens that fit budget (< 0:
// all) and returns how many: a token leaves the string with the bytes it
// leaves pending, the characters minLength still wants and what the
// automata need, then the closing quote and the rest of the document.
//
// Under maxLength a token must leave room for the character it leaves
// pending and for the characters the automata need; checking that once,
// after the token, is enough: what an automaton needs after a character
// never exceeds the characters that follow plus what it needs at the end.
func (m *Matcher) maskInString(v *Vocab, e *inStrEntry, allowed []bool, budget int, cs *coster) int {
	f := m.states[0]
	maxLen := f.n.maxLen
	if budget < 0 && maxLen < 0 {
		for _, id := range e.ids {
			allowed[id] = true
		}
		return len(e.ids)
	}
	room := costInf
	if budget >= 0 {
		after := cs.after(f.parent)
		if after >= costInf {
			return 0
		}
		room = budget - after - 1
	}
	count := 0
	for j, id := range e.ids {
		if maxLen >= 0 {
			n := int(f.cnt) + int(v.nch[id])
			if v.pend[id] > 0 && n+1 > maxLen || n+int(e.chars[j]) > maxLen {
				continue
			}
		}
		if budget < 0 {
			allowed[id] = true
			count++
			continue
		}
		need := int(e.need[j])
		if short := f.n.minLen - int(f.cnt) - int(v.nch[id]); short > need {
			need = short
		}
		if int(v.pend[id])+need <= room {
			allowed[id] = true
			count++
		}
	}
	return count
}
