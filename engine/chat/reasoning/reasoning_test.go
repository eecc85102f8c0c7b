package reasoning

import (
	"testing"
)

// chunkings splits s char by char, into pseudo-random token-like pieces of
// 1-7 bytes, and whole.
func chunkings(s string) [][]string {
	var chars, toks []string
	for _, r := range s {
		chars = append(chars, string(r))
	}
	for i, n := 0, 0; i < len(s); i += n {
		n = min(1+(i*7+3)%7, len(s)-i)
		toks = append(toks, s[i:i+n])
	}
	return [][]string{chars, toks, {s}}
}

func feed(promptOpen bool, chunks []string) (reasoning, content string) {
	p := New(promptOpen)
	for _, c := range chunks {
		d := p.Add(c)
		reasoning += d.Reasoning
		content += d.Content
	}
	d := p.Flush()
	return reasoning + d.Reasoning, content + d.Content
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name         string
		open         bool
		in           string
		wantR, wantC string
	}{
		{"plain", false, "Hello there.", "", "Hello there."},
		{"think", false, "<think>\nLet me see.\n</think>\n\nIt is 4.", "Let me see.", "It is 4."},
		{"leading whitespace", false, "\n<think>x</think>y", "x", "y"},
		{"prompt opened", true, "Let me see.\n</think>\n\nIt is 4.", "Let me see.", "It is 4."},
		{"prompt opened, truncated", true, "still thinking\n\nabout it\n", "still thinking\n\nabout it", ""},
		{"empty think", false, "<think>\n\n</think>\n\nHi", "", "Hi"},
		{"not at start", false, "A <think> tag</think> in text", "", "A <think> tag</think> in text"},
		{"partial open at end", false, "<thi", "", "<thi"},
		{"partial close at end", true, "abc</thi", "abc</thi", ""},
		{"close twice", true, "a</think>b</think>c", "a", "b</think>c"},
		{"content newlines kept inside", false, "<think>r</think>\n\nline1\n\nline2\n", "r", "line1\n\nline2\n"},
		{"unicode", true, "日本語の推論</think>答え", "日本語の推論", "答え"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c := Split(tc.in, tc.open)
			if r != tc.wantR || c != tc.wantC {
				t.Errorf("Split(%q) = (%q, %q), want (%q, %q)", tc.in, r, c, tc.wantR, tc.wantC)
			}
			for _, ch := range chunkings(tc.in) {
				r2, c2 := feed(tc.open, ch)
				if r2 != r || c2 != c {
					t.Errorf("chunked %q: (%q, %q), want one-shot (%q, %q)", ch, r2, c2, r, c)
				}
			}
		})
	}
}

func TestHoldsBackSplitTag(t *testing.T) {
	p := New(true)
	if d := p.Add("abc</th"); d.Reasoning != "abc" || d.Content != "" {
		t.Errorf("got %+v, want reasoning %q and the partial tag held", d, "abc")
	}
	if d := p.Add("ink>\n\nok"); d.Reasoning != "" || d.Content != "ok" {
		t.Errorf("got %+v, want content %q", d, "ok")
	}
}

func TestPromptOpensThink(t *testing.T) {
	for prompt, want := range map[string]bool{
		"<|im_start|>assistant\n<think>\n":                     true,
		"<|im_start|>assistant\n<think>\n\n</think>\n\n":       false,
		"<|im_start|>assistant\n":                              false,
		"<think>old</think><|im_start|>assistant\n":            false,
		"<|im_start|>user\nuse <think> tags<|im_end|>\nassist": false,
	} {
		if got := PromptOpensThink(prompt); got != want {
			t.Errorf("PromptOpensThink(%q) = %v, want %v", prompt, got, want)
		}
	}
}

func FuzzSplit(f *testing.F) {
	for _, s := range []string{"<think>a</think>b", "x</think>\n\ny", "<thi", "\n\n<think>\n", "</think></think>"} {
		f.Add(s, true, uint8(3))
		f.Add(s, false, uint8(1))
	}
	f.Fuzz(func(t *testing.T, s string, open bool, step uint8) {
		r, c := Split(s, open)
		n := int(step%8) + 1
		var chunks []string
		for i := 0; i < len(s); i += n {
			chunks = append(chunks, s[i:min(i+n, len(s))])
		}
		r2, c2 := feed(open, chunks)
		if r != r2 || c != c2 {
			t.Fatalf("chunks of %d: (%q, %q), one-shot (%q, %q)", n, r2, c2, r, c)
		}
	})
}
