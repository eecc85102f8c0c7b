package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// PreTokenizer kinds: the split rule applied before BPE. The names are
// GGUF's tokenizer.ggml.pre values.
const (
	// PreQwen2 is the split of Qwen2, Qwen2.5 and Qwen3:
	//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	PreQwen2 = "qwen2"
	// PreQwen35 is the split of Qwen3.5: PreQwen2 with combining marks
	// (\p{M}) counted with letters:
	//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	PreQwen35 = "qwen35"
)

// The split patterns exactly as tokenizer.json spells them.
const (
	regexQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	regexQwen35 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// Character classes of the split pattern. Whitespace is \s as Oniguruma
// (Hugging Face's regex engine) defines it for Unicode: White_Space, which is
// what unicode.IsSpace tests.
const (
	clsOther   uint8 = iota // none of the below: punctuation, symbols, controls
	clsLetter               // \p{L} (and \p{M} for qwen35)
	clsNumber               // \p{N}
	clsSpace                // \s other than \r and \n
	clsNewline              // \r or \n
)

var asciiClass [128]uint8

func init() {
	for c := 0; c < 128; c++ {
		r := rune(c)
		switch {
		case r == '\r' || r == '\n':
			asciiClass[c] = clsNewline
		case unicode.IsSpace(r):
			asciiClass[c] = clsSpace
		case unicode.IsLetter(r):
			asciiClass[c] = clsLetter
		case unicode.IsNumber(r):
			asciiClass[c] = clsNumber
		default:
			asciiClass[c] = clsOther
		}
	}
}

// splitter finds the pieces of the pre-tokenizer split. It is a hand-written
// matcher with exactly the semantics of the backtracking regex above
// (leftmost alternative that matches wins, greedy quantifiers), which Go's
// regexp cannot express because of the lookahead.
type splitter struct {
	marks bool // count \p{M} as letters (qwen35)
}

// class returns the class of the rune at s[i:] and its width. Invalid UTF-8
// bytes are one-byte "other" characters.
func (sp splitter) class(s string, i int) (uint8, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	switch {
	case unicode.IsLetter(r):
		return clsLetter, w
	case unicode.IsNumber(r):
		return clsNumber, w
	case unicode.IsSpace(r):
		return clsSpace, w
	case sp.marks && unicode.IsMark(r):
		return clsLetter, w
	}
	return clsOther, w
}

// contraction reports the length of a contraction ('s 't 're 've 'm 'll 'd,
// any case) at s[i:], which starts with an apostrophe, or 0.
func contraction(s string, i int) int {
	rest := s[i+1:]
	if rest == "" {
		return 0
	}
	lower := func(c byte) byte { return c | 0x20 }
	switch lower(rest[0]) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if len(rest) > 1 && lower(rest[1]) == 'e' {
			return 3
		}
	case 'l':
		if len(rest) > 1 && lower(rest[1]) == 'l' {
			return 3
		}
	}
	// Under Unicode case folding, U+017F LATIN SMALL LETTER LONG S matches s.
	if len(rest) >= 2 && rest[0] == 0xC5 && rest[1] == 0xBF {
		return 3
	}
	return 0
}

// next returns the end of the piece that starts at s[i:] (i < len(s)).
func (sp splitter) next(s string, i int) int {
	c0, w0 := sp.class(s, i)
	// 's|'t|'re|'ve|'m|'ll|'d. The ASCII letters "| 0x20" folds are exact:
	// only letters fold onto s t m d r e v l.
	if s[i] == '\'' {
		if n := contraction(s, i); n > 0 {
			return i + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c0 == clsLetter {
		return sp.run(s, i+w0, clsLetter)
	}
	var c1 uint8 = 255
	if i+w0 < len(s) {
		c1, _ = sp.class(s, i+w0)
	}
	if c0 != clsNewline && c0 != clsNumber && c1 == clsLetter {
		return sp.run(s, i+w0, clsLetter)
	}
	// \p{N}
	if c0 == clsNumber {
		return i + w0
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := -1
	if s[i] == ' ' && c1 == clsOther {
		j = i + 1
	} else if c0 == clsOther {
		j = i
	}
	if j >= 0 {
		j = sp.run(s, j, clsOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// c0 is whitespace. Find the whitespace run and its last newline.
	end, lastNL, lastStart := i, -1, i
	for end < len(s) {
		c, w := sp.class(s, end)
		if c != clsSpace && c != clsNewline {
			break
		}
		if c == clsNewline {
			lastNL = end
		}
		lastStart = end
		end += w
	}
	// \s*[\r\n]+ ends just after the last newline of the run.
	if lastNL >= 0 {
		return lastNL + 1
	}
	// \s+(?!\S): the whole run at the end of the text, else all but the
	// last whitespace character if that leaves at least one.
	if end == len(s) {
		return end
	}
	if lastStart > i {
		return lastStart
	}
	// \s+
	return end
}

// run returns the end of the run of characters of class cls from s[j:].
func (sp splitter) run(s string, j int, cls uint8) int {
	for j < len(s) {
		c, w := sp.class(s, j)
		if c != cls {
			break
		}
		j += w
	}
	return j
}
