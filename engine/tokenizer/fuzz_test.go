package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// The seed corpora are in testdata/fuzz/; run a fuzzer with
// go test -run '^$' -fuzz FuzzEncode -fuzztime 60s ./engine/tokenizer

func FuzzEncode(f *testing.F) {
	for _, s := range []string{"Hello world", "<|im_start|>user\n", " \n\n ", "e\u0301", "'s"} {
		f.Add(s)
	}
	tok := qwen3(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		for _, id := range ids {
			if _, ok := tok.Token(id); !ok {
				t.Fatalf("Encode(%q) gave id %d, not a token", s, id)
			}
		}
		got := tok.Decode(ids)
		if !utf8.ValidString(got) {
			t.Fatalf("Decode(Encode(%q)) = %q: invalid UTF-8", s, got)
		}
		if utf8.ValidString(s) {
			if want := nfc(s); got != want {
				t.Fatalf("Decode(Encode(%q)) = %q, want %q (ids %v)", s, got, want, ids)
			}
		}
		// The pieces of the split cover the text exactly, and each piece is
		// one match of the pattern: splitting it again gives itself.
		text := nfc(s)
		for i := 0; i < len(text); {
			end := tok.split.next(text, i)
			if end <= i || end > len(text) {
				t.Fatalf("split of %q at %d ends at %d", text, i, end)
			}
			if e := tok.split.next(text[i:end], 0); e != end-i {
				t.Fatalf("piece %q of %q splits again at %d", text[i:end], text, e)
			}
			i = end
		}
		if len(s) <= smallWord {
			if a, b := tok.mergeSmall(s), tok.mergeHeap(s); !slices.Equal(a, b) {
				t.Fatalf("word %q: mergeSmall %v, mergeHeap %v", s, a, b)
			}
		}
	})
}

// FuzzDecode reads the input as token ids, 3 bytes each (some out of range).
func FuzzDecode(f *testing.F) {
	f.Add([]byte{0x00, 0x2b, 0xa2, 0x00, 0x00, 0x6b, 0x00, 0x00, 0xff}) // ids 11162 99 247
	f.Add([]byte{0x02, 0x50, 0x65, 0x00, 0x03, 0x70})                   // ids 151645 872
	tok := qwen3(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var ids []int
		for i := 0; i+3 <= len(data); i += 3 {
			id := int(data[i])<<16 | int(data[i+1])<<8 | int(data[i+2])
			ids = append(ids, id%(tok.VocabSize()+16)-8) // -8..VocabSize()+7
		}
		text := tok.Decode(ids)
		if !utf8.ValidString(text) {
			t.Fatalf("Decode(%v) = %q: invalid UTF-8", ids, text)
		}
		s := tok.NewStream()
		var b strings.Builder
		for _, id := range ids {
			piece := s.Add(id)
			if !utf8.ValidString(piece) {
				t.Fatalf("Add(%d) = %q: invalid UTF-8", id, piece)
			}
			b.WriteString(piece)
		}
		b.WriteString(s.Flush())
		if b.String() != text {
			t.Fatalf("stream of %v = %q, Decode = %q", ids, b.String(), text)
		}
		// Decoded text encodes and decodes back to itself (NFC).
		if got, want := tok.Decode(tok.Encode(text)), nfc(text); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", text, got, want)
		}
	})
}
