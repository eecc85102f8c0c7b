package tokenizer

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

const qwen3Dir = "../../testdata/tokenizers/qwen3"

var (
	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenErr  error
)

// qwen3 loads the real Qwen3 tokenizer once per test binary.
func qwen3(tb testing.TB) *Tokenizer {
	tb.Helper()
	qwenOnce.Do(func() { qwenTok, qwenErr = Load(qwen3Dir) })
	if qwenErr != nil {
		tb.Fatalf("Load(%s): %v", qwen3Dir, qwenErr)
	}
	return qwenTok
}

type refFile struct {
	Encode []struct {
		Text string `json:"text"`
		IDs  []int  `json:"ids"`
	} `json:"encode"`
	Decode []struct {
		IDs  []int  `json:"ids"`
		Text string `json:"text"`
	} `json:"decode"`
}

func loadRef(t *testing.T) refFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(qwen3Dir, "tokenizer_ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref refFile
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Encode) == 0 || len(ref.Decode) == 0 {
		t.Fatal("tokenizer_ref.json has no cases")
	}
	return ref
}

type vocabCase struct {
	text string
	ids  []int
}

// loadVocabTest reads llama.cpp's test vectors: each input is followed by
// "\n__ggml_vocab_test__\n"; each output line holds the ids of one input.
func loadVocabTest(t *testing.T) []vocabCase {
	t.Helper()
	inp, err := os.ReadFile(filepath.Join(qwen3Dir, "vocab-test.inp"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(filepath.Join(qwen3Dir, "vocab-test.out"))
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	texts := strings.Split(string(inp), sep)
	if texts[len(texts)-1] != "" {
		t.Fatalf("vocab-test.inp does not end with the separator")
	}
	texts = texts[:len(texts)-1]
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("vocab-test: %d inputs, %d outputs", len(texts), len(lines))
	}
	cases := make([]vocabCase, len(texts))
	for i, text := range texts {
		ids := []int{}
		for _, f := range strings.Fields(lines[i]) {
			id, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("vocab-test.out line %d: %v", i+1, err)
			}
			ids = append(ids, id)
		}
		cases[i] = vocabCase{text, ids}
	}
	return cases
}

func TestVocabTest(t *testing.T) {
	tok := qwen3(t)
	cases := loadVocabTest(t)
	for i, c := range cases {
		got := tok.Encode(c.text)
		if !slices.Equal(got, c.ids) {
			t.Errorf("case %d Encode(%q):\n got %v\nwant %v", i, c.text, got, c.ids)
		}
	}
	t.Logf("%d vocab-test cases", len(cases))
}

func TestRefEncode(t *testing.T) {
	tok := qwen3(t)
	ref := loadRef(t)
	for i, c := range ref.Encode {
		got := tok.Encode(c.Text)
		if !slices.Equal(got, c.IDs) {
			t.Errorf("case %d Encode(%q):\n got %v\nwant %v", i, c.Text, got, c.IDs)
		}
	}
	t.Logf("%d encode cases", len(ref.Encode))
}

func TestRefDecode(t *testing.T) {
	tok := qwen3(t)
	ref := loadRef(t)
	for i, c := range ref.Decode {
		if got := tok.Decode(c.IDs); got != c.Text {
			t.Errorf("case %d Decode(%v) = %q, want %q", i, c.IDs, got, c.Text)
		}
	}
	// Every encode case decodes back to its text (NFC).
	for i, c := range ref.Encode {
		if got, want := tok.Decode(c.IDs), norm.NFC.String(c.Text); got != want {
			t.Errorf("encode case %d Decode(%v) = %q, want %q", i, c.IDs, got, want)
		}
	}
	t.Logf("%d decode cases", len(ref.Decode))
}

// streamAll decodes ids one at a time and checks each piece is valid UTF-8.
func streamAll(t *testing.T, tok *Tokenizer, ids []int) string {
	t.Helper()
	s := tok.NewStream()
	var b strings.Builder
	for _, id := range ids {
		piece := s.Add(id)
		if !utf8.ValidString(piece) {
			t.Fatalf("Add(%d) = %q: invalid UTF-8", id, piece)
		}
		b.WriteString(piece)
	}
	piece := s.Flush()
	if !utf8.ValidString(piece) {
		t.Fatalf("Flush() = %q: invalid UTF-8", piece)
	}
	b.WriteString(piece)
	return b.String()
}

