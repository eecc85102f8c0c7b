package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// The OpenAI Responses surface (POST /v1/responses, GET/DELETE
// /v1/responses/{id}, GET /v1/responses/{id}/input_items). Like Messages, a
// request becomes a chat job at the edge; the conversation state that
// previous_response_id refers to lives in Config.Responses, so any
// coordinator can continue a conversation another one served.

// storedResponse is the document a ResponseStore keeps per response.
type storedResponse struct {
	Response *openai.Response `json:"response"`
	// Input is the whole conversation before Output: the earlier turns of
	// the previous_response_id chain and their outputs, then this request's
	// input items. Instructions are not part of it: they do not carry over
	// to a next response.
	Input []openai.ResponseItem `json:"input"`
}

// Limits of a request.
const (
	maxMetadataKeys = 16
	maxInputItems   = 100 // of an input_items page
)

func (s *Server) responses(c *gin.Context) {
	body, e := s.readBody(c)
	if e != nil {
		writeError(c, e)
		return
	}
	req, e := parseResponseRequest(body)
	if e != nil {
		writeError(c, e)
		return
	}
	id, created, e := s.streamStart(c, req.Stream) // resume.go
	if e != nil {
		writeError(c, e)
		return
	}
	ctx := c.Request.Context()
	var history []openai.ResponseItem
	if req.PreviousResponseID != "" {
		prev, e := s.loadResponse(ctx, req.PreviousResponseID, "previous_response_id")
		if e != nil {
			writeError(c, e)
			return
		}
		history = append(append(history, prev.Input...), prev.Response.Output...)
	}
	input := append(history, numberItems(req.Input.Items, id, len(history))...)
	chat, namespaces, e := responsesToChat(req, input, s.resolveModel(req.Model))
	if e != nil {
		writeError(c, e)
		return
	}
	j := &job.Job{ID: id, Kind: job.KindChat, Model: chat.Model, APIKey: keyID(c), Chat: chat, Stream: streamInfo(req.Stream, created)}
	st, e := s.submitAgentJob(ctx, j, req.Model)
	if e != nil {
		writeError(c, e)
		return
	}
	defer release(c, st)
	g := newResponseGen("resp_"+id, req, created.Unix(), namespaces)
	if req.Stored() {
		g.persist = func(r *openai.Response) {
			doc, err := json.Marshal(storedResponse{Response: r, Input: input})
			if err == nil {
				// The client may send previous_response_id to another
				// coordinator the moment it sees the response, so the
				// store is written before the response goes out. A
				// failed write loses the state, not the answer.
				err = s.cfg.Responses.PutResponse(context.WithoutCancel(ctx), r.ID, doc)
			}
			if err != nil {
				s.log.Warn("store response failed", "request_id", id, "response_id", r.ID, "error", err)
			}
		}
	}
	if req.Stream {
		s.streamProto(ctx, c, st, g, writeError)
		return
	}
	u, worker, e, gone := collectProto(ctx, c, st, g)
	switch {
	case gone:
	case e != nil:
		writeError(c, e)
	default:
		writeJSON(c, http.StatusOK, g.complete(discardWriter(), u, worker))
	}
}

// numberItems gives input items without an id one, as the API does, so
// that input_items can page by id.
func numberItems(items []openai.ResponseItem, reqID string, offset int) []openai.ResponseItem {
	out := make([]openai.ResponseItem, len(items))
	prefix := map[string]string{"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}
	for i, it := range items {
		if it.ID == "" {
			it.ID = fmt.Sprintf("%s_%s_in%d", prefix[it.Type], reqID, offset+i)
		}
		out[i] = it
	}
	return out
}

func parseResponseRequest(body []byte) (*openai.ResponseRequest, *openai.Error) {
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil, openai.InvalidRequest("", "request body is empty; expected a JSON object")
	}
	var req openai.ResponseRequest
	if err := json.Unmarshal(body, &req); err != nil {
		var oe *openai.Error
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &oe):
			return nil, oe
		case errors.As(err, &se):
			return nil, openai.InvalidRequest("", "request body is not valid JSON: %s (at byte %d)", se.Error(), se.Offset)
		case errors.As(err, &te) && te.Field != "":
			return nil, openai.InvalidRequest(te.Field, "invalid type for %s: expected %s, got %s", te.Field, te.Type, te.Value)
		case errors.As(err, &te):
			return nil, openai.InvalidRequest("", "request body must be a JSON object, got %s", te.Value)
		}
		return nil, openai.InvalidRequest("", "request body is not valid JSON: %v", err)
	}
	switch {
	case req.Model == "":
		return nil, openai.InvalidRequest("model", "model is required")
	case len(req.Input.Items) == 0 && req.PreviousResponseID == "":
		return nil, openai.InvalidRequest("input", "input is required")
	case req.Background:
		return nil, openai.InvalidRequest("background", "background responses are not supported; stream or wait for the response instead")
	case len(req.Conversation) > 0 && string(req.Conversation) != "null":
		return nil, openai.InvalidRequest("conversation", "conversations are not supported; chain responses with previous_response_id instead")
	case len(req.Metadata) > maxMetadataKeys:
		return nil, openai.InvalidRequest("metadata", "metadata can have at most %d keys, got %d", maxMetadataKeys, len(req.Metadata))
	case req.MaxOutputTokens != nil && *req.MaxOutputTokens < 1:
		return nil, openai.InvalidRequest("max_output_tokens", "max_output_tokens must be at least 1, got %d", *req.MaxOutputTokens)
	}
	switch req.Truncation {
	case "", "auto", "disabled":
	default:
		return nil, openai.InvalidRequest("truncation", `truncation must be "auto" or "disabled", got %q`, req.Truncation)
	}
	if r := req.Reasoning; r != nil && r.Effort != nil {
		switch *r.Effort {
		case "none", "minimal", "low", "medium", "high", "xhigh":
		default:
			return nil, openai.InvalidRequest("reasoning.effort", "reasoning.effort must be one of none, minimal, low, medium, high, xhigh; got %q", *r.Effort)
		}
	}
	return &req, nil
}

