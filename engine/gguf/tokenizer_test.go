package gguf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestQwen3VocabThroughGGUF writes the real Qwen3 tokenizer into GGUF
// metadata the way llama.cpp's converter does (tokens by id padded to the
// embedding size with [PADn] unused entries, special added tokens as control,
// the others user-defined, merges as "a b"), parses the file and checks the
// tokenizer built from it against Hugging Face's reference encodings.
func TestQwen3VocabThroughGGUF(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the 11 MB tokenizer.json")
	}
	dir := filepath.Join("..", "..", "testdata", "tokenizers", "qwen3")
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tj struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		Model struct {
			Vocab  map[string]int `json:"vocab"`
			Merges [][2]string    `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(raw, &tj); err != nil {
		t.Fatal(err)
	}
	const vocabSize = 151936 // Qwen3's embedding rows
	tokens := make([]string, vocabSize)
	types := make([]int32, vocabSize)
	for i := range tokens {
		tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), 5
	}
	for s, id := range tj.Model.Vocab {
		tokens[id], types[id] = s, 1
	}
	for _, a := range tj.AddedTokens {
		tokens[a.ID], types[a.ID] = a.Content, 4
		if a.Special {
			types[a.ID] = 3
		}
	}
	merges := make([]string, len(tj.Model.Merges))
	for i, m := range tj.Model.Merges {
		merges[i] = m[0] + " " + m[1]
	}
	w := newBuilder()
	w.add("general.architecture", "qwen3")
	w.add("tokenizer.ggml.model", "gpt2")
	w.add("tokenizer.ggml.pre", "qwen2")
	w.addRaw("tokenizer.ggml.tokens", ValArray, arr(nil, tokens))
	w.addRaw("tokenizer.ggml.token_type", ValArray, arr(nil, types))
	w.addRaw("tokenizer.ggml.merges", ValArray, arr(nil, merges))
	w.add("tokenizer.ggml.eos_token_id", uint32(151645))
	w.add("tokenizer.ggml.padding_token_id", uint32(151643))
	w.add("tokenizer.ggml.bos_token_id", uint32(151643))
	f, err := Parse("qwen3-vocab.gguf", w.bytes())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := f.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	refRaw, err := os.ReadFile(filepath.Join(dir, "tokenizer_ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Encode []struct {
			Text string `json:"text"`
			IDs  []int  `json:"ids"`
		} `json:"encode"`
	}
	if err := json.Unmarshal(refRaw, &ref); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, c := range ref.Encode {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			if bad++; bad <= 5 {
				t.Errorf("Encode(%q) = %v, want %v", c.Text, got, c.IDs)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d reference encodings differ", bad, len(ref.Encode))
	}
	if got := tok.EOSTokenIDs(); !slices.Equal(got, []int{151645}) {
		t.Errorf("eos %v, want [151645]", got)
	}
}
