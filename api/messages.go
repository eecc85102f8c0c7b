package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/macpool/macpool/api/anthropic"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// The Anthropic Messages surface (POST /v1/messages, /v1/messages/count_tokens).
// A request is translated at the edge into a chat job, so queueing,
// routing, the prefix cache, failover, keys and metrics apply unchanged; the
// job's events are rendered back as Anthropic content blocks and events.

// writeAnthropicError sends e in Anthropic's shape with its status.
func writeAnthropicError(c *gin.Context, e *openai.Error) {
	c.Abort()
	writeJSON(c, e.HTTPStatus(), anthropicError(e))
}

func anthropicError(e *openai.Error) anthropic.ErrorResponse {
	return anthropic.ErrorResponse{Type: "error", Error: &anthropic.Error{Type: anthropic.TypeForStatus(e.HTTPStatus()), Message: e.Message}}
}

// fromAnthropic carries an anthropic parse error as the internal error type.
func fromAnthropic(e *anthropic.Error) *openai.Error {
	return &openai.Error{Status: e.Status, Type: openai.TypeInvalidRequest, Message: e.Message}
}

func (s *Server) messages(c *gin.Context) {
	body, e := s.readBody(c)
	if e != nil {
		writeAnthropicError(c, e)
		return
	}
	req, ae := anthropic.ParseMessagesRequest(body)
	if ae != nil {
		writeAnthropicError(c, fromAnthropic(ae))
		return
	}
	chat, e := messagesToChat(req, s.resolveModel(req.Model))
	if e != nil {
		writeAnthropicError(c, e)
		return
	}
	budget := thinkingBudget(req)
	if budget > 0 && req.Stream && c.GetHeader(HeaderLastEventID) != "" {
		// Two jobs behind one stream (messages_budget.go): its frames
		// carry no ids, so there is nothing to resume.
		writeAnthropicError(c, &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Param: HeaderLastEventID,
			Message: "a stream with a thinking budget cannot be resumed; send the request without Last-Event-ID"})
		return
	}
	id, created, e := s.streamStart(c, req.Stream && budget == 0) // resume.go
	if e != nil {
		writeAnthropicError(c, e)
		return
	}
	j := &job.Job{ID: id, Kind: job.KindChat, Model: chat.Model, APIKey: keyID(c), Chat: chat}
	ctx := c.Request.Context()
	var st job.Stream
	if budget > 0 {
		st, e = s.submitBudgeted(ctx, j, req.Model, budget)
	} else {
		j.Stream = streamInfo(req.Stream, created)
		st, e = s.submitAgentJob(ctx, j, req.Model)
	}
	if e != nil {
		writeAnthropicError(c, e)
		return
	}
	defer release(c, st)
	g := newMessageGen("msg_"+id, req.Model)
	if req.Stream {
		s.streamProto(ctx, c, st, g, writeAnthropicError)
		return
	}
	u, _, e, gone := collectProto(ctx, c, st, g)
	switch {
	case gone:
	case e != nil:
		writeAnthropicError(c, e)
	default:
		writeJSON(c, http.StatusOK, g.response(u))
	}
}

// countTokens answers /v1/messages/count_tokens exactly: the prompt is
// rendered and tokenized by a worker serving the model, as a one-token
// generation whose usage counts the prompt. The coordinator has neither
// template nor tokenizer; the prefill also warms the prefix cache for the
// request the client is about to send.
func (s *Server) countTokens(c *gin.Context) {
	body, e := s.readBody(c)
	if e != nil {
		writeAnthropicError(c, e)
		return
	}
	req, ae := anthropic.ParseCountTokensRequest(body)
	if ae != nil {
		writeAnthropicError(c, fromAnthropic(ae))
		return
	}
	req.MaxTokens = 1
	req.Thinking = nil
	req.Stream = false
	chat, e := messagesToChat(req, s.resolveModel(req.Model))
	if e != nil {
		writeAnthropicError(c, e)
		return
	}
	chat.ToolChoice = nil // a forced tool call would constrain, not count
	chat.Temperature = ptrTo(0.0)
	j := &job.Job{ID: reqID(c), Kind: job.KindChat, Model: chat.Model, APIKey: keyID(c), Chat: chat}
	ctx := c.Request.Context()
	st, e := s.submitAgentJob(ctx, j, req.Model)
	if e != nil {
		writeAnthropicError(c, e)
		return
	}
	defer st.Close()
	u, _, e, gone := collectProto(ctx, c, st, newMessageGen("", ""))
	switch {
	case gone:
	case e != nil:
		writeAnthropicError(c, e)
	case u == nil:
		writeAnthropicError(c, openai.ServerError("the worker reported no usage for the token count"))
	default:
		writeJSON(c, http.StatusOK, anthropic.CountTokensResponse{InputTokens: u.PromptTokens})
	}
}