// responsesToChat translates the conversation (history and this request's
// items) into the chat request the engine runs. It returns the namespace of
// every function that came from a namespace tool, for the output items.
//
// Items: instructions and the leading system/developer messages → one
// system message; a later system/developer message → a user turn marked
// <system>…</system>; other messages → a message of their role (text
// parts joined); reasoning → the reasoning_content of the next
// assistant message; function_call → a tool call of the assistant message
// it follows (or a new one); function_call_output → a tool message.
func responsesToChat(r *openai.ResponseRequest, items []openai.ResponseItem, model string) (*openai.ChatCompletionRequest, map[string]string, *openai.Error) {
	chat := &openai.ChatCompletionRequest{
		Model:             model,
		Temperature:       r.Temperature,
		TopP:              r.TopP,
		ParallelToolCalls: r.ParallelToolCalls,
		User:              r.User,
		Seed:              r.Seed,
		Truncation:        r.Truncation,
	}
	if r.MaxOutputTokens != nil {
		chat.MaxCompletionTokens = r.MaxOutputTokens
	}
	// One system message: the instructions and every system or developer
	// message before the first other item (Codex sends two developer
	// messages). Qwen3.5's template refuses a second system message and
	// knows no developer role; a later one goes in place as a user turn
	// marked <system>…</system>, which keeps the prompt's prefix stable.
	var system []string
	if r.Instructions != "" {
		system = append(system, r.Instructions)
	}
	leading := true
	var reasoning strings.Builder // pending for the next assistant message
	lastAssistant := func() *openai.ChatMessage {
		if n := len(chat.Messages); n > 0 && chat.Messages[n-1].Role == openai.RoleAssistant {
			return &chat.Messages[n-1]
		}
		return nil
	}
	for i, it := range items {
		at := fmt.Sprintf("input[%d]", i)
		if it.Type != "message" || (it.Role != openai.RoleSystem && it.Role != openai.RoleDeveloper) {
			leading = false
		}
		switch it.Type {
		case "message":
			var text strings.Builder
			for j, p := range it.Content {
				switch p.Type {
				case "input_text", "output_text", "text":
					text.WriteString(p.Text)
				case "refusal":
					text.WriteString(p.Refusal)
				case "input_image", "input_file", "input_audio":
					return nil, nil, openai.InvalidRequest(fmt.Sprintf("%s.content[%d].type", at, j), "content part type %q is not supported: this server serves text-only models", p.Type)
				default:
					return nil, nil, openai.InvalidRequest(fmt.Sprintf("%s.content[%d].type", at, j), "unknown content part type %q", p.Type)
				}
			}
			switch it.Role {
			case openai.RoleSystem, openai.RoleDeveloper:
				if leading {
					system = append(system, text.String())
				} else {
					chat.Messages = append(chat.Messages, openai.ChatMessage{Role: openai.RoleUser, Content: openai.TextContent("<system>\n" + text.String() + "\n</system>")})
				}
				continue
			case openai.RoleUser:
				chat.Messages = append(chat.Messages, openai.ChatMessage{Role: it.Role, Content: openai.TextContent(text.String())})
			case openai.RoleAssistant:
				chat.Messages = append(chat.Messages, openai.ChatMessage{Role: openai.RoleAssistant, Content: openai.TextContent(text.String()), ReasoningContent: reasoning.String()})
				reasoning.Reset()
			default:
				return nil, nil, openai.InvalidRequest(at+".role", "%s.role must be user, assistant, system or developer, got %q", at, it.Role)
			}
		case "reasoning":
			switch text, ok := openReasoning(it.EncryptedContent); {
			case len(it.Content) > 0:
				for _, p := range it.Content {
					reasoning.WriteString(p.Text)
				}
			case ok:
				reasoning.WriteString(text)
			default:
				for _, p := range it.Summary {
					reasoning.WriteString(p.Text)
				}
			}
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, nil, openai.InvalidRequest(at, "%s: a function_call needs call_id and name", at)
			}
			m := lastAssistant()
			if m == nil || reasoning.Len() > 0 {
				chat.Messages = append(chat.Messages, openai.ChatMessage{Role: openai.RoleAssistant, ReasoningContent: reasoning.String()})
				reasoning.Reset()
				m = lastAssistant()
			}
			args := it.Arguments
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			m.ToolCalls = append(m.ToolCalls, openai.ToolCall{ID: it.CallID, Type: "function", Function: openai.FunctionCall{Name: it.Name, Arguments: args}})
		case "function_call_output":
			if it.CallID == "" {
				return nil, nil, openai.InvalidRequest(at+".call_id", "%s.call_id is required", at)
			}
			chat.Messages = append(chat.Messages, openai.ChatMessage{Role: openai.RoleTool, ToolCallID: it.CallID, Content: openai.TextContent(it.Output)})
		case "item_reference":
			return nil, nil, openai.InvalidRequest(at+".type", "item_reference input items are not supported; send the item itself or use previous_response_id")
		case "":
			return nil, nil, openai.InvalidRequest(at+".type", "%s.type is required", at)
		default:
			return nil, nil, openai.InvalidRequest(at+".type", "input item type %q is not supported (supported: message, reasoning, function_call, function_call_output)", it.Type)
		}
	}
	if len(system) > 0 {
		chat.Messages = append([]openai.ChatMessage{{Role: openai.RoleSystem, Content: openai.TextContent(strings.Join(system, "\n\n"))}}, chat.Messages...)
	}
	namespaces := map[string]string{}
	for i, t := range r.Tools {
		switch t.Type {
		case "function":
			if e := addFunctionTool(chat, t, fmt.Sprintf("tools[%d]", i)); e != nil {
				return nil, nil, e
			}
		case "namespace":
			// A group of function tools (Codex sends its sub-agent
			// tools so): offered to the model one by one.
			for j, f := range t.Tools {
				if f.Type != "function" {
					return nil, nil, openai.InvalidRequest(fmt.Sprintf("tools[%d].tools[%d].type", i, j), "tool type %q is not supported: only function tools can be served", f.Type)
				}
				if e := addFunctionTool(chat, f, fmt.Sprintf("tools[%d].tools[%d]", i, j)); e != nil {
					return nil, nil, e
				}
				namespaces[f.Name] = t.Name
			}
		default:
			hint := ""
			if t.Type == "web_search" || t.Type == "web_search_preview" {
				hint = ` (Codex: set web_search = "disabled" in its config)`
			}
			return nil, nil, openai.InvalidRequest(fmt.Sprintf("tools[%d].type", i), "tool type %q is not supported: this pool runs no hosted tools, only function tools%s", t.Type, hint)
		}
	}
	if tc := r.ToolChoice; tc != nil && len(chat.Tools) > 0 {
		chat.ToolChoice = &openai.ToolChoice{Mode: tc.Mode, Function: tc.Function}
	}
	if r.Text != nil && r.Text.Format != nil {
		switch f := r.Text.Format; f.Type {
		case "text":
		case "json_object":
			chat.ResponseFormat = &openai.ResponseFormat{Type: "json_object"}
		case "json_schema":
			if f.Name == "" {
				return nil, nil, openai.InvalidRequest("text.format.name", "text.format.name is required for json_schema")
			}
			chat.ResponseFormat = &openai.ResponseFormat{Type: "json_schema", JSONSchema: &openai.JSONSchema{Name: f.Name, Description: f.Description, Schema: f.Schema, Strict: f.Strict}}
		default:
			return nil, nil, openai.InvalidRequest("text.format.type", `text.format.type must be "text", "json_object" or "json_schema", got %q`, f.Type)
		}
	}
	if r.Reasoning != nil && r.Reasoning.Effort != nil {
		// Qwen's thinking is a switch, not a level.
		on := "true"
		if e := *r.Reasoning.Effort; e == "none" || e == "minimal" {
			on = "false"
		}
		chat.ChatTemplateKwargs = map[string]json.RawMessage{"enable_thinking": json.RawMessage(on)}
	}
	if len(chat.Messages) == 0 {
		return nil, nil, openai.InvalidRequest("input", "input has no messages")
	}
	if e := chat.Validate(); e != nil {
		return nil, nil, e
	}
	return chat, namespaces, nil
}