func TestStream(t *testing.T) {
	tok := qwen3(t)
	ref := loadRef(t)
	var all [][]int
	for _, c := range ref.Encode {
		all = append(all, c.IDs)
	}
	for _, c := range ref.Decode {
		all = append(all, c.IDs)
	}
	for _, c := range loadVocabTest(t) {
		all = append(all, c.ids)
	}
	for i, ids := range all {
		if got, want := streamAll(t, tok, ids), tok.Decode(ids); got != want {
			t.Errorf("case %d: streamed %q, Decode %q", i, got, want)
		}
	}
}

func TestStreamHoldsPartialCharacter(t *testing.T) {
	tok := qwen3(t)
	// " 🦙" is [11162 99 247]: " \xf0\x9f", "\xa6", "\x99".
	if got, want := tok.Encode(" 🦙"), []int{11162, 99, 247}; !slices.Equal(got, want) {
		t.Fatalf("Encode(\" 🦙\") = %v, want %v", got, want)
	}
	s := tok.NewStream()
	for _, step := range []struct {
		id   int
		want string
	}{{11162, " "}, {99, ""}, {247, "🦙"}, {11162, " "}} {
		if got := s.Add(step.id); got != step.want {
			t.Fatalf("Add(%d) = %q, want %q", step.id, got, step.want)
		}
	}
	// A character cut off at the end comes out of Flush as one U+FFFD.
	if got := s.Flush(); got != "\uFFFD" {
		t.Fatalf("Flush = %q, want U+FFFD", got)
	}
	if got := s.Flush(); got != "" {
		t.Fatalf("second Flush = %q, want empty", got)
	}
}

func TestRoundTrip(t *testing.T) {
	tok := qwen3(t)
	texts := []string{
		"", " ", "\n\n\n", "Hello, world!", "  leading and trailing  ",
		"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
		"e\u0301 cafe\u0301 Å", "日本語のテキストと中文混合 text 123456", "emoji 🦙👩‍👩‍👧‍👦🇯🇵",
		"func main() {\n\tfmt.Println(\"hi\")\n}\n", "a\r\nb\rc\n", "\u00a0\u2003x\u3000",
		"'s 'S 'll 'LL 're 've 'm 'd 'x", "<|im_start", "<<|im_end|>>",
		"a" + strings.Repeat("\u0301", 100), // no U+034F joiners added (x/text would)
	}
	for _, s := range texts {
		ids := tok.Encode(s)
		want := norm.NFC.String(s)
		if !strings.Contains(s, "\u034f") {
			want = strings.ReplaceAll(want, "\u034f", "")
		}
		if got := tok.Decode(ids); got != want {
			t.Errorf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
		}
	}
}

func TestSpecialTokens(t *testing.T) {
	tok := qwen3(t)
	got := tok.Encode("<|im_start|>user\nhi<|im_end|><think></think>")
	want := []int{151644, 872, 198, 6023, 151645, 151667, 151668}
	if !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	for _, c := range []struct {
		tok     string
		id      int
		special bool
	}{{"<|endoftext|>", 151643, true}, {"<|im_end|>", 151645, true}, {"<think>", 151667, false}, {"Ġworld", 1879, false}} {
		id, ok := tok.TokenID(c.tok)
		if !ok || id != c.id {
			t.Errorf("TokenID(%q) = %d, %v, want %d", c.tok, id, ok, c.id)
		}
		if s, ok := tok.Token(c.id); !ok || s != c.tok {
			t.Errorf("Token(%d) = %q, %v, want %q", c.id, s, ok, c.tok)
		}
		if got := tok.IsSpecial(c.id); got != c.special {
			t.Errorf("IsSpecial(%d) = %v, want %v", c.id, got, c.special)
		}
	}
	if b, ok := tok.TokenBytes(1879); !ok || string(b) != " world" {
		t.Errorf("TokenBytes(1879) = %q, %v, want \" world\"", b, ok)
	}
	if _, ok := tok.Token(tok.VocabSize()); ok {
		t.Errorf("Token(VocabSize()) found a token")
	}
	if got := tok.VocabSize(); got != 151669 {
		t.Errorf("VocabSize = %d, want 151669", got)
	}
	if got := tok.Decode([]int{9707, -1, 1 << 30, 1879}); got != "Hello world" {
		t.Errorf("Decode with bad ids = %q, want them skipped", got)
	}
}

