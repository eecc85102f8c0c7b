package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestJSONScanMatchesEncodingJSON checks the fast reader against
// encoding/json on the real tokenizer.json.
func TestJSONScanMatchesEncodingJSON(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(qwen3Dir, FileTokenizer))
	if err != nil {
		t.Fatal(err)
	}
	var tj struct {
		Model struct {
			Vocab  json.RawMessage `json:"vocab"`
			Merges json.RawMessage `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &tj); err != nil {
		t.Fatal(err)
	}
	var wantVocab map[string]int
	if err := json.Unmarshal(tj.Model.Vocab, &wantVocab); err != nil {
		t.Fatal(err)
	}
	vocab, err := parseVocab(tj.Model.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	if len(vocab) != len(wantVocab) {
		t.Fatalf("parseVocab: %d entries, want %d", len(vocab), len(wantVocab))
	}
	for _, e := range vocab {
		if id, ok := wantVocab[e.tok]; !ok || id != e.id {
			t.Fatalf("parseVocab: %q -> %d, encoding/json says %d, %v", e.tok, e.id, id, ok)
		}
	}
	var wantPairs [][]string
	if err := json.Unmarshal(tj.Model.Merges, &wantPairs); err != nil {
		t.Fatal(err)
	}
	merges, err := parseMerges(tj.Model.Merges)
	if err != nil {
		t.Fatal(err)
	}
	if len(merges) != len(wantPairs) {
		t.Fatalf("parseMerges: %d merges, want %d", len(merges), len(wantPairs))
	}
	for i, p := range wantPairs {
		if merges[i] != p[0]+" "+p[1] {
			t.Fatalf("merge %d = %q, want %q", i, merges[i], p)
		}
	}
}

func TestJSONScan(t *testing.T) {
	vocab, err := parseVocab([]byte(` { "a" : 0, "\"q\u00e9\n" :1,"Ġ":2 } `))
	if err != nil {
		t.Fatal(err)
	}
	want := []vocabEntry{{"a", 0}, {"\"qé\n", 1}, {"Ġ", 2}}
	if !slices.Equal(vocab, want) {
		t.Errorf("parseVocab = %+v, want %+v", vocab, want)
	}
	for _, c := range []struct{ in, want string }{
		{`["a b", "c d"]`, "[a b c d]"},
		{`[["a","b"], [ "c" , "\"" ]]`, `[a b c "]`},
		{`[]`, "[]"},
		{`null`, "[]"},
	} {
		m, err := parseMerges([]byte(c.in))
		if err != nil {
			t.Errorf("parseMerges(%s): %v", c.in, err)
			continue
		}
		if got := "[" + joinSpace(m) + "]"; got != c.want {
			t.Errorf("parseMerges(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	for _, bad := range []string{`["a b"`, `[["a"]]`, `[["a b","c"]]`, `[1]`, `{`} {
		if _, err := parseMerges([]byte(bad)); err == nil {
			t.Errorf("parseMerges(%s) succeeded", bad)
		}
	}
	for _, bad := range []string{`{"a":}`, `{"a" 1}`, `{"a":1`, `["a"]`, `{"a`} {
		if _, err := parseVocab([]byte(bad)); err == nil {
			t.Errorf("parseVocab(%s) succeeded", bad)
		}
	}
}

func joinSpace(m []string) string {
	out := ""
	for i, s := range m {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}
