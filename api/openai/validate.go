package openai

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Limits of the sampling parameters.
const (
	MaxN           = 16 // choices per request: each costs a full generation on a Mac
	MaxStop        = 4  // stop sequences, as OpenAI
	MaxTopLogprobs = 20 // alternatives per position, as OpenAI
)

// ParseChatCompletionRequest decodes and validates a chat request body. The
// error is a 400 naming the parameter (messages[i].field for a message).
func ParseChatCompletionRequest(data []byte) (*ChatCompletionRequest, *Error) {
	var req ChatCompletionRequest
	if err := decode(data, &req); err != nil {
		return nil, locateMessageError(data, err)
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return &req, nil
}

// ParseCompletionRequest decodes and validates a completions request body.
func ParseCompletionRequest(data []byte) (*CompletionRequest, *Error) {
	var req CompletionRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return &req, nil
}

// locateMessageError gives a decoding error inside messages or tools its
// index: encoding/json reports "messages.content" without saying which
// message. Only runs on the error path.
func locateMessageError(data []byte, e *Error) *Error {
	var inMessages, inTools bool
	switch {
	case e.Param == "content" || strings.HasPrefix(e.Param, "content["):
		inMessages = true
	case strings.HasPrefix(e.Param, "messages."):
		inMessages = true
	case strings.HasPrefix(e.Param, "tools."):
		inTools = true
	default:
		return e
	}
	var raw struct {
		Messages []json.RawMessage `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(data, &raw) != nil {
		return e
	}
	name, items := "messages", raw.Messages
	if inTools {
		name, items = "tools", raw.Tools
	}
	for i, item := range items {
		var err *Error
		if inMessages {
			var m ChatMessage
			err = decode(item, &m)
		} else {
			var t Tool
			err = decode(item, &t)
		}
		if err == nil {
			continue
		}
		if err.Param == "" {
			return e
		}
		old := err.Param
		err.Param = fmt.Sprintf("%s[%d].%s", name, i, old)
		err.Message = strings.Replace(err.Message, old, err.Param, 1)
		return err
	}
	return e
}

// Validate checks a chat request. It does not know which models exist: an
// unknown model is the service's 404.
func (r *ChatCompletionRequest) Validate() *Error {
	switch r.Truncation {
	case "", "auto", "disabled":
	default:
		return InvalidRequest("truncation", `truncation must be "auto" or "disabled", got %q`, r.Truncation)
	}
	if r.Model == "" {
		return InvalidRequest("model", "model is required")
	}
	if len(r.Messages) == 0 {
		return InvalidRequest("messages", "messages must contain at least one message")
	}
	for i := range r.Messages {
		if err := r.Messages[i].validate(i); err != nil {
			return err
		}
	}
	if err := positive("max_tokens", r.MaxTokens); err != nil {
		return err
	}
	if err := positive("max_completion_tokens", r.MaxCompletionTokens); err != nil {
		return err
	}
	if err := validateN(r.N); err != nil {
		return err
	}
	if err := validateSampling(sampling{r.Temperature, r.TopP, r.PresencePenalty, r.FrequencyPenalty, r.TopK, r.MinP, r.RepetitionPenalty, r.MinTokens, r.MaxNewTokens(), r.Stop, r.LogitBias}); err != nil {
		return err
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > MaxTopLogprobs {
			return InvalidRequest("top_logprobs", "top_logprobs must be between 0 and %d, got %d", MaxTopLogprobs, *r.TopLogprobs)
		}
		if !r.Logprobs {
			return InvalidRequest("top_logprobs", "top_logprobs requires logprobs to be true")
		}
	}
	if r.StreamOptions != nil && !r.Stream {
		return InvalidRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	if err := r.validateTools(); err != nil {
		return err
	}
	if rf := r.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text", "json_object":
		case "json_schema":
			if rf.JSONSchema == nil {
				return InvalidRequest("response_format.json_schema", "response_format of type json_schema requires json_schema")
			}
			if rf.JSONSchema.Name == "" {
				return InvalidRequest("response_format.json_schema.name", "response_format.json_schema.name is required")
			}
		default:
			return InvalidRequest("response_format.type", "response_format.type must be \"text\", \"json_object\" or \"json_schema\", got %q", rf.Type)
		}
	}
	switch r.ReasoningEffort {
	case "", "none", "minimal", "low", "medium", "high":
	default:
		return InvalidRequest("reasoning_effort", "reasoning_effort must be one of none, minimal, low, medium, high; got %q", r.ReasoningEffort)
	}
	if r.ContinueFinalMessage {
		if r.AddGenerationPrompt != nil && *r.AddGenerationPrompt {
			return InvalidRequest("continue_final_message", "continue_final_message and add_generation_prompt cannot both be true")
		}
		if r.Messages[len(r.Messages)-1].Role != RoleAssistant {
			return InvalidRequest("continue_final_message", "continue_final_message needs the last message to be an assistant message")
		}
	}
	return nil
}

func (m *ChatMessage) validate(i int) *Error {
	param := func(field string) string { return fmt.Sprintf("messages[%d].%s", i, field) }
	switch m.Role {
	case RoleSystem, RoleDeveloper, RoleUser, RoleAssistant, RoleTool:
	case "":
		return InvalidRequest(param("role"), "%s is required", param("role"))
	default:
		return InvalidRequest(param("role"), "%s must be one of system, developer, user, assistant, tool; got %q", param("role"), m.Role)
	}
	if m.Content == nil && m.Role != RoleAssistant {
		return InvalidRequest(param("content"), "%s is required for role %s", param("content"), m.Role)
	}
	if m.Content == nil && len(m.ToolCalls) == 0 && m.ReasoningContent == "" {
		return InvalidRequest(param("content"), "%s is required unless the assistant message has tool_calls", param("content"))
	}
	if m.Content != nil {
		for j, p := range m.Content.Parts {
			pp := fmt.Sprintf("%s[%d].type", param("content"), j)
			switch p.Type {
			case "text":
			case "image_url", "input_image", "input_audio", "video_url", "audio_url", "file":
				return InvalidRequest(pp, "content part type %q is not supported: this server serves text-only models", p.Type)
			case "":
				return InvalidRequest(pp, "%s is required", pp)
			default:
				return InvalidRequest(pp, "unknown content part type %q; expected \"text\"", p.Type)
			}
		}
	}
	if len(m.ToolCalls) > 0 && m.Role != RoleAssistant {
		return InvalidRequest(param("tool_calls"), "tool_calls are only allowed in assistant messages")
	}
	for j, tc := range m.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			return InvalidRequest(fmt.Sprintf("%s[%d].type", param("tool_calls"), j), "tool call type must be \"function\", got %q", tc.Type)
		}
		if tc.Function.Name == "" {
			p := fmt.Sprintf("%s[%d].function.name", param("tool_calls"), j)
			return InvalidRequest(p, "%s is required", p)
		}
	}
	return nil
}

func (r *ChatCompletionRequest) validateTools() *Error {
	names := make(map[string]bool, len(r.Tools))
	for i, t := range r.Tools {
		if t.Type != "function" {
			return InvalidRequest(fmt.Sprintf("tools[%d].type", i), "tools[%d].type must be \"function\", got %q", i, t.Type)
		}
		name := t.Function.Name
		if name == "" || len(name) > 64 {
			return InvalidRequest(fmt.Sprintf("tools[%d].function.name", i), "tools[%d].function.name must be 1 to 64 characters, got %q", i, name)
		}
		if names[name] {
			return InvalidRequest(fmt.Sprintf("tools[%d].function.name", i), "duplicate tool name %q", name)
		}
		names[name] = true
		if p := t.Function.Parameters; len(p) > 0 && string(p) != "null" {
			var obj map[string]json.RawMessage
			if json.Unmarshal(p, &obj) != nil {
				return InvalidRequest(fmt.Sprintf("tools[%d].function.parameters", i), "tools[%d].function.parameters must be a JSON schema object", i)
			}
		}
	}
	tc := r.ToolChoice
	if tc == nil {
		return nil
	}
	switch tc.Mode {
	case ToolChoiceNone, ToolChoiceAuto:
	case ToolChoiceRequired:
		if len(r.Tools) == 0 {
			return InvalidRequest("tool_choice", "tool_choice \"required\" needs tools")
		}
	case ToolChoiceFunction:
		if !names[tc.Function] {
			return InvalidRequest("tool_choice", "tool_choice names function %q, which is not in tools", tc.Function)
		}
	default:
		return InvalidRequest("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or a named function; got %q", tc.Mode)
	}
	return nil
}

// Validate checks a completions request.
func (r *CompletionRequest) Validate() *Error {
	if r.Model == "" {
		return InvalidRequest("model", "model is required")
	}
	switch n := r.Prompt.Len(); {
	case n == 0:
		return InvalidRequest("prompt", "prompt is required")
	case n > 1:
		return InvalidRequest("prompt", "only one prompt per request is supported, got %d", n)
	}
	if len(r.Prompt.Texts) == 1 && r.Prompt.Texts[0] == "" {
		return InvalidRequest("prompt", "prompt must not be empty")
	}
	if len(r.Prompt.Tokens) == 1 {
		if len(r.Prompt.Tokens[0]) == 0 {
			return InvalidRequest("prompt", "prompt must not be an empty token list")
		}
		for _, id := range r.Prompt.Tokens[0] {
			if id < 0 {
				return InvalidRequest("prompt", "token id %d is negative", id)
			}
		}
	}
	if err := positive("max_tokens", r.MaxTokens); err != nil {
		return err
	}
	if err := validateN(r.N); err != nil {
		return err
	}
	if r.BestOf != nil && *r.BestOf != r.Choices() {
		return InvalidRequest("best_of", "best_of other than n is not supported")
	}
	if err := validateSampling(sampling{r.Temperature, r.TopP, r.PresencePenalty, r.FrequencyPenalty, r.TopK, r.MinP, r.RepetitionPenalty, r.MinTokens, r.MaxNewTokens(), r.Stop, r.LogitBias}); err != nil {
		return err
	}
	if r.Logprobs != nil && (*r.Logprobs < 0 || *r.Logprobs > MaxTopLogprobs) {
		return InvalidRequest("logprobs", "logprobs must be between 0 and %d, got %d", MaxTopLogprobs, *r.Logprobs)
	}
	if r.StreamOptions != nil && !r.Stream {
		return InvalidRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	return nil
}

func positive(name string, v *int) *Error {
	if v != nil && *v < 1 {
		return InvalidRequest(name, "%s must be at least 1, got %d", name, *v)
	}
	return nil
}

func validateN(n *int) *Error {
	if n != nil && (*n < 1 || *n > MaxN) {
		return InvalidRequest("n", "n must be between 1 and %d, got %d", MaxN, *n)
	}
	return nil
}

type sampling struct {
	temperature, topP, presence, frequency *float64
	topK                                   *int
	minP, repetition                       *float64
	minTokens                              *int
	maxTokens                              int
	stop                                   Stop
	logitBias                              map[string]float64
}

func validateSampling(s sampling) *Error {
	if err := inRange("temperature", s.temperature, 0, 2); err != nil {
		return err
	}
	if v := s.topP; v != nil && (math.IsNaN(*v) || *v <= 0 || *v > 1) {
		return InvalidRequest("top_p", "top_p must be greater than 0 and at most 1, got %g", *v)
	}
	if err := inRange("presence_penalty", s.presence, -2, 2); err != nil {
		return err
	}
	if err := inRange("frequency_penalty", s.frequency, -2, 2); err != nil {
		return err
	}
	if err := inRange("min_p", s.minP, 0, 1); err != nil {
		return err
	}
	if v := s.topK; v != nil && *v < -1 {
		return InvalidRequest("top_k", "top_k must be -1 (disabled) or at least 0, got %d", *v)
	}
	if v := s.repetition; v != nil && (math.IsNaN(*v) || *v <= 0 || *v > 2) {
		return InvalidRequest("repetition_penalty", "repetition_penalty must be greater than 0 and at most 2, got %g", *v)
	}
	if v := s.minTokens; v != nil {
		if *v < 0 {
			return InvalidRequest("min_tokens", "min_tokens must be at least 0, got %d", *v)
		}
		if s.maxTokens > 0 && *v > s.maxTokens {
			return InvalidRequest("min_tokens", "min_tokens %d must not exceed the max tokens %d", *v, s.maxTokens)
		}
	}
	if len(s.stop) > MaxStop {
		return InvalidRequest("stop", "stop may have at most %d sequences, got %d", MaxStop, len(s.stop))
	}
	for i, seq := range s.stop {
		if seq == "" {
			return InvalidRequest("stop", "stop[%d] must not be empty", i)
		}
	}
	for k, v := range s.logitBias {
		id, err := strconv.Atoi(k)
		if err != nil || id < 0 {
			return InvalidRequest("logit_bias", "logit_bias keys must be token ids (non-negative integers), got %q", k)
		}
		if math.IsNaN(v) || v < -100 || v > 100 {
			return InvalidRequest("logit_bias", "logit_bias values must be between -100 and 100, got %g for token %s", v, k)
		}
	}
	return nil
}

func inRange(name string, v *float64, lo, hi float64) *Error {
	if v != nil && (math.IsNaN(*v) || *v < lo || *v > hi) {
		return InvalidRequest(name, "%s must be between %g and %g, got %g", name, lo, hi, *v)
	}
	return nil
}
