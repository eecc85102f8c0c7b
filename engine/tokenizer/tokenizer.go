// Package tokenizer is the Qwen tokenizer: byte-level BPE as Hugging Face
// tokenizers runs it for Qwen2, Qwen2.5, Qwen3 and Qwen3.5 (NFC
// normalisation, Qwen's pre-tokenizer split, GPT-2 byte alphabet, merges by
// rank, added and special tokens matched in the text first), decoding, and a
// streaming detokenizer that only ever emits whole UTF-8 characters.
//
// A Tokenizer is built from a folder with tokenizer.json (Load) or from a
// vocabulary and merges such as a GGUF file carries (New). It is safe for
// concurrent use; a Stream is not.
package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// GGUF token types (tokenizer.ggml.token_type).
const (
	TypeNormal      = 1
	TypeUnknown     = 2
	TypeControl     = 3 // special token, matched in the text before BPE
	TypeUserDefined = 4 // added (non-special) token, matched in the text before BPE
	TypeUnused      = 5 // padding entry: has an id, never produced
	TypeByte        = 6
)

// AddedToken is a token matched in the input text before BPE, as in
// tokenizer.json's added_tokens.
type AddedToken struct {
	ID      int
	Content string // the text it matches, as written (not byte-level)
	Special bool   // a control token such as <|im_end|> (not text a model writes)
	LStrip  bool   // also swallows whitespace before it
	RStrip  bool   // also swallows whitespace after it
	// SingleWord: only matched when not inside a word.
	SingleWord bool
}

// Spec describes a tokenizer for New, in the terms of GGUF metadata.
type Spec struct {
	// Tokens is the vocabulary by id (tokenizer.ggml.tokens), spelled as
	// tokenizer.json and GGUF spell them: BPE tokens in the GPT-2 byte-level
	// alphabet ("Ġworld"), added tokens as plain text ("<|im_end|>").
	Tokens []string
	// TokenTypes are the GGUF types by id (tokenizer.ggml.token_type), same
	// length as Tokens; nil means all TypeNormal. TypeControl and
	// TypeUserDefined tokens become added tokens (Special for control).
	TokenTypes []int32
	// Merges are the BPE merges in rank order, each "left right" in the
	// byte-level alphabet (tokenizer.ggml.merges).
	Merges []string
	// AddedTokens are further added tokens (tokenizer.json added_tokens);
	// their ids may lie beyond Tokens. They take precedence over Tokens.
	AddedTokens []AddedToken
	// Pre is the pre-tokenizer: PreQwen2 (tokenizer.ggml.pre "qwen2", the
	// default when empty) or PreQwen35.
	Pre string
	// IgnoreMerges: a word that is itself in the vocabulary is one token
	// without running the merges (tokenizer.json model.ignore_merges).
	IgnoreMerges bool
	// EOSTokenIDs are the ids that end generation (tokenizer.ggml.eos_token_id,
	// tokenizer.ggml.eot_token_id, ...).
	EOSTokenIDs []int
}

// Tokenizer encodes text to token ids and back.
type Tokenizer struct {
	tokens       []string // by id, vocabulary spelling; "" for no token
	has          []bool   // by id: the id is a token
	ids          map[string]int
	raw          []string         // by id: the bytes the token stands for
	isBPE        []bool           // by id: a token of the BPE vocabulary
	special      []bool           // by id
	bpeVocab     map[string]int32 // raw bytes -> id, BPE tokens only
	byteTok      [256]int32       // id of each single-byte token, -1 if none
	merges       map[uint64]merge
	ignoreMerges bool
	split        splitter
	added        addedMatcher
	eos          []int
	cache        wordCache
}

