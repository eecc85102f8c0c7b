package openai

import (
	"bytes"
	"encoding/json"
)

// Usage counts tokens of one request (all choices together).
type Usage struct {
	PromptTokens            int                      `json:"prompt_tokens"`
	CompletionTokens        int                      `json:"completion_tokens"`
	TotalTokens             int                      `json:"total_tokens"`
	PromptTokensDetails     *PromptTokensDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// PromptTokensDetails: CachedTokens are prompt tokens served from a prefix cache.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// CompletionTokensDetails: ReasoningTokens are the completion tokens spent
// inside the thinking block (reasoning_content).
type CompletionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// ChoiceLogprobs are the chat-style logprobs of a choice (or of one delta).
type ChoiceLogprobs struct {
	Content []TokenLogprob `json:"content"`
	Refusal []TokenLogprob `json:"refusal"`
}

// TokenLogprob is one sampled token with its alternatives.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one alternative at a position.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// CompletionLogprobs are the legacy logprobs of /v1/completions.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// Stop is the stop parameter: a string or a list of strings on the wire,
// always a list here. It marshals as a list.
type Stop []string

// UnmarshalJSON accepts null, a string or an array of strings.
func (s *Stop) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case string(data) == "null":
		*s = nil
		return nil
	case len(data) > 0 && data[0] == '"':
		var one string
		if err := json.Unmarshal(data, &one); err != nil {
			return InvalidRequest("stop", "stop must be a string or an array of strings")
		}
		*s = Stop{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return InvalidRequest("stop", "stop must be a string or an array of strings")
	}
	*s = many
	return nil
}

// Tool is a tool the model may call. Only function tools exist.
type Tool struct {
	Type     string             `json:"type"`
	Function FunctionDefinition `json:"function"`
}

// FunctionDefinition describes a callable function; Parameters is a JSON
// schema kept verbatim.
type FunctionDefinition struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ToolCall is a complete tool call in a message or a non-streaming response.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function part of a tool call; Arguments is a JSON text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolCallDelta is a piece of a tool call in a stream chunk: the first delta
// of a call carries ID, Type and Function.Name; later ones append to
// Function.Arguments. Index tells which call of the choice it belongs to.
type ToolCallDelta struct {
	Index    int                `json:"index"`
	ID       string             `json:"id,omitempty"`
	Type     string             `json:"type,omitempty"`
	Function *FunctionCallDelta `json:"function,omitempty"`
}

// FunctionCallDelta is the function part of a ToolCallDelta.
type FunctionCallDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// StreamOptions are the stream_options of a request.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage,omitempty"`
}
