package openai

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Message roles accepted in a chat request.
const (
	RoleSystem    = "system"
	RoleDeveloper = "developer"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// ChatCompletionRequest is the body of POST /v1/chat/completions. Pointer
// fields are nil when the client left them out, so the worker can apply the
// model's generation defaults.
type ChatCompletionRequest struct {
	Model               string             `json:"model"`
	Messages            []ChatMessage      `json:"messages"`
	MaxTokens           *int               `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int               `json:"max_completion_tokens,omitempty"`
	Temperature         *float64           `json:"temperature,omitempty"`
	TopP                *float64           `json:"top_p,omitempty"`
	N                   *int               `json:"n,omitempty"`
	Stream              bool               `json:"stream,omitempty"`
	StreamOptions       *StreamOptions     `json:"stream_options,omitempty"`
	Stop                Stop               `json:"stop,omitempty"`
	PresencePenalty     *float64           `json:"presence_penalty,omitempty"`
	FrequencyPenalty    *float64           `json:"frequency_penalty,omitempty"`
	LogitBias           map[string]float64 `json:"logit_bias,omitempty"`
	Logprobs            bool               `json:"logprobs,omitempty"`
	TopLogprobs         *int               `json:"top_logprobs,omitempty"`
	Seed                *int64             `json:"seed,omitempty"`
	User                string             `json:"user,omitempty"`
	Tools               []Tool             `json:"tools,omitempty"`
	ToolChoice          *ToolChoice        `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool              `json:"parallel_tool_calls,omitempty"`
	ResponseFormat      *ResponseFormat    `json:"response_format,omitempty"`
	ReasoningEffort     string             `json:"reasoning_effort,omitempty"`

	// vLLM / Qwen extras.
	TopK                 *int                       `json:"top_k,omitempty"` // 0 or -1 disables
	MinP                 *float64                   `json:"min_p,omitempty"`
	RepetitionPenalty    *float64                   `json:"repetition_penalty,omitempty"`
	MinTokens            *int                       `json:"min_tokens,omitempty"`
	IgnoreEOS            bool                       `json:"ignore_eos,omitempty"`
	ChatTemplateKwargs   map[string]json.RawMessage `json:"chat_template_kwargs,omitempty"`  // values verbatim, e.g. {"enable_thinking":false}
	AddGenerationPrompt  *bool                      `json:"add_generation_prompt,omitempty"` // default true
	ContinueFinalMessage bool                       `json:"continue_final_message,omitempty"`
	// Truncation "auto" (macpool; the Responses API's truncation) drops the
	// oldest messages after the system ones, as few as needed, when the
	// prompt and its completion do not fit the model's context; "" or
	// "disabled" refuses such a request with a 400.
	Truncation string `json:"truncation,omitempty"`
}

// MaxNewTokens is the completion-token limit the client asked for
// (max_completion_tokens, else max_tokens), or 0 when it set none.
func (r *ChatCompletionRequest) MaxNewTokens() int {
	switch {
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		return *r.MaxTokens
	}
	return 0
}

// Choices is n, defaulting to 1.
func (r *ChatCompletionRequest) Choices() int {
	if r.N == nil {
		return 1
	}
	return *r.N
}

// IncludeUsage reports whether a stream ends with a usage chunk.
func (r *ChatCompletionRequest) IncludeUsage() bool {
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

// ChatMessage is one message of the conversation.
type ChatMessage struct {
	Role             string     `json:"role"`
	Content          *Content   `json:"content,omitempty"` // nil: null or absent (assistant with tool_calls)
	Name             string     `json:"name,omitempty"`
	ReasoningContent string     `json:"reasoning_content,omitempty"` // earlier assistant thinking, for templates that render it
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
}

// Content is a message content: a string, or a list of parts on the wire.
// Parts is nil for the string form; it marshals back in the form it came in.
type Content struct {
	Text  string
	Parts []ContentPart
}

// ContentPart is one part of a list content. Only "text" parts can be
// served; the others are kept so that Validate can name them.
type ContentPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text,omitempty"`
	ImageURL json.RawMessage `json:"image_url,omitempty"`
}

// String is the text of the content, parts concatenated.
func (c *Content) String() string {
	if c == nil {
		return ""
	}
	if c.Parts == nil {
		return c.Text
	}
	if len(c.Parts) == 1 {
		return c.Parts[0].Text
	}
	var b strings.Builder
	for _, p := range c.Parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// TextContent makes a string content.
func TextContent(s string) *Content { return &Content{Text: s} }

// MarshalJSON writes the string or list form.
func (c Content) MarshalJSON() ([]byte, error) {
	if c.Parts != nil {
		return json.Marshal(c.Parts)
	}
	return json.Marshal(c.Text)
}

// UnmarshalJSON accepts a string or a list of parts.
func (c *Content) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		*c = Content{}
		if err := json.Unmarshal(data, &c.Text); err != nil {
			return InvalidRequest("content", "content must be a string or an array of content parts")
		}
		return nil
	}
	if len(data) == 0 || data[0] != '[' {
		return InvalidRequest("content", "content must be a string or an array of content parts")
	}
	var parts []ContentPart
	if err := json.Unmarshal(data, &parts); err != nil {
		return InvalidRequest("content", "content must be a string or an array of content parts: %s", typeErrorText(err))
	}
	if parts == nil {
		parts = []ContentPart{}
	}
	*c = Content{Parts: parts}
	return nil
}