func addFunctionTool(chat *openai.ChatCompletionRequest, t openai.ResponseTool, at string) *openai.Error {
	if t.Name == "" {
		return openai.InvalidRequest(at+".name", "%s.name is required", at)
	}
	params := t.Parameters
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	chat.Tools = append(chat.Tools, openai.Tool{Type: "function", Function: openai.FunctionDefinition{Name: t.Name, Description: t.Description, Parameters: params, Strict: t.Strict}})
	return nil
}

// loadResponse reads a stored response; param names the request field for
// the 404.
func (s *Server) loadResponse(ctx context.Context, id, param string) (*storedResponse, *openai.Error) {
	notFound := &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: param, Code: "response_not_found",
		Message: fmt.Sprintf("Response with id '%s' not found.", id)}
	if param == "previous_response_id" {
		notFound.Code = "previous_response_not_found"
		notFound.Message = fmt.Sprintf("Previous response with id '%s' not found.", id)
	}
	doc, err := s.cfg.Responses.GetResponse(ctx, id)
	if errors.Is(err, admin.ErrResponseNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, openai.Unavailable("response store: %v", err)
	}
	var sr storedResponse
	if err := json.Unmarshal(doc, &sr); err != nil || sr.Response == nil {
		return nil, openai.ServerError("stored response %s is unreadable", id)
	}
	return &sr, nil
}

