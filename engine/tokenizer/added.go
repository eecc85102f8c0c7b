package tokenizer

import (
	"cmp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedMatcher finds added tokens in text: leftmost match first, longest
// among those starting there (Hugging Face's aho-corasick LeftmostLongest).
type addedMatcher struct {
	first [256]bool         // some token starts with this byte
	byte1 [256][]AddedToken // by first byte, longest first
}

func newAddedMatcher(tokens []AddedToken) addedMatcher {
	var m addedMatcher
	for _, a := range tokens {
		c := a.Content[0]
		m.first[c] = true
		m.byte1[c] = append(m.byte1[c], a)
	}
	for i := range m.byte1 {
		slices.SortStableFunc(m.byte1[i], func(a, b AddedToken) int { return cmp.Compare(len(b.Content), len(a.Content)) })
	}
	return m
}

// find returns the first added token in text[from:]: the span it covers in
// text (with the whitespace LStrip/RStrip swallow) and its id, or start -1.
func (m *addedMatcher) find(text string, from int) (start, end, id int) {
	for i := from; i < len(text); i++ {
		if !m.first[text[i]] {
			continue
		}
		for _, a := range m.byte1[text[i]] {
			if !strings.HasPrefix(text[i:], a.Content) {
				continue
			}
			// The longest token here is the match; if it is a single word
			// token inside a word, it is dropped and the search goes on.
			stop := i + len(a.Content)
			if a.SingleWord && (endsWithWord(text[:i]) || startsWithWord(text[stop:])) {
				break
			}
			start := i
			if a.LStrip {
				for start > from {
					r, w := utf8.DecodeLastRuneInString(text[from:start])
					if !unicode.IsSpace(r) {
						break
					}
					start -= w
				}
			}
			if a.RStrip {
				for stop < len(text) {
					r, w := utf8.DecodeRuneInString(text[stop:])
					if !unicode.IsSpace(r) {
						break
					}
					stop += w
				}
			}
			return start, stop, a.ID
		}
	}
	return -1, -1, -1
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordRune(r)
}
