// Package stop finds OpenAI "stop" strings in generated text as it streams.
//
// Text that might be the beginning of a stop string is held back until the
// following text resolves it, so a stop string split across tokens is still
// found and no part of it is ever emitted. The match is the one that
// completes first in the text; of several completing at the same byte, the
// longest (the one starting earliest). This is what feeding the text one
// byte at a time would find, so the result does not depend on chunking.
package stop

import "strings"

// Matcher checks one generation's text against a set of stop strings. Not
// safe for concurrent use.
type Matcher struct {
	stops   []string
	pending string
	matched int // index into stops, -1 while none
	maxLen  int
}

// New returns a Matcher for stops; empty strings are ignored.
func New(stops []string) *Matcher {
	m := &Matcher{matched: -1}
	for _, s := range stops {
		if s != "" {
			m.stops = append(m.stops, s)
			m.maxLen = max(m.maxLen, len(s))
		}
	}
	return m
}

// Add consumes the next piece of text and returns what can be emitted. Once
// a stop string has matched, stopped is true, out holds the text before it,
// and later calls return nothing.
func (m *Matcher) Add(text string) (out string, stopped bool) {
	if m.matched >= 0 {
		return "", true
	}
	if len(m.stops) == 0 {
		return text, false
	}
	// Only a match that ends inside the new text can be new: search from
	// where such a match could start.
	from := len(m.pending)
	m.pending += text
	start := max(0, from-m.maxLen+1)
	bestEnd, bestStart := -1, -1
	for i, s := range m.stops {
		for off := start; ; {
			k := strings.Index(m.pending[off:], s)
			if k < 0 {
				break
			}
			st := off + k
			end := st + len(s)
			if end > from && (bestEnd < 0 || end < bestEnd || end == bestEnd && st < bestStart) {
				bestEnd, bestStart, m.matched = end, st, i
			}
			off = st + 1
		}
	}
	if bestEnd >= 0 {
		out = m.pending[:bestStart]
		m.pending = ""
		return out, true
	}
	keep := m.heldLen()
	out = m.pending[:len(m.pending)-keep]
	m.pending = m.pending[len(m.pending)-keep:]
	return out, false
}

// heldLen is the length of the longest suffix of pending that is a proper
// prefix of some stop string.
func (m *Matcher) heldLen() int {
	best := 0
	for _, s := range m.stops {
		for n := min(len(m.pending), len(s)-1); n > best; n-- {
			if strings.HasSuffix(m.pending, s[:n]) {
				best = n
				break
			}
		}
	}
	return best
}

// Flush returns the held-back text at the end of the generation (nothing if
// a stop string matched).
func (m *Matcher) Flush() string {
	out := m.pending
	m.pending = ""
	if m.matched >= 0 {
		return ""
	}
	return out
}

// Matched returns the stop string that ended the text and true, or "" and
// false if none has.
func (m *Matcher) Matched() (string, bool) {
	if m.matched < 0 {
		return "", false
	}
	return m.stops[m.matched], true
}

// Cut is the one-shot form: text up to the first stop string, and which one.
func Cut(text string, stops []string) (out, matched string, ok bool) {
	m := New(stops)
	out, stopped := m.Add(text)
	if !stopped {
		out += m.Flush()
	}
	matched, ok = m.Matched()
	return out, matched, ok
}