// New builds a tokenizer from a vocabulary, merges and added tokens.
func New(spec Spec) (*Tokenizer, error) {
	if spec.TokenTypes != nil && len(spec.TokenTypes) != len(spec.Tokens) {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(spec.TokenTypes), len(spec.Tokens))
	}
	t := &Tokenizer{ignoreMerges: spec.IgnoreMerges}
	switch spec.Pre {
	case "", PreQwen2:
	case PreQwen35:
		t.split.marks = true
	default:
		return nil, fmt.Errorf("tokenizer: unsupported pre-tokenizer %q (supported: %s, %s)", spec.Pre, PreQwen2, PreQwen35)
	}
	n := len(spec.Tokens)
	for _, a := range spec.AddedTokens {
		if a.ID < 0 {
			return nil, fmt.Errorf("tokenizer: added token %q has negative id %d", a.Content, a.ID)
		}
		if a.Content == "" {
			return nil, fmt.Errorf("tokenizer: added token %d is empty", a.ID)
		}
		n = max(n, a.ID+1)
	}
	t.tokens = make([]string, n)
	t.has = make([]bool, n)
	t.raw = make([]string, n)
	t.special = make([]bool, n)
	t.isBPE = make([]bool, n)
	t.ids = make(map[string]int, n)
	t.bpeVocab = make(map[string]int32, n)

	var added []AddedToken
	for id, tok := range spec.Tokens {
		if tok == "" {
			continue // no token has this id
		}
		typ := int32(TypeNormal)
		if spec.TokenTypes != nil {
			typ = spec.TokenTypes[id]
		}
		switch typ {
		case TypeControl, TypeUserDefined:
			added = append(added, AddedToken{ID: id, Content: tok, Special: typ == TypeControl})
			continue
		case TypeUnused:
			t.setToken(id, tok)
			continue
		}
		t.setToken(id, tok)
		t.isBPE[id] = true
		raw := t.raw[id]
		if _, dup := t.bpeVocab[raw]; !dup {
			t.bpeVocab[raw] = int32(id)
		}
	}
	// Explicit added tokens override what Tokens says about their ids.
	byID := map[int]int{}
	for i, a := range added {
		byID[a.ID] = i
	}
	for _, a := range spec.AddedTokens {
		if i, ok := byID[a.ID]; ok {
			added[i] = a
		} else {
			byID[a.ID] = len(added)
			added = append(added, a)
		}
	}
	for _, a := range added {
		if t.has[a.ID] && t.tokens[a.ID] != a.Content {
			if raw := t.raw[a.ID]; t.bpeVocab[raw] == int32(a.ID) {
				delete(t.bpeVocab, raw)
			}
			t.isBPE[a.ID] = false
			if t.ids[t.tokens[a.ID]] == a.ID {
				delete(t.ids, t.tokens[a.ID])
			}
		}
		t.setToken(a.ID, a.Content)
		t.ids[a.Content] = a.ID // added tokens win over a BPE token of the same spelling
		t.special[a.ID] = a.Special
	}
	t.added = newAddedMatcher(added)

	for b := range t.byteTok {
		t.byteTok[b] = -1
		if id, ok := t.bpeVocab[string([]byte{byte(b)})]; ok {
			t.byteTok[b] = id
		}
	}
	t.merges = make(map[uint64]merge, len(spec.Merges))
	var joined []byte
	for rank, m := range spec.Merges {
		left, right, ok := strings.Cut(m, " ")
		if !ok || left == "" || right == "" {
			return nil, fmt.Errorf("tokenizer: merge %d %q is not two tokens separated by a space", rank, m)
		}
		joined = append(append(joined[:0], left...), right...)
		a, okA := t.bpeID(left)
		b, okB := t.bpeID(right)
		c, okC := t.bpeIDBytes(joined)
		switch {
		case !okA:
			return nil, fmt.Errorf("tokenizer: merge %d %q: token %q not in vocabulary", rank, m, left)
		case !okB:
			return nil, fmt.Errorf("tokenizer: merge %d %q: token %q not in vocabulary", rank, m, right)
		case !okC:
			return nil, fmt.Errorf("tokenizer: merge %d %q: merged token %q not in vocabulary", rank, m, left+right)
		}
		k := pairKey(a, b)
		if _, dup := t.merges[k]; !dup {
			t.merges[k] = merge{rank: uint32(rank), id: c}
		}
	}
	for _, id := range spec.EOSTokenIDs {
		if id < 0 || id >= n || !t.has[id] {
			return nil, fmt.Errorf("tokenizer: eos token id %d not in vocabulary of %d", id, n)
		}
		if !slices.Contains(t.eos, id) {
			t.eos = append(t.eos, id)
		}
	}
	return t, nil
}

func (t *Tokenizer) setToken(id int, tok string) {
	t.tokens[id] = tok
	t.has[id] = true
	t.raw[id] = byteLevelDecodeString(tok)
	if _, dup := t.ids[tok]; !dup {
		t.ids[tok] = id
	}
}

// bpeID looks a byte-level spelled token up among the BPE tokens.
func (t *Tokenizer) bpeID(tok string) (int32, bool) {
	if id, ok := t.ids[tok]; ok && t.isBPE[id] {
		return int32(id), true
	}
	id, ok := t.bpeVocab[byteLevelDecodeString(tok)]
	return id, ok
}

func (t *Tokenizer) bpeIDBytes(tok []byte) (int32, bool) {
	if id, ok := t.ids[string(tok)]; ok && t.isBPE[id] { // no allocation
		return int32(id), true
	}
	return t.bpeID(string(tok))
}