func ptrTo[T any](v T) *T { return &v }

// messagesToChat translates a Messages request into the chat request the
// engine runs. model is the served model (alias resolved).
//
// Content mapping: system, and system messages before the first turn → one
// system message; a later system message → a user turn marked
// <system>…</system>, in place; text blocks → text parts; tool_use → assistant tool_calls (input as the arguments JSON); tool_result
// → tool messages, placed before the user's other blocks of that turn
// because chat templates expect results right after the calls; an error
// result is marked in its text, chat templates having no flag for it;
// thinking → the assistant's reasoning_content (redacted_thinking carries
// nothing a Qwen model can read and is dropped).
func messagesToChat(r *anthropic.MessagesRequest, model string) (*openai.ChatCompletionRequest, *openai.Error) {
	chat := &openai.ChatCompletionRequest{
		Model:       model,
		Temperature: r.Temperature,
		TopP:        r.TopP,
		TopK:        r.TopK,
		Stop:        r.StopSequences,
	}
	if r.MaxTokens > 0 {
		chat.MaxTokens = ptrTo(r.MaxTokens)
	}
	if r.Metadata != nil {
		chat.User = r.Metadata.UserID
	}
	var system []string
	if r.System != nil {
		system = append(system, r.System.String())
	}
	leading := true // system messages before the first turn join the system prompt
	for _, m := range r.Messages {
		if m.Role == "system" && leading {
			system = append(system, blocksText(&m.Content))
			continue
		}
		leading = false
		if m.Role == "assistant" {
			chat.Messages = append(chat.Messages, assistantMessage(m.Content))
			continue
		}
		if m.Role == "system" {
			// In place, as a user turn that says what it is: Qwen3.5's
			// template refuses a system message after the first, and
			// moving it to the top would change the prompt's prefix (and
			// miss the prefix cache) whenever one is added.
			text := blocksText(&m.Content)
			chat.Messages = append(chat.Messages, openai.ChatMessage{Role: openai.RoleUser, Content: openai.TextContent("<system>\n" + text + "\n</system>")})
			continue
		}
		var parts []openai.ContentPart
		for _, b := range m.Content {
			switch b.Type {
			case "text":
				parts = append(parts, openai.ContentPart{Type: "text", Text: b.Text})
			case "tool_result":
				text := blocksText(b.Content)
				if b.IsError {
					text = "Error: " + text
				}
				chat.Messages = append(chat.Messages, openai.ChatMessage{Role: openai.RoleTool, ToolCallID: b.ToolUseID, Content: openai.TextContent(text)})
			}
		}
		if parts != nil {
			content := &openai.Content{Parts: parts}
			if len(parts) == 1 {
				content = openai.TextContent(parts[0].Text)
			}
			chat.Messages = append(chat.Messages, openai.ChatMessage{Role: openai.RoleUser, Content: content})
		}
	}
	if len(system) > 0 {
		chat.Messages = append([]openai.ChatMessage{{Role: openai.RoleSystem, Content: openai.TextContent(strings.Join(system, "\n\n"))}}, chat.Messages...)
	}
	for _, t := range r.Tools {
		params := t.InputSchema
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		chat.Tools = append(chat.Tools, openai.Tool{Type: "function", Function: openai.FunctionDefinition{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	if tc := r.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
			chat.ToolChoice = &openai.ToolChoice{Mode: openai.ToolChoiceAuto}
		case "any":
			chat.ToolChoice = &openai.ToolChoice{Mode: openai.ToolChoiceRequired}
		case "tool":
			chat.ToolChoice = &openai.ToolChoice{Mode: openai.ToolChoiceFunction, Function: tc.Name}
		case "none":
			chat.ToolChoice = &openai.ToolChoice{Mode: openai.ToolChoiceNone}
		}
		if tc.DisableParallelToolUse {
			chat.ParallelToolCalls = ptrTo(false)
		}
		if len(chat.Tools) == 0 {
			chat.ToolChoice = nil // "auto"/"none" without tools: nothing to choose
		}
	}
	// Claude answers without thinking unless asked; Qwen thinking models
	// think by default, so the switch is always set.
	chat.ChatTemplateKwargs = map[string]json.RawMessage{"enable_thinking": json.RawMessage("false")}
	if r.Thinking.Enabled() {
		chat.ChatTemplateKwargs["enable_thinking"] = json.RawMessage("true")
	}
	if len(chat.Messages) == 0 {
		return nil, openai.InvalidRequest("messages", "messages: the conversation has no content")
	}
	if e := chat.Validate(); e != nil {
		return nil, e
	}
	return chat, nil
}

// blocksText is the text of tool_result content (nil: none); blocks are
// joined with newlines.
func blocksText(b *anthropic.Blocks) string {
	if b == nil {
		return ""
	}
	var sb strings.Builder
	for i, bl := range *b {
		if i > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(bl.Text)
	}
	return sb.String()
}

func assistantMessage(blocks anthropic.Blocks) openai.ChatMessage {
	msg := openai.ChatMessage{Role: openai.RoleAssistant}
	var text, thinking strings.Builder
	for _, b := range blocks {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "thinking":
			thinking.WriteString(b.Thinking)
		case "tool_use":
			args := "{}"
			if len(b.Input) > 0 {
				args = string(b.Input)
			}
			msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: b.ID, Type: "function", Function: openai.FunctionCall{Name: b.Name, Arguments: args}})
		}
	}
	msg.ReasoningContent = thinking.String()
	if text.Len() > 0 || len(msg.ToolCalls) == 0 {
		msg.Content = openai.TextContent(text.String())
	}
	return msg
}