func TestEOS(t *testing.T) {
	tok := qwen3(t)
	if got, want := tok.EOSTokenIDs(), []int{151645}; !slices.Equal(got, want) {
		t.Errorf("EOSTokenIDs = %v, want %v", got, want)
	}
	// generation_config.json adds its ids after eos_token.
	dir := t.TempDir()
	for _, f := range []string{FileTokenizer, FileTokenizerConfig} {
		data, err := os.ReadFile(filepath.Join(qwen3Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gen := `{"bos_token_id": 151643, "eos_token_id": [151645, 151643]}`
	if err := os.WriteFile(filepath.Join(dir, FileGenerationConfig), []byte(gen), 0o644); err != nil {
		t.Fatal(err)
	}
	tok2, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok2.EOSTokenIDs(), []int{151645, 151643}; !slices.Equal(got, want) {
		t.Errorf("EOSTokenIDs = %v, want %v", got, want)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, FileTokenizer)) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(empty dir) error = %v, want fs.ErrNotExist naming %s", err, filepath.Join(dir, FileTokenizer))
	}
	cases := []struct{ name, json, want string }{
		{"bad json", `{`, "unexpected end of JSON"},
		{"wordpiece", `{"model":{"type":"WordPiece"}}`, `model type "WordPiece"`},
		{"nfkc", `{"normalizer":{"type":"NFKC"},"model":{"type":"BPE"}}`, `normalizer "NFKC"`},
		{"gpt2 regex", `{"pre_tokenizer":{"type":"ByteLevel","use_regex":true},"model":{"type":"BPE"}}`, "pre_tokenizer"},
		{"other split", `{"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\s+"},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]},"model":{"type":"BPE"}}`, `unsupported split pattern "\\s+"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := t.TempDir()
			if err := os.WriteFile(filepath.Join(d, FileTokenizer), []byte(c.json), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(d)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load error = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// qwenSpec converts the Qwen3 tokenizer to a Spec as a GGUF file holds it:
// one token list with the added tokens typed control / user-defined.
func qwenSpec(t *testing.T) Spec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(qwen3Dir, FileTokenizer))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := parseTokenizerJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range spec.AddedTokens {
		for len(spec.Tokens) <= a.ID {
			spec.Tokens = append(spec.Tokens, "")
			spec.TokenTypes = append(spec.TokenTypes, TypeUnused)
		}
		spec.Tokens[a.ID] = a.Content
		spec.TokenTypes[a.ID] = TypeUserDefined
		if a.Special {
			spec.TokenTypes[a.ID] = TypeControl
		}
	}
	spec.AddedTokens = nil
	spec.Pre = "qwen2"
	spec.EOSTokenIDs = []int{151645, 151643}
	return spec
}

func TestNewFromSpec(t *testing.T) {
	tok, err := New(qwenSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	ref := loadRef(t)
	for i, c := range ref.Encode {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("case %d Encode(%q):\n got %v\nwant %v", i, c.Text, got, c.IDs)
		}
	}
	for i, c := range ref.Decode {
		if got := tok.Decode(c.IDs); got != c.Text {
			t.Errorf("case %d Decode(%v) = %q, want %q", i, c.IDs, got, c.Text)
		}
	}
	if got, want := tok.EOSTokenIDs(), []int{151645, 151643}; !slices.Equal(got, want) {
		t.Errorf("EOSTokenIDs = %v, want %v", got, want)
	}
	if !tok.IsSpecial(151645) || tok.IsSpecial(151667) {
		t.Errorf("IsSpecial: control/user-defined types not honoured")
	}
}

func TestNewErrors(t *testing.T) {
	base := Spec{Tokens: []string{"a", "b", "ab"}, Merges: []string{"a b"}}
	cases := []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"pre", func(s *Spec) { s.Pre = "llama3" }, `unsupported pre-tokenizer "llama3"`},
		{"merge form", func(s *Spec) { s.Merges = []string{"ab"} }, `merge 0 "ab" is not two tokens`},
		{"merge token", func(s *Spec) { s.Merges = []string{"a c"} }, `token "c" not in vocabulary`},
		{"merged token", func(s *Spec) { s.Merges = []string{"b a"} }, `merged token "ba" not in vocabulary`},
		{"types", func(s *Spec) { s.TokenTypes = []int32{1} }, "1 token types for 3 tokens"},
		{"eos", func(s *Spec) { s.EOSTokenIDs = []int{7} }, "eos token id 7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := base
			c.edit(&s)
			_, err := New(s)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New error = %v, want it to contain %q", err, c.want)
			}
		})
	}
	if tok, err := New(base); err != nil {
		t.Errorf("New(base) = %v", err)
	} else if got := tok.Encode("abba"); !slices.Equal(got, []int{2, 1, 0}) {
		t.Errorf("Encode(abba) = %v, want [2 1 0]", got)
	}
}

// TestMergeHeapMatchesSmall checks the two merge loops agree.
func TestMergeHeapMatchesSmall(t *testing.T) {
	tok := qwen3(t)
	words := []string{"aaaaaaaaaaaaaaaaaaaaaaaaaaa", " internationalization", "中文混合文本", "🦙🦙🦙", "xyzzyplugh", "                ", "0000000"}
	for _, c := range loadVocabTest(t) {
		words = append(words, c.text)
	}
	for _, w := range words {
		if len(w) > smallWord {
			continue
		}
		a, b := tok.mergeSmall(w), tok.mergeHeap(w)
		if !slices.Equal(a, b) {
			t.Errorf("word %q: mergeSmall %v, mergeHeap %v", w, a, b)
		}
	}
}

func TestLongWords(t *testing.T) {
	tok := qwen3(t)
	// One piece far longer than the cache limit, through the heap path.
	for _, s := range []string{strings.Repeat("中文混合", 500), strings.Repeat("a", 3000), strings.Repeat(" ", 1000) + "x"} {
		if got := tok.Decode(tok.Encode(s)); got != s {
			t.Errorf("round trip of %d-byte word failed", len(s))
		}
	}
	want := tok.Encode(strings.Repeat("a", 71))
	if got := tok.Encode(strings.Repeat("a", 71)); !slices.Equal(got, want) {
		t.Errorf("cached encode differs")
	}
}

// TestSplit checks pieces of the pre-tokenizer on the regex's corner cases.
func TestSplit(t *testing.T) {
	cases := []struct {
		in    string
		marks bool
		want  []string
	}{
		{"Hello world", false, []string{"Hello", " world"}},
		{"it's 'S 'LL 'Re 'x", false, []string{"it", "'s", " '", "S", " '", "LL", " '", "Re", " '", "x"}},
		{"a  b", false, []string{"a", " ", " b"}},
		{"a \n\n b", false, []string{"a", " \n\n", " b"}},
		{"x   ", false, []string{"x", "   "}},
		{"x\t!", false, []string{"x", "\t", "!"}},
		{"x !!\n\ny", false, []string{"x", " !!\n\n", "y"}},
		{"12ab", false, []string{"1", "2", "ab"}},
		{"\ta", false, []string{"\ta"}},
		{"\na", false, []string{"\n", "a"}},
		{"é́x", false, []string{"é", "\u0301x"}},
		{"é́!", false, []string{"é", "\u0301!"}},
		{"é́x", true, []string{"é\u0301x"}},
		{" \u0301x", true, []string{" \u0301x"}},
		{"\u00a0\u00a0x", false, []string{"\u00a0", "\u00a0x"}},
	}
	for _, c := range cases {
		sp := splitter{marks: c.marks}
		var got []string
		for i := 0; i < len(c.in); {
			end := sp.next(c.in, i)
			got = append(got, c.in[i:end])
			i = end
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("split(%q, marks=%v) = %q, want %q", c.in, c.marks, got, c.want)
		}
	}
}

func TestLossy(t *testing.T) {
	cases := []struct{ in, want string }{
		{"\xe4\xb8", "\uFFFD"}, // truncated 3-byte character: one replacement
		{"\xe4\xb8a", "\uFFFDa"},
		{"\xff\xfe", "\uFFFD\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate: each byte
		{"\xf0\x9f\xa6", "\uFFFD"},
		{"\xf0\x9f\xa6\x99", "🦙"},
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"a\x80b", "a\uFFFDb"},
	}
	for _, c := range cases {
		out, _ := appendLossy(nil, []byte(c.in), true)
		if string(out) != c.want {
			t.Errorf("lossy(%q) = %q, want %q", c.in, out, c.want)
		}
	}
}

// mixedText is about size bytes of English, code, Chinese, digits and emoji.
func mixedText(size int) string {
	parts := []string{
		"The quick brown fox jumps over the lazy dog. It's 2026, and we've got 12,345 reasons to test tokenizers!\n",
		"func (t *Tokenizer) Encode(text string) []int {\n\tfor i := 0; i < len(text); i++ {\n\t\tids = append(ids, i)\n\t}\n}\n",
		"机器学习是人工智能的一个分支，它使计算机能够从数据中学习。今天的天气很好，我们去公园散步吧。\n",
		"Ünïcödé façade naïve café — “quotes” and emoji 🦙🎉👩‍💻 plus Ελληνικά и русский текст.\n",
		"    indented    with   spaces\t\ttabs\r\n<|im_start|>user\nHi there<|im_end|>\n",
	}
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		b.WriteString(parts[i%len(parts)])
		b.WriteString(strconv.Itoa(i * 7919))
		b.WriteString(" ")
	}
	return b.String()[:size]
}

func BenchmarkEncode100KB(b *testing.B) {
	tok := qwen3(b)
	text := mixedText(100 << 10)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		tok.Encode(text)
	}
}

// BenchmarkEncode100KBCold empties the word cache before every run.
func BenchmarkEncode100KBCold(b *testing.B) {
	tok := qwen3(b)
	text := mixedText(100 << 10)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.cache.mu.Lock()
		tok.cache.m = nil
		tok.cache.mu.Unlock()
		tok.Encode(text)
	}
}

func BenchmarkDecode(b *testing.B) {
	tok := qwen3(b)
	ids := tok.Encode(mixedText(100 << 10))
	b.ResetTimer()
	for b.Loop() {
		tok.Decode(ids)
	}
}

func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		if _, err := Load(qwen3Dir); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLoadQwen35Pattern loads a tiny tokenizer.json with Qwen3.5's split
// pattern and [a, b] merges.
func TestLoadQwen35Pattern(t *testing.T) {
	pattern, err := json.Marshal(regexQwen35)
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"added_tokens":[{"id":3,"content":"<|im_end|>","special":true}],
	"normalizer":{"type":"NFC"},
	"pre_tokenizer":{"type":"Sequence","pretokenizers":[
		{"type":"Split","pattern":{"Regex":` + string(pattern) + `},"behavior":"Isolated","invert":false},
		{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]},
	"decoder":{"type":"ByteLevel"},
	"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]}}`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileTokenizer), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := `{"eos_token": {"content": "<|im_end|>"}}`
	if err := os.WriteFile(filepath.Join(dir, FileTokenizerConfig), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(filepath.Join(dir, FileTokenizer))
	if err != nil {
		t.Fatal(err)
	}
	if !tok.split.marks {
		t.Errorf("qwen35 pattern not recognised")
	}
	if got, want := tok.Encode("abba<|im_end|>"), []int{2, 1, 0, 3}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if got, want := tok.EOSTokenIDs(), []int{3}; !slices.Equal(got, want) {
		t.Errorf("EOSTokenIDs = %v, want %v", got, want)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := qwen3(t)
	text := mixedText(8 << 10)
	want := tok.Encode(text)
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				if got := tok.Encode(text); !slices.Equal(got, want) {
					errs <- "concurrent Encode differs"
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// diverseText is about size bytes of pseudo-random words (Latin, Cyrillic,
// CJK, digits, punctuation): almost every word is new to the word cache.
func diverseText(size int) string {
	alphabets := [][]rune{
		[]rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZéüñ"),
		[]rune("абвгдежзийклмнопрстуфхцчшщыэюя"),
		[]rune("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年"),
		[]rune("0123456789.,;:!?()[]{}<>'\"-_/\\"),
	}
	var b strings.Builder
	x := uint64(88172645463325252)
	next := func(n int) int { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return int(x % uint64(n)) }
	for b.Len() < size {
		a := alphabets[next(len(alphabets))]
		for n := 1 + next(10); n > 0; n-- {
			b.WriteRune(a[next(len(a))])
		}
		b.WriteString([]string{" ", " ", " ", "\n", "  ", "\t"}[next(6)])
	}
	return b.String()
}

// BenchmarkEncode100KBDiverse: random words, word cache emptied every run.
func BenchmarkEncode100KBDiverse(b *testing.B) {
	tok := qwen3(b)
	text := diverseText(100 << 10)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.cache.mu.Lock()
		tok.cache.m = nil
		tok.cache.mu.Unlock()
		tok.Encode(text)
	}
}
