// Package anthropic holds the Anthropic Messages API wire types macpool
// speaks on /v1/messages and /v1/messages/count_tokens: the request with its
// content blocks, the response, the streaming events and the error body.
// Requests are parsed strictly (ParseMessagesRequest) so that a client gets a
// 400 naming the offending field, in Anthropic's error shape, instead of a
// generation it did not ask for.
//
// The package knows nothing about the engine: package api translates a
// request into a chat job at the edge and the job's events back.
package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Error types, as Anthropic names them in error.type.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeTooLarge       = "request_too_large"
	TypeRateLimit      = "rate_limit_error"
	TypeAPI            = "api_error"
	TypeOverloaded     = "overloaded_error"
)

// Error is the inner object of an Anthropic error body. Status is the HTTP
// status and is not serialised.
type Error struct {
	Status  int    `json:"-"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// ErrorResponse is {"type":"error","error":{...}}, the body of every error
// answer and the data of the stream's error event.
type ErrorResponse struct {
	Type  string `json:"type"` // "error"
	Error *Error `json:"error"`
}

// TypeForStatus is the error type Anthropic uses for an HTTP status.
func TypeForStatus(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return TypeAuthentication
	case status == http.StatusForbidden:
		return TypePermission
	case status == http.StatusNotFound:
		return TypeNotFound
	case status == http.StatusRequestEntityTooLarge:
		return TypeTooLarge
	case status == http.StatusTooManyRequests:
		return TypeRateLimit
	case status == http.StatusServiceUnavailable || status == 529:
		return TypeOverloaded
	case status >= 400 && status < 500:
		return TypeInvalidRequest
	}
	return TypeAPI
}

// Invalid is a 400 invalid_request_error.
func Invalid(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

// MessagesRequest is the body of POST /v1/messages (and, without max_tokens
// and sampling, of /v1/messages/count_tokens).
type MessagesRequest struct {
	Model         string      `json:"model"`
	MaxTokens     int         `json:"max_tokens"`
	Messages      []Message   `json:"messages"`
	System        *Text       `json:"system,omitempty"`
	StopSequences []string    `json:"stop_sequences,omitempty"`
	Stream        bool        `json:"stream,omitempty"`
	Temperature   *float64    `json:"temperature,omitempty"`
	TopP          *float64    `json:"top_p,omitempty"`
	TopK          *int        `json:"top_k,omitempty"`
	Tools         []Tool      `json:"tools,omitempty"`
	ToolChoice    *ToolChoice `json:"tool_choice,omitempty"`
	Thinking      *Thinking   `json:"thinking,omitempty"`
	Metadata      *Metadata   `json:"metadata,omitempty"`
	ServiceTier   string      `json:"service_tier,omitempty"`
}

// Message is one turn: role "user" or "assistant"; content a string or blocks.
type Message struct {
	Role    string `json:"role"`
	Content Blocks `json:"content"`
}

// Blocks is message content: a string on the wire becomes one text block.
type Blocks []Block

// UnmarshalJSON accepts a string or an array of blocks.
func (b *Blocks) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return Invalid("content must be a string or an array of content blocks")
		}
		*b = Blocks{{Type: "text", Text: s}}
		return nil
	}
	if len(data) == 0 || data[0] != '[' {
		return Invalid("content must be a string or an array of content blocks")
	}
	var blocks []Block
	if err := json.Unmarshal(data, &blocks); err != nil {
		var ae *Error
		if errors.As(err, &ae) {
			return ae
		}
		return Invalid("content must be a string or an array of content blocks: %v", err)
	}
	*b = blocks
	return nil
}

// Block is one content block. Which fields are set depends on Type:
// text (Text), thinking (Thinking, Signature), redacted_thinking (Data),
// tool_use (ID, Name, Input), tool_result (ToolUseID, Content, IsError),
// image and document (refused: the models are text-only).
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	Data      string          `json:"data,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   *Blocks         `json:"content,omitempty"` // tool_result: string or blocks
	IsError   bool            `json:"is_error,omitempty"`
}

// Text is the system prompt: a string or a list of text blocks.
type Text struct {
	Blocks Blocks
}

// String joins the text blocks with blank lines, as separate system blocks
// read to the model.
func (t *Text) String() string {
	if t == nil {
		return ""
	}
	var b bytes.Buffer
	for i, bl := range t.Blocks {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(bl.Text)
	}
	return b.String()
}

// UnmarshalJSON accepts a string or text blocks.
func (t *Text) UnmarshalJSON(data []byte) error {
	var b Blocks
	if err := b.UnmarshalJSON(data); err != nil {
		return Invalid("system must be a string or an array of text blocks")
	}
	for i, bl := range b {
		if bl.Type != "text" {
			return Invalid("system.%d.type: system blocks must be text blocks, got %q", i, bl.Type)
		}
	}
	t.Blocks = b
	return nil
}