// Encode returns the token ids of text. Added and special tokens written in
// the text (such as "<|im_start|>") are matched as those tokens; no BOS or
// other tokens are added. Invalid UTF-8 is encoded byte by byte.
func (t *Tokenizer) Encode(text string) []int {
	ids := make([]int, 0, len(text)/3+1)
	for pos := 0; pos < len(text); {
		start, end, id := t.added.find(text, pos)
		if start < 0 {
			return t.encodeOrdinary(text[pos:], ids)
		}
		ids = t.encodeOrdinary(text[pos:start], ids)
		ids = append(ids, id)
		pos = end
	}
	return ids
}

// encodeOrdinary encodes text that holds no added token.
func (t *Tokenizer) encodeOrdinary(text string, ids []int) []int {
	if text == "" {
		return ids
	}
	text = nfc(text)
	for i := 0; i < len(text); {
		end := t.split.next(text, i)
		ids = t.bpe(text[i:end], ids)
		i = end
	}
	return ids
}

// nfc normalises s to NFC as Hugging Face does. x/text inserts U+034F
// COMBINING GRAPHEME JOINER after every 30 combining marks in a row (the
// Stream-Safe Text Format); HF does not, so joiners that were not in s are
// taken out again.
func nfc(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			out := norm.NFC.String(s)
			if len(out) != len(s) && strings.Contains(out, cgj) && !strings.Contains(s, cgj) {
				out = strings.ReplaceAll(out, cgj, "")
			}
			return out
		}
	}
	return s // ASCII is always NFC
}

const cgj = "\u034f"

// Decode returns the text of ids: the bytes of the tokens concatenated, each
// maximal invalid UTF-8 subsequence replaced by U+FFFD (as Hugging Face
// decodes). Special tokens are included as their text; ids that are not
// tokens are skipped, as Hugging Face skips them.
func (t *Tokenizer) Decode(ids []int) string {
	n := 0
	for _, id := range ids {
		if t.valid(id) {
			n += len(t.raw[id])
		}
	}
	buf := make([]byte, 0, n)
	for _, id := range ids {
		if t.valid(id) {
			buf = append(buf, t.raw[id]...)
		}
	}
	if utf8.Valid(buf) {
		return string(buf)
	}
	out, _ := appendLossy(nil, buf, true)
	return string(out)
}

func (t *Tokenizer) valid(id int) bool { return id >= 0 && id < len(t.has) && t.has[id] }

// TokenID returns the id of a token given in its vocabulary spelling
// (byte-level for BPE tokens, e.g. "Ġworld"; plain text for added tokens,
// e.g. "<|im_end|>").
func (t *Tokenizer) TokenID(s string) (int, bool) {
	id, ok := t.ids[s]
	return id, ok
}

// Token returns the vocabulary spelling of id (see TokenID).
func (t *Tokenizer) Token(id int) (string, bool) {
	if !t.valid(id) {
		return "", false
	}
	return t.tokens[id], true
}

// TokenBytes returns the bytes token id stands for in decoded text (for a
// byte-level token possibly part of a UTF-8 character). The slice is a copy.
func (t *Tokenizer) TokenBytes(id int) ([]byte, bool) {
	if !t.valid(id) {
		return nil, false
	}
	return []byte(t.raw[id]), true
}

// IsSpecial reports whether id is a special (control) token such as
// <|im_end|>, which an API hides when asked to skip special tokens.
func (t *Tokenizer) IsSpecial(id int) bool { return t.valid(id) && t.special[id] }

// VocabSize is one more than the largest token id (151669 for Qwen3; the
// model's embedding may have more rows).
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// EOSTokenIDs are the ids that end generation, in order of declaration,
// without duplicates. The slice is a copy.
func (t *Tokenizer) EOSTokenIDs() []int { return slices.Clone(t.eos) }

// Stream turns token ids into text as they are generated, emitting only
// whole UTF-8 characters: a character split over several tokens comes out
// with its last byte. The concatenation of everything Add and Flush return
// equals Decode of all the ids.
type Stream struct {
	t       *Tokenizer
	pending []byte
}

// NewStream starts a streaming detokenizer.
func (t *Tokenizer) NewStream() *Stream { return &Stream{t: t} }

// Add takes the next token and returns the text it completes (often "").
// Ids that are not tokens are skipped, as in Decode.
func (s *Stream) Add(id int) string {
	if !s.t.valid(id) {
		return ""
	}
	s.pending = append(s.pending, s.t.raw[id]...)
	out, held := appendLossy(nil, s.pending, false)
	s.pending = append(s.pending[:0], s.pending[len(s.pending)-held:]...)
	return string(out)
}

// Flush returns what is held back at the end of the stream (an incomplete
// character, as U+FFFD) and resets the stream.
func (s *Stream) Flush() string {
	out, _ := appendLossy(nil, s.pending, true)
	s.pending = s.pending[:0]
	return string(out)
}
