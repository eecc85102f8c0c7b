package stop

import "testing"

func feed(stops, chunks []string) (string, string, bool) {
	m := New(stops)
	var out string
	for _, c := range chunks {
		o, stopped := m.Add(c)
		out += o
		if stopped {
			break
		}
	}
	out += m.Flush()
	s, ok := m.Matched()
	return out, s, ok
}

func chunkings(s string) [][]string {
	var chars, toks []string
	for _, r := range s {
		chars = append(chars, string(r))
	}
	for i, n := 0, 0; i < len(s); i += n {
		n = min(1+(i*3+1)%5, len(s)-i)
		toks = append(toks, s[i:i+n])
	}
	return [][]string{chars, toks, {s}}
}

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stops   []string
		in      string
		out     string
		matched string
	}{
		{"none", []string{"END"}, "no stop here", "no stop here", ""},
		{"simple", []string{"END"}, "abc END def", "abc ", "END"},
		{"first completing wins", []string{"xyz", "b"}, "axyzb", "a", "xyz"},
		{"earlier completion beats earlier start", []string{"abcd", "bc"}, "abcd", "a", "bc"},
		{"same end: longest", []string{"b", "ab"}, "xab", "x", "ab"},
		{"prefix held at end", []string{"STOP"}, "go ST", "go ST", ""},
		{"overlapping prefix", []string{"aab"}, "aaab", "a", "aab"},
		{"newline stop", []string{"\n\n"}, "line\n\nnext", "line", "\n\n"},
		{"unicode", []string{"。"}, "終わり。次", "終わり", "。"},
		{"empty stop ignored", []string{""}, "abc", "abc", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, matched, ok := Cut(tc.in, tc.stops)
			if out != tc.out || matched != tc.matched || ok != (tc.matched != "") {
				t.Errorf("Cut(%q) = %q, %q, %v; want %q, %q", tc.in, out, matched, ok, tc.out, tc.matched)
			}
			for _, ch := range chunkings(tc.in) {
				o2, m2, _ := feed(tc.stops, ch)
				if o2 != out || m2 != matched {
					t.Errorf("chunked %q: %q, %q; want %q, %q", ch, o2, m2, out, matched)
				}
			}
		})
	}
}

func TestHoldsBack(t *testing.T) {
	m := New([]string{"</answer>"})
	if out, stopped := m.Add("42</ans"); out != "42" || stopped {
		t.Errorf("got %q, %v; want %q held back", out, stopped, "</ans")
	}
	if out, stopped := m.Add("wer> more"); out != "" || !stopped {
		t.Errorf("got %q, %v; want stop", out, stopped)
	}
	if out, stopped := m.Add("x"); out != "" || !stopped {
		t.Errorf("after stop: got %q, %v", out, stopped)
	}
	m = New([]string{"</answer>"})
	m.Add("42</ans")
	if out, _ := m.Add("x"); out != "</ansx" {
		t.Errorf("released: got %q, want %q", out, "</ansx")
	}
}

func FuzzCut(f *testing.F) {
	f.Add("abcabd", "abd", "ca", uint8(1))
	f.Add("xx\n\nyy", "\n\n", "y", uint8(2))
	f.Fuzz(func(t *testing.T, s, a, b string, step uint8) {
		stops := []string{a, b}
		out, matched, _ := Cut(s, stops)
		n := int(step%7) + 1
		var chunks []string
		for i := 0; i < len(s); i += n {
			chunks = append(chunks, s[i:min(i+n, len(s))])
		}
		o2, m2, _ := feed(stops, chunks)
		if o2 != out || m2 != matched {
			t.Fatalf("chunks of %d: %q, %q; one-shot %q, %q", n, o2, m2, out, matched)
		}
		if matched != "" && len(out)+len(matched) > len(s) {
			t.Fatalf("output longer than input")
		}
	})
}
