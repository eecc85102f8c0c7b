package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ParseMessagesRequest decodes and validates a /v1/messages body. Unknown
// fields are ignored (clients send beta extras such as context_management).
func ParseMessagesRequest(data []byte) (*MessagesRequest, *Error) {
	req, e := decode(data)
	if e != nil {
		return nil, e
	}
	if req.MaxTokens < 1 {
		return nil, Invalid("max_tokens: field required and must be at least 1, got %d", req.MaxTokens)
	}
	if e := req.validate(); e != nil {
		return nil, e
	}
	return req, nil
}

// ParseCountTokensRequest decodes and validates a /v1/messages/count_tokens
// body: a messages request without max_tokens.
func ParseCountTokensRequest(data []byte) (*MessagesRequest, *Error) {
	req, e := decode(data)
	if e != nil {
		return nil, e
	}
	if e := req.validate(); e != nil {
		return nil, e
	}
	return req, nil
}

func decode(data []byte) (*MessagesRequest, *Error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, Invalid("request body is empty; expected a JSON object")
	}
	var req MessagesRequest
	if err := json.Unmarshal(data, &req); err != nil {
		var ae *Error
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &ae):
			return nil, ae
		case errors.As(err, &se):
			return nil, Invalid("request body is not valid JSON: %s (at byte %d)", se.Error(), se.Offset)
		case errors.As(err, &te) && te.Field != "":
			return nil, Invalid("%s: invalid type: expected %s, got %s", te.Field, te.Type, te.Value)
		case errors.As(err, &te):
			return nil, Invalid("request body must be a JSON object, got %s", te.Value)
		}
		return nil, Invalid("request body is not valid JSON: %v", err)
	}
	return &req, nil
}

func (r *MessagesRequest) validate() *Error {
	if r.Model == "" {
		return Invalid("model: field required")
	}
	if len(r.Messages) == 0 {
		return Invalid("messages: at least one message is required")
	}
	toolUses := map[string]bool{}
	for i, m := range r.Messages {
		switch m.Role {
		case "user", "assistant":
		case "system":
			// Mid-conversation system messages (Claude Code sends them
			// with the mid-conversation-tool-changes beta): text only.
			for j, b := range m.Content {
				if b.Type != "text" {
					return Invalid("messages.%d.content.%d.type: system messages can only hold text blocks, got %q", i, j, b.Type)
				}
			}
			continue
		default:
			return Invalid(`messages.%d.role: must be "user", "assistant" or "system", got %q`, i, m.Role)
		}
		for j, b := range m.Content {
			at := fmt.Sprintf("messages.%d.content.%d", i, j)
			if e := validateBlock(at, m.Role, b, toolUses); e != nil {
				return e
			}
		}
	}
	if len(r.StopSequences) > maxStopSequences {
		return Invalid("stop_sequences: at most %d stop sequences are supported, got %d", maxStopSequences, len(r.StopSequences))
	}
	for i, s := range r.StopSequences {
		if s == "" {
			return Invalid("stop_sequences.%d: must not be empty", i)
		}
	}
	if t := r.Temperature; t != nil && (*t < 0 || *t > 1) {
		return Invalid("temperature: must be between 0 and 1, got %g", *t)
	}
	if p := r.TopP; p != nil && (*p <= 0 || *p > 1) {
		return Invalid("top_p: must be in (0, 1], got %g", *p)
	}
	if k := r.TopK; k != nil && *k < 0 {
		return Invalid("top_k: must not be negative, got %d", *k)
	}
	names := map[string]bool{}
	for i, t := range r.Tools {
		switch t.Type {
		case "", "custom":
		default:
			return Invalid("tools.%d.type: tool type %q is an Anthropic server or versioned tool, which this server does not run; declare it as a client tool with name, description and input_schema", i, t.Type)
		}
		if t.Name == "" {
			return Invalid("tools.%d.name: field required", i)
		}
		if names[t.Name] {
			return Invalid("tools.%d.name: tool names must be unique, %q is repeated", i, t.Name)
		}
		names[t.Name] = true
		if s := bytes.TrimSpace(t.InputSchema); len(s) > 0 && s[0] != '{' {
			return Invalid("tools.%d.input_schema: must be a JSON schema object", i)
		}
	}
	if tc := r.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto", "any", "none":
		case "tool":
			if tc.Name == "" {
				return Invalid(`tool_choice.name: required when tool_choice.type is "tool"`)
			}
			if !names[tc.Name] {
				return Invalid("tool_choice.name: no tool named %q in tools", tc.Name)
			}
		default:
			return Invalid(`tool_choice.type: must be "auto", "any", "tool" or "none", got %q`, tc.Type)
		}
		if (tc.Type == "any" || tc.Type == "tool") && len(r.Tools) == 0 {
			return Invalid("tool_choice: type %q needs tools", tc.Type)
		}
	}
	if t := r.Thinking; t != nil {
		switch t.Type {
		case "enabled":
			if t.BudgetTokens < 1 {
				return Invalid("thinking.budget_tokens: field required and must be at least 1 when thinking is enabled")
			}
		case "disabled", "adaptive":
		default:
			return Invalid(`thinking.type: must be "enabled", "disabled" or "adaptive", got %q`, t.Type)
		}
	}
	return nil
}

func validateBlock(at, role string, b Block, toolUses map[string]bool) *Error {
	switch b.Type {
	case "text":
	case "thinking", "redacted_thinking":
		if role != "assistant" {
			return Invalid("%s: %s blocks are only allowed in assistant messages", at, b.Type)
		}
	case "tool_use":
		if role != "assistant" {
			return Invalid("%s: tool_use blocks are only allowed in assistant messages", at)
		}
		if b.ID == "" || b.Name == "" {
			return Invalid("%s: tool_use blocks need id and name", at)
		}
		if s := bytes.TrimSpace(b.Input); len(s) > 0 && s[0] != '{' {
			return Invalid("%s.input: must be a JSON object", at)
		}
		toolUses[b.ID] = true
	case "tool_result":
		if role != "user" {
			return Invalid("%s: tool_result blocks are only allowed in user messages", at)
		}
		if b.ToolUseID == "" {
			return Invalid("%s.tool_use_id: field required", at)
		}
		if !toolUses[b.ToolUseID] {
			return Invalid("%s.tool_use_id: no earlier tool_use block has id %q", at, b.ToolUseID)
		}
		if b.Content != nil {
			for k, c := range *b.Content {
				if c.Type != "text" {
					return Invalid("%s.content.%d.type: tool results can only hold text here (the models are text-only), got %q", at, k, c.Type)
				}
			}
		}
	case "image", "document", "search_result", "container_upload":
		return Invalid("%s.type: %s blocks are not supported: this server serves text-only models", at, b.Type)
	case "":
		return Invalid("%s.type: field required", at)
	default:
		return Invalid("%s.type: unknown content block type %q", at, b.Type)
	}
	return nil
}
