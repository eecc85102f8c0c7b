package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The Responses API (POST /v1/responses): request, items, response object
// and stream events. Package api translates a request into a chat job; this
// file only knows the wire format.

// ResponseRequest is the body of POST /v1/responses.
type ResponseRequest struct {
	Model              string              `json:"model"`
	Input              ResponseInput       `json:"input"`
	Instructions       string              `json:"instructions,omitempty"`
	Tools              []ResponseTool      `json:"tools,omitempty"`
	ToolChoice         *ResponseToolChoice `json:"tool_choice,omitempty"`
	ParallelToolCalls  *bool               `json:"parallel_tool_calls,omitempty"`
	Text               *ResponseText       `json:"text,omitempty"`
	Reasoning          *ResponseReasoning  `json:"reasoning,omitempty"`
	MaxOutputTokens    *int                `json:"max_output_tokens,omitempty"`
	Temperature        *float64            `json:"temperature,omitempty"`
	TopP               *float64            `json:"top_p,omitempty"`
	Metadata           map[string]string   `json:"metadata,omitempty"`
	Truncation         string              `json:"truncation,omitempty"` // "disabled" (default) | "auto"
	Store              *bool               `json:"store,omitempty"`      // default true
	PreviousResponseID string              `json:"previous_response_id,omitempty"`
	Stream             bool                `json:"stream,omitempty"`
	User               string              `json:"user,omitempty"`
	Include            []string            `json:"include,omitempty"`
	Background         bool                `json:"background,omitempty"`
	Conversation       json.RawMessage     `json:"conversation,omitempty"`
	// Seed is a macpool extension (the Responses API has none): with a
	// temperature above 0 the same seed gives the same text.
	Seed *int64 `json:"seed,omitempty"`
}

// Stored reports whether the response is to be stored (default true).
func (r *ResponseRequest) Stored() bool { return r.Store == nil || *r.Store }

// ResponseInput is input: a string (one user message) or a list of items.
type ResponseInput struct {
	Items []ResponseItem
}

// UnmarshalJSON accepts a string or an array of items.
func (in *ResponseInput) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return InvalidRequest("input", "input must be a string or an array of input items")
		}
		in.Items = []ResponseItem{{Type: "message", Role: RoleUser, Content: []ResponsePart{{Type: "input_text", Text: s}}}}
		return nil
	}
	if len(data) == 0 || data[0] != '[' {
		return InvalidRequest("input", "input must be a string or an array of input items")
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return InvalidRequest("input", "input must be a string or an array of input items")
	}
	in.Items = make([]ResponseItem, len(raw))
	for i, r := range raw {
		if err := in.Items[i].decode(r); err != nil {
			return InvalidRequest(fmt.Sprintf("input[%d]", i), "input[%d]: %s", i, err.Message)
		}
	}
	return nil
}

// ResponseItem is an input or output item. Which fields are set depends on
// Type: message (ID, Role, Status, Content), function_call (ID, CallID,
// Name, Arguments, Status), function_call_output (CallID, Output),
// reasoning (ID, Summary, Content with reasoning_text parts,
// EncryptedContent). It marshals in the shape of its type.
type ResponseItem struct {
	Type             string
	ID               string
	Status           string
	Role             string
	Content          []ResponsePart
	CallID           string
	Name             string
	Arguments        string
	Output           string
	Summary          []ResponsePart
	EncryptedContent *string
	Namespace        string // function_call of a tool from a namespace tool
}

// itemWire is the union of the item fields as they come in.
type itemWire struct {
	Type             string          `json:"type"`
	ID               string          `json:"id"`
	Status           string          `json:"status"`
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	CallID           string          `json:"call_id"`
	Name             string          `json:"name"`
	Arguments        string          `json:"arguments"`
	Output           json.RawMessage `json:"output"`
	Summary          []ResponsePart  `json:"summary"`
	EncryptedContent *string         `json:"encrypted_content"`
	Namespace        string          `json:"namespace"`
}

func (it *ResponseItem) decode(data []byte) *Error {
	var w itemWire
	if err := json.Unmarshal(data, &w); err != nil {
		return InvalidRequest("", "an input item must be an object with a type: %s", typeErrorText(err))
	}
	if w.Type == "" && w.Role != "" {
		w.Type = "message" // the easy input message {role, content}
	}
	*it = ResponseItem{Type: w.Type, ID: w.ID, Status: w.Status, Role: w.Role, CallID: w.CallID, Name: w.Name,
		Arguments: w.Arguments, Summary: w.Summary, EncryptedContent: w.EncryptedContent, Namespace: w.Namespace}
	switch w.Type {
	case "message":
		parts, e := decodeParts(w.Content, w.Role)
		if e != nil {
			return e
		}
		it.Content = parts
	case "reasoning":
		if len(w.Content) > 0 && string(w.Content) != "null" {
			if err := json.Unmarshal(w.Content, &it.Content); err != nil {
				return InvalidRequest("", "reasoning content must be an array of reasoning_text parts")
			}
		}
	case "function_call_output":
		out, e := decodeParts(w.Output, RoleUser)
		if e != nil {
			return InvalidRequest("", "function_call_output output must be a string or an array of input_text parts")
		}
		for _, p := range out {
			it.Output += p.Text
		}
	}
	return nil
}