// Tool choice modes.
const (
	ToolChoiceNone     = "none"
	ToolChoiceAuto     = "auto"
	ToolChoiceRequired = "required"
	ToolChoiceFunction = "function" // a named function, in Function
)

// ToolChoice is "none" | "auto" | "required" or
// {"type":"function","function":{"name":...}} on the wire.
type ToolChoice struct {
	Mode     string // one of the ToolChoice* constants
	Function string // the function name when Mode is "function"
}

// MarshalJSON writes the wire form.
func (t ToolChoice) MarshalJSON() ([]byte, error) {
	if t.Mode == ToolChoiceFunction {
		var w toolChoiceWire
		w.Type = "function"
		w.Function.Name = t.Function
		return json.Marshal(w)
	}
	return json.Marshal(t.Mode)
}

type toolChoiceWire struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

// UnmarshalJSON accepts a mode string or a named function object.
func (t *ToolChoice) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var mode string
		if err := json.Unmarshal(data, &mode); err != nil {
			return InvalidRequest("tool_choice", "tool_choice must be a string or an object")
		}
		*t = ToolChoice{Mode: mode}
		return nil
	}
	var w toolChoiceWire
	if len(data) == 0 || data[0] != '{' || json.Unmarshal(data, &w) != nil {
		return InvalidRequest("tool_choice", `tool_choice must be "none", "auto", "required" or {"type":"function","function":{"name":...}}`)
	}
	if w.Type != "function" {
		return InvalidRequest("tool_choice.type", "tool_choice.type must be \"function\", got %q", w.Type)
	}
	*t = ToolChoice{Mode: ToolChoiceFunction, Function: w.Function.Name}
	return nil
}

// ResponseFormat constrains the output: "text", "json_object" or "json_schema".
type ResponseFormat struct {
	Type       string      `json:"type"`
	JSONSchema *JSONSchema `json:"json_schema,omitempty"`
}

// JSONSchema is the json_schema of a response_format; Schema is verbatim.
type JSONSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ChatCompletionResponse is a non-streaming chat answer.
type ChatCompletionResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"` // "chat.completion"
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage,omitempty"`
	SystemFingerprint string       `json:"system_fingerprint,omitempty"`
	MacpoolWorker     string       `json:"macpool_worker,omitempty"` // node that served it
}

// ChatChoice is one choice of a non-streaming answer.
type ChatChoice struct {
	Index        int             `json:"index"`
	Message      ResponseMessage `json:"message"`
	Logprobs     *ChoiceLogprobs `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

// ResponseMessage is the assistant message of a choice. Content is null when
// the model only called tools.
type ResponseMessage struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	Refusal          *string    `json:"refusal"`
}

// ChatCompletionChunk is one SSE chunk of a streaming chat answer. The usage
// chunk has an empty (not null) Choices.
type ChatCompletionChunk struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"` // "chat.completion.chunk"
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	SystemFingerprint string            `json:"system_fingerprint,omitempty"`
	Choices           []ChatChunkChoice `json:"choices"`
	Usage             *Usage            `json:"usage,omitempty"`
	MacpoolWorker     string            `json:"macpool_worker,omitempty"` // on the final chunk
}

// ChatChunkChoice is one choice of a chunk.
type ChatChunkChoice struct {
	Index        int             `json:"index"`
	Delta        ChatDelta       `json:"delta"`
	Logprobs     *ChoiceLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// ChatDelta is the change a chunk brings to a choice's message.
type ChatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCallDelta `json:"tool_calls,omitempty"`
}
