package tokenizer

import (
	"unicode/utf8"
)

// GPT-2 byte-level alphabet: every byte is spelled as one printable rune so
// that BPE tokens are valid strings. Printable Latin-1 bytes stand for
// themselves; the other 68 bytes are mapped, in byte order, to U+0100...
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelDecode turns a token spelled in the byte-level alphabet into the
// bytes it stands for. Like the Hugging Face ByteLevel decoder, a token with
// any rune outside the alphabet (an added token such as "<|im_end|>" written
// in plain text, say with non-Latin characters) stands for its own UTF-8
// bytes instead.
func byteLevelDecode(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return []byte(tok)
		}
		out = append(out, b)
	}
	return out
}

// byteLevelDecodeString is byteLevelDecode returning a string, without
// allocating for the many tokens that are plain printable ASCII.
func byteLevelDecodeString(tok string) string {
	plain := true
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c < 0x21 || c > 0x7E {
			plain = false
			break
		}
	}
	if plain {
		return tok
	}
	var buf [64]byte
	out := buf[:0]
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return tok
		}
		out = append(out, b)
	}
	return string(out)
}

// byteLevelEncode spells raw bytes in the byte-level alphabet.
func byteLevelEncode(b []byte) string {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = utf8.AppendRune(out, byteToRune[c])
	}
	return string(out)
}

// utf8 scan results for nextUTF8.
const (
	utf8Valid      = iota // a complete, valid character
	utf8Invalid           // a maximal invalid subpart: one U+FFFD
	utf8Incomplete        // the bytes so far begin a valid character but end too soon
)

// nextUTF8 looks at the character starting at b[0] (len(b) > 0) and returns
// how many bytes it spans and whether it is valid. For invalid input the
// span is the "maximal subpart" of Unicode §3.9 (the rule Rust's
// String::from_utf8_lossy, and so Hugging Face tokenizers, follow): the
// longest prefix of a well-formed sequence, at least one byte, replaced by a
// single U+FFFD.
func nextUTF8(b []byte) (n, status int) {
	c := b[0]
	if c < 0x80 {
		return 1, utf8Valid
	}
	need := 0
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case (c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1, utf8Invalid
	}
	for k := 1; k <= need; k++ {
		if k >= len(b) {
			return k, utf8Incomplete
		}
		x := b[k]
		if k == 1 {
			if x < lo || x > hi {
				return 1, utf8Invalid
			}
		} else if x < 0x80 || x > 0xBF {
			return k, utf8Invalid
		}
	}
	return need + 1, utf8Valid
}

// appendLossy appends b to dst as valid UTF-8, each maximal invalid subpart
// replaced by U+FFFD. If final is false, an incomplete character at the end
// is left out and its length returned as held (the caller keeps those bytes
// for later); if final is true it becomes one U+FFFD.
func appendLossy(dst, b []byte, final bool) (out []byte, held int) {
	if utf8.Valid(b) {
		return append(dst, b...), 0
	}
	for i := 0; i < len(b); {
		n, st := nextUTF8(b[i:])
		switch st {
		case utf8Valid:
			dst = append(dst, b[i:i+n]...)
		case utf8Invalid:
			dst = utf8.AppendRune(dst, utf8.RuneError)
		case utf8Incomplete:
			if !final {
				return dst, len(b) - i
			}
			dst = utf8.AppendRune(dst, utf8.RuneError)
		}
		i += n
	}
	return dst, 0
}