// messageGen renders a chat job's events as one Anthropic message: content
// blocks in the order they appear (thinking, text, tool_use), each opened
// when its kind of output starts and closed when another starts.
type messageGen struct {
	id    string
	model string

	blocks  []anthropic.ResponseBlock
	cur     int                      // index of the open block, -1 = none
	tools   map[int]int              // chat tool-call index → block index
	args    map[int]*strings.Builder // block index → tool input JSON so far
	reason  string                   // the job's finish reason
	stopSeq string                   // the stop string that ended it (FinishReason "stop")
}

func newMessageGen(id, model string) *messageGen {
	return &messageGen{id: id, model: model, cur: -1, tools: map[int]int{}, args: map[int]*strings.Builder{}}
}

func (g *messageGen) signature() string {
	// Anthropic signs thinking so that it can be sent back; there is
	// nothing to verify here, but clients keep and return the field.
	return base64.RawStdEncoding.EncodeToString([]byte("macpool:" + g.id))
}

func (g *messageGen) openBlock(w *sseWriter, b anthropic.ResponseBlock) int {
	g.closeBlock(w)
	g.blocks = append(g.blocks, b)
	g.cur = len(g.blocks) - 1
	start := b
	start.Text, start.Thinking, start.Signature, start.Input = "", "", "", nil
	w.event("content_block_start", anthropic.BlockStart{Type: "content_block_start", Index: g.cur, ContentBlock: start})
	return g.cur
}

func (g *messageGen) closeBlock(w *sseWriter) {
	if g.cur < 0 {
		return
	}
	if b := &g.blocks[g.cur]; b.Type == "thinking" {
		b.Signature = g.signature()
		w.event("content_block_delta", anthropic.BlockDelta{Type: "content_block_delta", Index: g.cur, Delta: anthropic.Delta{Type: "signature_delta", Signature: b.Signature}})
	}
	w.event("content_block_stop", anthropic.BlockStop{Type: "content_block_stop", Index: g.cur})
	g.cur = -1
}

func (g *messageGen) openKind() string {
	if g.cur < 0 {
		return ""
	}
	return g.blocks[g.cur].Type
}

func (g *messageGen) open(w *sseWriter) {
	w.event("message_start", anthropic.MessageStart{Type: "message_start", Message: &anthropic.MessageResponse{
		ID: g.id, Type: "message", Role: "assistant", Model: g.model, Content: []anthropic.ResponseBlock{}}})
	w.event("ping", anthropic.Simple{Type: "ping"})
}

