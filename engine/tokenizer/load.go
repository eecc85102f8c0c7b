package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Files Load reads from a model folder.
const (
	FileTokenizer        = "tokenizer.json"
	FileTokenizerConfig  = "tokenizer_config.json"  // optional: eos_token
	FileGenerationConfig = "generation_config.json" // optional: eos_token_id
)

// Load reads the tokenizer of a model folder: tokenizer.json, and the EOS
// tokens from tokenizer_config.json (eos_token) and generation_config.json
// (eos_token_id) where present. dir may also name tokenizer.json itself.
// A folder without tokenizer.json gives an error that matches
// fs.ErrNotExist.
func Load(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, FileTokenizer)
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		path, dir = dir, filepath.Dir(dir)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("load tokenizer: %s not found (%w)", path, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	spec, err := parseTokenizerJSON(data)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	t, err := New(spec)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	eos, err := loadEOS(dir, t)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	t.eos = eos
	return t, nil
}

type tokenizerJSON struct {
	AddedTokens []struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer   *component `json:"normalizer"`
	PreTokenizer *component `json:"pre_tokenizer"`
	Decoder      *component `json:"decoder"`
	Model        struct {
		Type                    string          `json:"type"`
		Vocab                   json.RawMessage `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
		IgnoreMerges            bool            `json:"ignore_merges"`
		ByteFallback            bool            `json:"byte_fallback"`
		ContinuingSubwordPrefix string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         string          `json:"end_of_word_suffix"`
	} `json:"model"`
}

// component is a normalizer, pre-tokenizer or decoder of tokenizer.json.
type component struct {
	Type          string      `json:"type"`
	Normalizers   []component `json:"normalizers"`
	Pretokenizers []component `json:"pretokenizers"`
	Decoders      []component `json:"decoders"`
	Pattern       struct {
		Regex  string `json:"Regex"`
		String string `json:"String"`
	} `json:"pattern"`
	Behavior       string `json:"behavior"`
	Invert         bool   `json:"invert"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
}

// parseTokenizerJSON checks that tokenizer.json describes the pipeline this
// package implements and turns it into a Spec.
func parseTokenizerJSON(data []byte) (Spec, error) {
	var tj tokenizerJSON
	if err := json.Unmarshal(data, &tj); err != nil {
		return Spec{}, err
	}
	m := &tj.Model
	if m.Type != "" && m.Type != "BPE" {
		return Spec{}, fmt.Errorf("model type %q: only BPE is supported", m.Type)
	}
	if m.ByteFallback || m.ContinuingSubwordPrefix != "" || m.EndOfWordSuffix != "" {
		return Spec{}, errors.New("BPE with byte_fallback, continuing_subword_prefix or end_of_word_suffix is not supported")
	}
	if n := tj.Normalizer; n != nil && n.Type != "NFC" {
		return Spec{}, fmt.Errorf("normalizer %q: only NFC is supported", n.Type)
	}
	pre, err := preKind(tj.PreTokenizer)
	if err != nil {
		return Spec{}, err
	}
	if d := tj.Decoder; d == nil || d.Type != "ByteLevel" {
		return Spec{}, errors.New("decoder: only ByteLevel is supported")
	}
	spec := Spec{Pre: pre, IgnoreMerges: m.IgnoreMerges}
	vocab, err := parseVocab(m.Vocab)
	if err != nil {
		return Spec{}, fmt.Errorf("model.vocab: %w", err)
	}
	n := 0
	for _, e := range vocab {
		id := e.id
		if id < 0 {
			return Spec{}, fmt.Errorf("vocab has negative id %d", id)
		}
		n = max(n, id+1)
	}
	spec.Tokens = make([]string, n)
	spec.TokenTypes = make([]int32, n)
	for i := range spec.TokenTypes {
		spec.TokenTypes[i] = TypeUnused // gaps in the ids
	}
	for _, e := range vocab {
		tok, id := e.tok, e.id
		if spec.TokenTypes[id] != TypeUnused {
			return Spec{}, fmt.Errorf("vocab id %d is used twice (%q, %q)", id, spec.Tokens[id], tok)
		}
		spec.Tokens[id], spec.TokenTypes[id] = tok, TypeNormal
	}
	if spec.Merges, err = parseMerges(m.Merges); err != nil {
		return Spec{}, err
	}
	for _, a := range tj.AddedTokens {
		spec.AddedTokens = append(spec.AddedTokens, AddedToken{
			ID: a.ID, Content: a.Content, Special: a.Special,
			LStrip: a.LStrip, RStrip: a.RStrip, SingleWord: a.SingleWord,
		})
	}
	return spec, nil
}

// preKind recognises Qwen's pre-tokenizer: a Split on one of the known
// patterns (behavior Isolated) followed by ByteLevel without its own regex.
func preKind(c *component) (string, error) {
	if c == nil || c.Type != "Sequence" || len(c.Pretokenizers) != 2 {
		return "", errors.New("pre_tokenizer: expected Sequence of Split and ByteLevel")
	}
	sp, bl := c.Pretokenizers[0], c.Pretokenizers[1]
	if sp.Type != "Split" || sp.Behavior != "Isolated" || sp.Invert {
		return "", errors.New("pre_tokenizer: expected a Split with behavior Isolated first")
	}
	if bl.Type != "ByteLevel" || bl.AddPrefixSpace || (bl.UseRegex != nil && *bl.UseRegex) {
		return "", errors.New("pre_tokenizer: expected ByteLevel without prefix space or regex second")
	}
	switch sp.Pattern.Regex {
	case regexQwen2:
		return PreQwen2, nil
	case regexQwen35:
		return PreQwen35, nil
	}
	return "", fmt.Errorf("pre_tokenizer: unsupported split pattern %q", sp.Pattern.Regex)
}

// loadEOS collects the EOS ids: tokenizer_config.json eos_token, then
// generation_config.json eos_token_id (a number or a list).
func loadEOS(dir string, t *Tokenizer) ([]int, error) {
	var eos []int
	addID := func(id int, path string) error {
		if !t.valid(id) {
			return fmt.Errorf("%s: eos token id %d not in vocabulary of %d", path, id, t.VocabSize())
		}
		for _, e := range eos {
			if e == id {
				return nil
			}
		}
		eos = append(eos, id)
		return nil
	}
	path := filepath.Join(dir, FileTokenizerConfig)
	if data, err := os.ReadFile(path); err == nil {
		var cfg struct {
			EOSToken json.RawMessage `json:"eos_token"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if tok, ok, err := tokenText(cfg.EOSToken); err != nil {
			return nil, fmt.Errorf("%s: eos_token: %w", path, err)
		} else if ok {
			id, found := t.TokenID(tok)
			if !found {
				return nil, fmt.Errorf("%s: eos_token %q not in vocabulary", path, tok)
			}
			if err := addID(id, path); err != nil {
				return nil, err
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	path = filepath.Join(dir, FileGenerationConfig)
	if data, err := os.ReadFile(path); err == nil {
		var cfg struct {
			EOSTokenID json.RawMessage `json:"eos_token_id"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		ids, err := intOrList(cfg.EOSTokenID)
		if err != nil {
			return nil, fmt.Errorf("%s: eos_token_id: %w", path, err)
		}
		for _, id := range ids {
			if err := addID(id, path); err != nil {
				return nil, err
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return eos, nil
}

// tokenText reads a token given as "text" or {"content": "text", ...}.
func tokenText(raw json.RawMessage) (string, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	if raw[0] == '{' {
		var obj struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return "", false, err
		}
		return obj.Content, obj.Content != "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, err
	}
	return s, s != "", nil
}

func intOrList(raw json.RawMessage) ([]int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '[' {
		var ids []int
		err := json.Unmarshal(raw, &ids)
		return ids, err
	}
	var id int
	if err := json.Unmarshal(raw, &id); err != nil {
		return nil, err
	}
	return []int{id}, nil
}