// Tool is a client tool; InputSchema is a JSON schema kept verbatim. A Type
// other than "" or "custom" names one of Anthropic's server or versioned
// tools, which this server does not run.
type Tool struct {
	Type        string          `json:"type,omitempty"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// ToolChoice is {"type":"auto"|"any"|"tool"|"none","name":...,"disable_parallel_tool_use":...}.
type ToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// Thinking is {"type":"enabled","budget_tokens":N} or {"type":"disabled"}
// ("adaptive" is taken as enabled without a budget).
type Thinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

// Enabled reports whether the request asks for thinking.
func (t *Thinking) Enabled() bool { return t != nil && (t.Type == "enabled" || t.Type == "adaptive") }

// Metadata is the request metadata; UserID is passed on as the job's user.
type Metadata struct {
	UserID string `json:"user_id,omitempty"`
}

// Stop reasons.
const (
	StopEndTurn      = "end_turn"
	StopMaxTokens    = "max_tokens"
	StopSequence     = "stop_sequence"
	StopToolUse      = "tool_use"
	maxStopSequences = 4 // the engine's limit (openai.MaxStop)
)

// MessageResponse is the answer of POST /v1/messages, and the message of
// message_start (empty content, null stop reason).
type MessageResponse struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"` // "message"
	Role         string          `json:"role"` // "assistant"
	Model        string          `json:"model"`
	Content      []ResponseBlock `json:"content"`
	StopReason   *string         `json:"stop_reason"`
	StopSequence *string         `json:"stop_sequence"`
	Usage        Usage           `json:"usage"`
}

// ResponseBlock is a block of a response: text, thinking or tool_use. Its
// fields marshal in the shape of its type (MarshalJSON).
type ResponseBlock struct {
	Type      string
	Text      string
	Thinking  string
	Signature string
	ID        string
	Name      string
	Input     json.RawMessage // tool_use: a JSON object
}

// MarshalJSON writes exactly the fields of the block's type, with the empty
// ones present ("text":"" on a started text block), as Anthropic sends them.
func (b ResponseBlock) MarshalJSON() ([]byte, error) {
	switch b.Type {
	case "text":
		return marshal(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{b.Type, b.Text})
	case "thinking":
		return marshal(struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature"`
		}{b.Type, b.Thinking, b.Signature})
	case "tool_use":
		input := b.Input
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		return marshal(struct {
			Type  string          `json:"type"`
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		}{b.Type, b.ID, b.Name, input})
	}
	return nil, fmt.Errorf("anthropic: unknown response block type %q", b.Type)
}

// Usage counts tokens. CacheReadInputTokens are prompt tokens served from
// the prefix cache; they are part of InputTokens here (Anthropic counts them
// apart: InputTokens + CacheRead is the prompt).
type Usage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// CountTokensResponse is the body of /v1/messages/count_tokens.
type CountTokensResponse struct {
	InputTokens int `json:"input_tokens"`
}

// Stream events, each sent as "event: <type>\ndata: <json>\n\n".
type (
	// MessageStart opens the stream with an empty message.
	MessageStart struct {
		Type    string           `json:"type"` // message_start
		Message *MessageResponse `json:"message"`
	}
	// BlockStart opens block Index with its empty form.
	BlockStart struct {
		Type         string        `json:"type"` // content_block_start
		Index        int           `json:"index"`
		ContentBlock ResponseBlock `json:"content_block"`
	}
	// BlockDelta adds to block Index.
	BlockDelta struct {
		Type  string `json:"type"` // content_block_delta
		Index int    `json:"index"`
		Delta Delta  `json:"delta"`
	}
	// BlockStop closes block Index.
	BlockStop struct {
		Type  string `json:"type"` // content_block_stop
		Index int    `json:"index"`
	}
	// MessageDelta carries the stop reason and the final usage.
	MessageDelta struct {
		Type  string            `json:"type"` // message_delta
		Delta MessageDeltaDelta `json:"delta"`
		Usage Usage             `json:"usage"`
	}
	// MessageDeltaDelta is the delta of a message_delta.
	MessageDeltaDelta struct {
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}
	// Simple is message_stop and ping.
	Simple struct {
		Type string `json:"type"`
	}
)

// Delta is a block delta; it marshals in the shape of its type.
type Delta struct {
	Type        string // text_delta | thinking_delta | signature_delta | input_json_delta
	Text        string
	Thinking    string
	Signature   string
	PartialJSON string
}

// MarshalJSON writes exactly the field of the delta's type.
func (d Delta) MarshalJSON() ([]byte, error) {
	type kv struct {
		Type string `json:"type"`
	}
	switch d.Type {
	case "text_delta":
		return marshal(struct {
			kv
			Text string `json:"text"`
		}{kv{d.Type}, d.Text})
	case "thinking_delta":
		return marshal(struct {
			kv
			Thinking string `json:"thinking"`
		}{kv{d.Type}, d.Thinking})
	case "signature_delta":
		return marshal(struct {
			kv
			Signature string `json:"signature"`
		}{kv{d.Type}, d.Signature})
	case "input_json_delta":
		return marshal(struct {
			kv
			PartialJSON string `json:"partial_json"`
		}{kv{d.Type}, d.PartialJSON})
	}
	return nil, fmt.Errorf("anthropic: unknown delta type %q", d.Type)
}

// marshal is json.Marshal without HTML escaping ("<" stays "<"), as the
// API server writes every body: the custom marshalers above would
// otherwise escape what the server's encoder leaves alone.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
