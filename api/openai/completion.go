package openai

import (
	"bytes"
	"encoding/json"
)

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model            string             `json:"model"`
	Prompt           Prompt             `json:"prompt"`
	Suffix           string             `json:"suffix,omitempty"`
	MaxTokens        *int               `json:"max_tokens,omitempty"`
	Temperature      *float64           `json:"temperature,omitempty"`
	TopP             *float64           `json:"top_p,omitempty"`
	N                *int               `json:"n,omitempty"`
	BestOf           *int               `json:"best_of,omitempty"`
	Stream           bool               `json:"stream,omitempty"`
	StreamOptions    *StreamOptions     `json:"stream_options,omitempty"`
	Logprobs         *int               `json:"logprobs,omitempty"` // number of alternatives, 0..20
	Echo             bool               `json:"echo,omitempty"`
	Stop             Stop               `json:"stop,omitempty"`
	PresencePenalty  *float64           `json:"presence_penalty,omitempty"`
	FrequencyPenalty *float64           `json:"frequency_penalty,omitempty"`
	LogitBias        map[string]float64 `json:"logit_bias,omitempty"`
	Seed             *int64             `json:"seed,omitempty"`
	User             string             `json:"user,omitempty"`

	// vLLM extras.
	TopK              *int     `json:"top_k,omitempty"`
	MinP              *float64 `json:"min_p,omitempty"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
	MinTokens         *int     `json:"min_tokens,omitempty"`
	IgnoreEOS         bool     `json:"ignore_eos,omitempty"`
}

// MaxNewTokens is max_tokens, or 0 when unset (OpenAI's default is 16; the
// worker decides).
func (r *CompletionRequest) MaxNewTokens() int {
	if r.MaxTokens == nil {
		return 0
	}
	return *r.MaxTokens
}

// Choices is n, defaulting to 1.
func (r *CompletionRequest) Choices() int {
	if r.N == nil {
		return 1
	}
	return *r.N
}

// IncludeUsage reports whether a stream ends with a usage chunk.
func (r *CompletionRequest) IncludeUsage() bool {
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

// Prompt is a prompt (or embeddings input): a string, a list of strings, a
// list of token ids or a list of token-id lists on the wire. Exactly one of
// Texts and Tokens is non-nil after decoding; each element is one prompt. It
// marshals back in the form it came in.
type Prompt struct {
	Texts  []string
	Tokens [][]int
	form   promptForm
}

type promptForm uint8

const (
	formString promptForm = iota
	formStrings
	formTokens
	formTokenLists
)

// TextPrompt makes a single-string prompt.
func TextPrompt(s string) Prompt { return Prompt{Texts: []string{s}} }

// Len is the number of prompts.
func (p Prompt) Len() int { return len(p.Texts) + len(p.Tokens) }

// MarshalJSON writes the wire form it was decoded from.
func (p Prompt) MarshalJSON() ([]byte, error) {
	switch {
	case p.Tokens != nil && p.form == formTokens && len(p.Tokens) == 1:
		return json.Marshal(p.Tokens[0])
	case p.Tokens != nil:
		return json.Marshal(p.Tokens)
	case p.form == formStrings || len(p.Texts) != 1:
		if p.Texts == nil {
			return []byte("null"), nil
		}
		return json.Marshal(p.Texts)
	}
	return json.Marshal(p.Texts[0])
}

// UnmarshalJSON accepts the four wire forms. The error names "prompt"; the
// embeddings request renames it to "input".
func (p *Prompt) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	bad := func() error {
		return InvalidRequest("prompt", "prompt must be a string, an array of strings, an array of token ids or an array of arrays of token ids")
	}
	*p = Prompt{}
	if len(data) == 0 {
		return bad()
	}
	switch data[0] {
	case 'n':
		return nil
	case '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return bad()
		}
		p.Texts, p.form = []string{s}, formString
		return nil
	case '[':
	default:
		return bad()
	}
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		return bad()
	}
	if len(items) == 0 {
		p.Texts, p.form = []string{}, formStrings
		return nil
	}
	switch bytes.TrimSpace(items[0])[0] {
	case '"':
		var ss []string
		if err := json.Unmarshal(data, &ss); err != nil {
			return bad()
		}
		p.Texts, p.form = ss, formStrings
	case '[':
		var tt [][]int
		if err := json.Unmarshal(data, &tt); err != nil {
			return bad()
		}
		p.Tokens, p.form = tt, formTokenLists
	default:
		var t []int
		if err := json.Unmarshal(data, &t); err != nil {
			return bad()
		}
		p.Tokens, p.form = [][]int{t}, formTokens
	}
	return nil
}

// CompletionResponse is a non-streaming completions answer, and also the
// shape of each streaming chunk (object "text_completion" in both, as OpenAI
// sends it).
type CompletionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"` // "text_completion"
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage,omitempty"`
	SystemFingerprint string             `json:"system_fingerprint,omitempty"`
	MacpoolWorker     string             `json:"macpool_worker,omitempty"`
}

// CompletionChoice is one choice; FinishReason is null in a stream until the
// choice ends.
type CompletionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}