func (g *messageGen) event(w *sseWriter, ev *job.Event) *openai.Error {
	if ev.Choice != 0 {
		return openai.ServerError("event for choice %d of a messages request", ev.Choice)
	}
	if ev.Reasoning != "" {
		i := g.cur
		if g.openKind() != "thinking" {
			i = g.openBlock(w, anthropic.ResponseBlock{Type: "thinking"})
		}
		g.blocks[i].Thinking += ev.Reasoning
		w.event("content_block_delta", anthropic.BlockDelta{Type: "content_block_delta", Index: i, Delta: anthropic.Delta{Type: "thinking_delta", Thinking: ev.Reasoning}})
	}
	if ev.Text != "" {
		i := g.cur
		if g.openKind() != "text" {
			i = g.openBlock(w, anthropic.ResponseBlock{Type: "text"})
		}
		g.blocks[i].Text += ev.Text
		w.event("content_block_delta", anthropic.BlockDelta{Type: "content_block_delta", Index: i, Delta: anthropic.Delta{Type: "text_delta", Text: ev.Text}})
	}
	for _, d := range ev.ToolCalls {
		i, ok := g.tools[d.Index]
		if !ok {
			b := anthropic.ResponseBlock{Type: "tool_use", ID: d.ID}
			if d.Function != nil {
				b.Name = d.Function.Name
			}
			if b.ID == "" {
				b.ID = fmt.Sprintf("toolu_%s_%d", g.id, d.Index)
			}
			i = g.openBlock(w, b)
			g.tools[d.Index] = i
			g.args[i] = &strings.Builder{}
		} else if i != g.cur {
			return openai.ServerError("tool call %d continued after another block started", d.Index)
		}
		if d.Function != nil && d.Function.Arguments != "" {
			g.args[i].WriteString(d.Function.Arguments)
			w.event("content_block_delta", anthropic.BlockDelta{Type: "content_block_delta", Index: i, Delta: anthropic.Delta{Type: "input_json_delta", PartialJSON: d.Function.Arguments}})
		}
	}
	if ev.FinishReason != "" {
		g.reason, g.stopSeq = ev.FinishReason, ev.StopSequence
	}
	return nil
}

func (g *messageGen) stopReason() *string {
	r := anthropic.StopEndTurn
	switch {
	case g.reason == "length":
		r = anthropic.StopMaxTokens
	case g.reason == "tool_calls":
		r = anthropic.StopToolUse
	case g.reason == "stop" && g.stopSeq != "":
		r = anthropic.StopSequence
	}
	return &r
}

// stopSequence is the stop sequence that ended the message (null unless
// stop_reason is "stop_sequence").
func (g *messageGen) stopSequence() *string {
	if g.reason != "stop" || g.stopSeq == "" {
		return nil
	}
	s := g.stopSeq
	return &s
}

func messagesUsage(u *openai.Usage) anthropic.Usage {
	if u == nil {
		return anthropic.Usage{}
	}
	au := anthropic.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if d := u.PromptTokensDetails; d != nil {
		au.CacheReadInputTokens = d.CachedTokens
		au.InputTokens -= d.CachedTokens
	}
	return au
}

func (g *messageGen) settle(w *sseWriter) {
	g.closeBlock(w)
	for i, a := range g.args {
		if in := strings.TrimSpace(a.String()); in != "" {
			g.blocks[i].Input = json.RawMessage(in)
		}
	}
}

func (g *messageGen) finish(w *sseWriter, u *openai.Usage, _ string) {
	g.settle(w)
	w.event("message_delta", anthropic.MessageDelta{Type: "message_delta",
		Delta: anthropic.MessageDeltaDelta{StopReason: g.stopReason(), StopSequence: g.stopSequence()}, Usage: messagesUsage(u)})
	w.event("message_stop", anthropic.Simple{Type: "message_stop"})
}

func (g *messageGen) fail(w *sseWriter, e *openai.Error) {
	w.event("error", anthropicError(e))
}

// response is the non-streamed message.
func (g *messageGen) response(u *openai.Usage) *anthropic.MessageResponse {
	g.settle(discardWriter())
	blocks := g.blocks
	if blocks == nil {
		blocks = []anthropic.ResponseBlock{}
	}
	return &anthropic.MessageResponse{ID: g.id, Type: "message", Role: "assistant", Model: g.model,
		Content: blocks, StopReason: g.stopReason(), StopSequence: g.stopSequence(), Usage: messagesUsage(u)}
}