// decodeParts reads message content: a string becomes one input_text part
// (output_text for the assistant), as the API normalises it.
func decodeParts(data json.RawMessage, role string) ([]ResponsePart, *Error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, InvalidRequest("", "content must be a string or an array of content parts")
		}
		t := "input_text"
		if role == RoleAssistant {
			t = "output_text"
		}
		return []ResponsePart{{Type: t, Text: s}}, nil
	}
	var parts []ResponsePart
	if len(data) == 0 || data[0] != '[' || json.Unmarshal(data, &parts) != nil {
		return nil, InvalidRequest("", "content must be a string or an array of content parts")
	}
	return parts, nil
}

// MarshalJSON writes exactly the fields of the item's type.
func (it ResponseItem) MarshalJSON() ([]byte, error) {
	parts := func(p []ResponsePart) []ResponsePart {
		if p == nil {
			return []ResponsePart{}
		}
		return p
	}
	switch it.Type {
	case "message":
		return marshal(struct {
			ID      string         `json:"id,omitempty"`
			Type    string         `json:"type"`
			Status  string         `json:"status,omitempty"`
			Role    string         `json:"role"`
			Content []ResponsePart `json:"content"`
		}{it.ID, it.Type, it.Status, it.Role, parts(it.Content)})
	case "function_call":
		return marshal(struct {
			ID        string `json:"id,omitempty"`
			Type      string `json:"type"`
			Status    string `json:"status,omitempty"`
			CallID    string `json:"call_id"`
			Namespace string `json:"namespace,omitempty"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		}{it.ID, it.Type, it.Status, it.CallID, it.Namespace, it.Name, it.Arguments})
	case "function_call_output":
		return marshal(struct {
			ID     string `json:"id,omitempty"`
			Type   string `json:"type"`
			Status string `json:"status,omitempty"`
			CallID string `json:"call_id"`
			Output string `json:"output"`
		}{it.ID, it.Type, it.Status, it.CallID, it.Output})
	case "reasoning":
		return marshal(struct {
			ID               string         `json:"id"`
			Type             string         `json:"type"`
			Status           string         `json:"status,omitempty"`
			Summary          []ResponsePart `json:"summary"`
			Content          []ResponsePart `json:"content,omitempty"`
			EncryptedContent *string        `json:"encrypted_content,omitempty"`
		}{it.ID, it.Type, it.Status, parts(it.Summary), it.Content, it.EncryptedContent})
	}
	return nil, fmt.Errorf("openai: cannot marshal response item of type %q", it.Type)
}

// UnmarshalJSON reads an item as decode does (stored responses come back
// through it).
func (it *ResponseItem) UnmarshalJSON(data []byte) error {
	if e := it.decode(data); e != nil {
		return e
	}
	return nil
}

// ResponsePart is a content part: input_text, output_text (Text), refusal
// (Refusal), reasoning_text and summary_text (Text); input_image and
// input_file are kept so that validation can name them.
type ResponsePart struct {
	Type    string
	Text    string
	Refusal string
}

type partWire struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Refusal string `json:"refusal"`
}

// UnmarshalJSON reads any part type.
func (p *ResponsePart) UnmarshalJSON(data []byte) error {
	var w partWire
	if err := json.Unmarshal(data, &w); err != nil {
		return InvalidRequest("", "a content part must be an object with a type")
	}
	*p = ResponsePart{Type: w.Type, Text: w.Text, Refusal: w.Refusal}
	return nil
}

// MarshalJSON writes the part in the shape of its type; output_text has
// its (empty) annotations and logprobs, as the API sends them.
func (p ResponsePart) MarshalJSON() ([]byte, error) {
	switch p.Type {
	case "output_text":
		return marshal(struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			Annotations []any  `json:"annotations"`
			Logprobs    []any  `json:"logprobs"`
		}{p.Type, p.Text, []any{}, []any{}})
	case "refusal":
		return marshal(struct {
			Type    string `json:"type"`
			Refusal string `json:"refusal"`
		}{p.Type, p.Refusal})
	}
	return marshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{p.Type, p.Text})
}

// ResponseTool is a tool of a Responses request. Only function tools
// (flat: name, description, parameters, strict) can be served, also inside
// a namespace tool (Tools).
type ResponseTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
	Tools       []ResponseTool  `json:"tools,omitempty"` // type "namespace"
}

// ResponseToolChoice is "none" | "auto" | "required" or
// {"type":"function","name":...}.
type ResponseToolChoice struct {
	Mode     string // a ToolChoice* constant
	Function string
}

// MarshalJSON writes the wire form.
func (t ResponseToolChoice) MarshalJSON() ([]byte, error) {
	if t.Mode == ToolChoiceFunction {
		return marshal(struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}{"function", t.Function})
	}
	return marshal(t.Mode)
}

// UnmarshalJSON accepts a mode string or a function object.
func (t *ResponseToolChoice) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var mode string
		if err := json.Unmarshal(data, &mode); err != nil {
			return InvalidRequest("tool_choice", "tool_choice must be a string or an object")
		}
		switch mode {
		case ToolChoiceNone, ToolChoiceAuto, ToolChoiceRequired:
		default:
			return InvalidRequest("tool_choice", `tool_choice must be "none", "auto", "required" or {"type":"function","name":...}, got %q`, mode)
		}
		*t = ResponseToolChoice{Mode: mode}
		return nil
	}
	var w struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if len(data) == 0 || data[0] != '{' || json.Unmarshal(data, &w) != nil {
		return InvalidRequest("tool_choice", `tool_choice must be "none", "auto", "required" or {"type":"function","name":...}`)
	}
	if w.Type != "function" {
		return InvalidRequest("tool_choice.type", "tool_choice type %q is not supported: only function tools can be served", w.Type)
	}
	if w.Name == "" {
		return InvalidRequest("tool_choice.name", "tool_choice.name is required")
	}
	*t = ResponseToolChoice{Mode: ToolChoiceFunction, Function: w.Name}
	return nil
}

// ResponseText is the text parameter: the output format.
type ResponseText struct {
	Format    *ResponseTextFormat `json:"format,omitempty"`
	Verbosity string              `json:"verbosity,omitempty"`
}

// ResponseTextFormat is text.format: text, json_object or json_schema (the
// schema fields flat, unlike chat's response_format).
type ResponseTextFormat struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ResponseReasoning is the reasoning parameter.
type ResponseReasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

// Response is the response object of POST/GET /v1/responses and of the
// lifecycle stream events.
type Response struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"` // "response"
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"` // in_progress | completed | incomplete | failed
	Background         bool               `json:"background"`
	Error              *ResponseError     `json:"error"`
	IncompleteDetails  *IncompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []ResponseItem     `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Reasoning          ResponseReasoning  `json:"reasoning"`
	Store              bool               `json:"store"`
	Temperature        *float64           `json:"temperature"`
	Text               ResponseText       `json:"text"`
	ToolChoice         ResponseToolChoice `json:"tool_choice"`
	Tools              []ResponseTool     `json:"tools"`
	TopP               *float64           `json:"top_p"`
	Truncation         string             `json:"truncation"`
	Usage              *ResponseUsage     `json:"usage"`
	User               *string            `json:"user"`
	Metadata           map[string]string  `json:"metadata"`
	MacpoolWorker      string             `json:"macpool_worker,omitempty"` // node that served it
}

// ResponseError is the error of a failed response.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IncompleteDetails says why a response is incomplete.
type IncompleteDetails struct {
	Reason string `json:"reason"` // "max_output_tokens"
}

// ResponseUsage counts tokens; cached tokens are prompt tokens served from
// the prefix cache.
type ResponseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// ResponseInputItemList is the body of GET /v1/responses/{id}/input_items.
type ResponseInputItemList struct {
	Object  string         `json:"object"` // "list"
	Data    []ResponseItem `json:"data"`
	FirstID *string        `json:"first_id"`
	LastID  *string        `json:"last_id"`
	HasMore bool           `json:"has_more"`
}

// ResponseDeleted is the body of DELETE /v1/responses/{id}.
type ResponseDeleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "response"
	Deleted bool   `json:"deleted"`
}

// ResponseEvent is one stream event. Fields beyond Type and SequenceNumber
// are set per type and omitted otherwise; Delta, Text and Arguments are
// always written for the event types that carry them.
type ResponseEvent struct {
	Type           string        `json:"type"`
	SequenceNumber int           `json:"sequence_number"`
	Response       *Response     `json:"response,omitempty"`
	OutputIndex    *int          `json:"output_index,omitempty"`
	ContentIndex   *int          `json:"content_index,omitempty"`
	ItemID         string        `json:"item_id,omitempty"`
	Item           *ResponseItem `json:"item,omitempty"`
	Part           *ResponsePart `json:"part,omitempty"`
	Delta          *string       `json:"delta,omitempty"`
	Text           *string       `json:"text,omitempty"`
	Arguments      *string       `json:"arguments,omitempty"`
	Name           string        `json:"name,omitempty"`
	Logprobs       *[]any        `json:"logprobs,omitempty"`
	// error events
	Code    *string `json:"code,omitempty"`
	Message string  `json:"message,omitempty"`
	Param   *string `json:"param,omitempty"`
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