func (s *Server) getResponse(c *gin.Context) {
	if c.Query("stream") == "true" {
		writeError(c, openai.InvalidRequest("stream", "streaming a stored response again is not supported; get it without stream"))
		return
	}
	sr, e := s.loadResponse(c.Request.Context(), c.Param("id"), "response_id")
	if e != nil {
		writeError(c, e)
		return
	}
	writeJSON(c, http.StatusOK, sr.Response)
}

func (s *Server) deleteResponse(c *gin.Context) {
	id := c.Param("id")
	err := s.cfg.Responses.DeleteResponse(c.Request.Context(), id)
	switch {
	case errors.Is(err, admin.ErrResponseNotFound):
		writeError(c, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "response_id", Code: "response_not_found",
			Message: fmt.Sprintf("Response with id '%s' not found.", id)})
	case err != nil:
		writeError(c, openai.Unavailable("response store: %v", err))
	default:
		writeJSON(c, http.StatusOK, openai.ResponseDeleted{ID: id, Object: "response", Deleted: true})
	}
}

// responseInputItems pages the stored input items: limit (1..100, default
// 20), order (desc, the default, or asc) and after (an item id).
func (s *Server) responseInputItems(c *gin.Context) {
	sr, e := s.loadResponse(c.Request.Context(), c.Param("id"), "response_id")
	if e != nil {
		writeError(c, e)
		return
	}
	limit := 20
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxInputItems {
			writeError(c, openai.InvalidRequest("limit", "limit must be an integer between 1 and %d, got %q", maxInputItems, v))
			return
		}
		limit = n
	}
	items := append([]openai.ResponseItem(nil), sr.Input...)
	switch c.DefaultQuery("order", "desc") {
	case "desc":
		for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
			items[i], items[j] = items[j], items[i]
		}
	case "asc":
	default:
		writeError(c, openai.InvalidRequest("order", `order must be "asc" or "desc", got %q`, c.Query("order")))
		return
	}
	if after := c.Query("after"); after != "" {
		for i, it := range items {
			if it.ID == after {
				items = items[i+1:]
				break
			}
		}
	}
	list := openai.ResponseInputItemList{Object: "list", Data: items}
	if len(items) > limit {
		list.Data, list.HasMore = items[:limit], true
	}
	if list.Data == nil {
		list.Data = []openai.ResponseItem{}
	}
	if n := len(list.Data); n > 0 {
		list.FirstID, list.LastID = &list.Data[0].ID, &list.Data[n-1].ID
	}
	writeJSON(c, http.StatusOK, list)
}

// Reasoning in encrypted_content. A stateless client (Codex: store false,
// include reasoning.encrypted_content) sends reasoning items back with
// their summary and encrypted_content only, not their content. The
// thinking is not secret here, so encrypted_content carries it, sealed
// only against accidental edits, so that the next request can give it back
// to the model (Qwen templates show the thinking of the current turn's
// earlier tool-call steps).
const sealedReasoningPrefix = "macpool.r1:"

func sealReasoning(text string) *string {
	s := sealedReasoningPrefix + base64.StdEncoding.EncodeToString([]byte(text))
	return &s
}

func openReasoning(sealed *string) (string, bool) {
	if sealed == nil {
		return "", false
	}
	b64, ok := strings.CutPrefix(*sealed, sealedReasoningPrefix)
	if !ok {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	return string(b), err == nil
}
