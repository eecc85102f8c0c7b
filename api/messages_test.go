package api

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/macpool/macpool/api/anthropic"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

func postMessages(t *testing.T, url, body string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sseFrame is one named frame of a stream.
type sseFrame struct {
	event string
	data  map[string]any
}

func readFrames(t *testing.T, r io.Reader) []sseFrame {
	t.Helper()
	var frames []sseFrame
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			name = v
		} else if v, ok := strings.CutPrefix(line, "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(v), &m); err != nil {
				t.Fatalf("data %s: %v", v, err)
			}
			if m["type"] != name {
				t.Errorf("event line %q but data type %v", name, m["type"])
			}
			frames = append(frames, sseFrame{name, m})
		}
	}
	return frames
}

const messagesBody = `{"model":"qwen3-8b","max_tokens":100,"system":[{"type":"text","text":"Be brief."}],
	"messages":[{"role":"user","content":"Weather in Paris?"}],
	"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
	"thinking":{"type":"enabled","budget_tokens":50}%s}`

// TestMessagesStreamEvents checks the exact event sequence Anthropic sends
// for thinking, text and a tool call.
func TestMessagesStreamEvents(t *testing.T) {
	svc := &fakeService{events: scriptedChat()}
	_, hs := newTestServer(t, svc, nil)
	resp := postMessages(t, hs.URL+"/v1/messages", strings.Replace(messagesBody, "%s", `,"stream":true`, 1), nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	frames := readFrames(t, resp.Body)
	var got []string
	for _, f := range frames {
		s := f.event
		if d, ok := f.data["delta"].(map[string]any); ok && f.event == "content_block_delta" {
			s += "/" + d["type"].(string)
		}
		if b, ok := f.data["content_block"].(map[string]any); ok {
			s += "/" + b["type"].(string)
		}
		got = append(got, s)
	}
	want := []string{
		"message_start", "ping",
		"content_block_start/thinking", "content_block_delta/thinking_delta", "content_block_delta/thinking_delta",
		"content_block_delta/signature_delta", "content_block_stop",
		"content_block_start/text", "content_block_delta/text_delta", "content_block_delta/text_delta", "content_block_stop",
		"content_block_start/tool_use", "content_block_delta/input_json_delta", "content_block_delta/input_json_delta", "content_block_stop",
		"message_delta", "message_stop",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events:\n got %v\nwant %v", got, want)
	}
	md := frames[len(frames)-2].data
	if d := md["delta"].(map[string]any); d["stop_reason"] != "tool_use" {
		t.Errorf("stop_reason = %v", d["stop_reason"])
	}
	if u := md["usage"].(map[string]any); u["output_tokens"] != 20.0 || u["input_tokens"] != 4.0 || u["cache_read_input_tokens"] != 8.0 {
		t.Errorf("usage = %v", u)
	}
	if b := frames[11].data["content_block"].(map[string]any); b["id"] != "call_1" || b["name"] != "get_weather" {
		t.Errorf("tool_use start = %v", b)
	}
	closedOnce(t, svc.lastStream(t))
}

func TestMessagesNonStream(t *testing.T) {
	svc := &fakeService{events: scriptedChat()}
	_, hs := newTestServer(t, svc, func(c *Config) { c.ModelAliases = map[string]string{"claude-sonnet-4-5": "qwen3-8b"} })
	body := strings.Replace(strings.Replace(messagesBody, "%s", "", 1), `"qwen3-8b"`, `"claude-sonnet-4-5"`, 1)
	resp := postMessages(t, hs.URL+"/v1/messages", body, nil)
	var m anthropic.MessageResponse
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d body %s", resp.StatusCode, raw)
	}
	var types []string
	for _, b := range m.Content {
		types = append(types, b.Type)
	}
	if !slices.Equal(types, []string{"thinking", "text", "tool_use"}) || m.Model != "claude-sonnet-4-5" || *m.StopReason != "tool_use" {
		t.Errorf("message = %s", raw)
	}
	if !strings.Contains(string(raw), `"input":{"city":"Paris"}`) || !strings.Contains(string(raw), `"thinking":"The user wants the weather.","signature":"`) {
		t.Errorf("blocks = %s", raw)
	}
	chat := svc.lastJob(t).Chat
	if chat.Model != "qwen3-8b" || chat.Messages[0].Role != "system" || chat.Messages[0].Content.String() != "Be brief." {
		t.Errorf("chat = %+v", chat)
	}
	if string(chat.ChatTemplateKwargs["enable_thinking"]) != "true" {
		t.Errorf("enable_thinking = %s", chat.ChatTemplateKwargs["enable_thinking"])
	}
}

// TestMessagesStopSequence: a choice ended by a stop string is
// stop_reason "stop_sequence" naming it; an end of turn names none.
func TestMessagesStopSequence(t *testing.T) {
	for _, tc := range []struct {
		ev           job.Event
		reason, stop string
	}{
		{job.Event{Worker: "w", Text: "done", FinishReason: "stop", StopSequence: "END"}, "stop_sequence", `"END"`},
		{job.Event{Worker: "w", Text: "done", FinishReason: "stop"}, "end_turn", "null"},
		{job.Event{Worker: "w", Text: "done", FinishReason: "length"}, "max_tokens", "null"},
	} {
		svc := &fakeService{events: []job.Event{{Worker: "w", Role: "assistant"}, tc.ev}}
		_, hs := newTestServer(t, svc, nil)
		body := `{"model":"qwen3-8b","max_tokens":10,"stop_sequences":["END"],"messages":[{"role":"user","content":"hi"}]}`
		resp := postMessages(t, hs.URL+"/v1/messages", body, nil)
		raw, _ := io.ReadAll(resp.Body)
		want := `"stop_reason":"` + tc.reason + `","stop_sequence":` + tc.stop
		if !strings.Contains(string(raw), want) {
			t.Errorf("%+v: message %s, want %s", tc.ev, raw, want)
		}
		stream := strings.Replace(body, `"max_tokens":10,`, `"max_tokens":10,"stream":true,`, 1)
		resp = postMessages(t, hs.URL+"/v1/messages", stream, nil)
		raw, _ = io.ReadAll(resp.Body)
		if !strings.Contains(string(raw), `"delta":{`+want) {
			t.Errorf("%+v: stream %s, want a message_delta with %s", tc.ev, raw, want)
		}
	}
}

// TestMessagesRequestMapping checks the chat request a tool round trip
// becomes.
func TestMessagesRequestMapping(t *testing.T) {
	svc := &fakeService{events: scriptedChat()}
	_, hs := newTestServer(t, svc, nil)
	body := `{"model":"qwen3-8b","max_tokens":64,"temperature":0.2,"top_p":0.9,"top_k":20,"stop_sequences":["END"],
		"metadata":{"user_id":"u1"},"tool_choice":{"type":"any","disable_parallel_tool_use":true},
		"tools":[{"name":"f","description":"d","input_schema":{"type":"object"}}],
		"messages":[
		{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}]},
		{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"x"},{"type":"text","text":"calling"},{"type":"tool_use","id":"t1","name":"f","input":{"x":1}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"boom"}],"is_error":true},{"type":"text","text":"and?"}]}]}`
	resp := postMessages(t, hs.URL+"/v1/messages", body, nil)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	chat := svc.lastJob(t).Chat
	var roles []string
	for _, m := range chat.Messages {
		roles = append(roles, m.Role)
	}
	if want := []string{"user", "assistant", "tool", "user"}; !slices.Equal(roles, want) {
		t.Fatalf("roles = %v, want %v", roles, want)
	}
	if got := chat.Messages[0].Content; len(got.Parts) != 2 || got.String() != "ab" {
		t.Errorf("user content = %+v", got)
	}
	a := chat.Messages[1]
	if a.ReasoningContent != "hmm" || a.Content.String() != "calling" || len(a.ToolCalls) != 1 || a.ToolCalls[0].Function.Arguments != `{"x":1}` {
		t.Errorf("assistant = %+v", a)
	}
	if m := chat.Messages[2]; m.ToolCallID != "t1" || m.Content.String() != "Error: boom" {
		t.Errorf("tool = %+v", m)
	}
	if chat.ToolChoice.Mode != openai.ToolChoiceRequired || *chat.ParallelToolCalls || chat.User != "u1" {
		t.Errorf("tool choice %+v parallel %v user %q", chat.ToolChoice, chat.ParallelToolCalls, chat.User)
	}
	if *chat.Temperature != 0.2 || *chat.TopP != 0.9 || *chat.TopK != 20 || !slices.Equal(chat.Stop, []string{"END"}) || *chat.MaxTokens != 64 {
		t.Errorf("sampling %+v", chat)
	}
	if string(chat.ChatTemplateKwargs["enable_thinking"]) != "false" {
		t.Errorf("enable_thinking without thinking = %s", chat.ChatTemplateKwargs["enable_thinking"])
	}
}

func TestMessagesErrors(t *testing.T) {
	svc := &fakeService{events: scriptedChat(), models: []openai.Model{{ID: "qwen3-8b"}}}
	_, hs := newTestServer(t, svc, func(c *Config) { c.Auth = NewStaticKeys(map[string]string{"sk-good": "alice"}) })
	good := map[string]string{"x-api-key": "sk-good"}
	msg := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, path, body string
		header           map[string]string
		status           int
		typ, msg         string
	}{
		{"no key", "/v1/messages", `{}`, nil, 401, "authentication_error", "API key"},
		{"bad key", "/v1/messages", `{}`, map[string]string{"x-api-key": "sk-bad"}, 401, "authentication_error", "Incorrect API key"},
		{"empty", "/v1/messages", ``, good, 400, "invalid_request_error", "empty"},
		{"no max_tokens", "/v1/messages", `{"model":"m",` + msg + `}`, good, 400, "invalid_request_error", "max_tokens"},
		{"bad role", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"tool","content":"x"}]}`, good, 400, "invalid_request_error", "must be \"user\", \"assistant\" or \"system\""},
		{"image", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, good, 400, "invalid_request_error", "text-only"},
		{"server tool", "/v1/messages", `{"model":"m","max_tokens":5,` + msg + `,"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, good, 400, "invalid_request_error", "server or versioned tool"},
		{"orphan result", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x"}]}]}`, good, 400, "invalid_request_error", "no earlier tool_use"},
		{"budget", "/v1/messages", `{"model":"m","max_tokens":5,` + msg + `,"thinking":{"type":"enabled"}}`, good, 400, "invalid_request_error", "budget_tokens: field required"},
		{"tool choice", "/v1/messages", `{"model":"m","max_tokens":5,` + msg + `,"tool_choice":{"type":"tool","name":"f"}}`, good, 400, "invalid_request_error", "no tool named"},
		{"temperature", "/v1/messages", `{"model":"m","max_tokens":5,` + msg + `,"temperature":1.5}`, good, 400, "invalid_request_error", "between 0 and 1"},
		{"unknown model", "/v1/messages", `{"model":"missing","max_tokens":5,` + msg + `}`, good, 404, "not_found_error", "available models: qwen3-8b"},
		{"count no model", "/v1/messages/count_tokens", `{` + msg + `}`, good, 400, "invalid_request_error", "model"},
		{"bearer ok, bad body", "/v1/messages", `[1]`, map[string]string{"Authorization": "Bearer sk-good"}, 400, "invalid_request_error", "must be a JSON object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := postMessages(t, hs.URL+tc.path, tc.body, tc.header)
			raw, _ := io.ReadAll(resp.Body)
			var e anthropic.ErrorResponse
			if err := json.Unmarshal(raw, &e); err != nil || e.Type != "error" || e.Error == nil {
				t.Fatalf("body %s: %v", raw, err)
			}
			if resp.StatusCode != tc.status || e.Error.Type != tc.typ || !strings.Contains(e.Error.Message, tc.msg) {
				t.Errorf("got %d %s %q, want %d %s containing %q", resp.StatusCode, e.Error.Type, e.Error.Message, tc.status, tc.typ, tc.msg)
			}
		})
	}
}

// TestMessagesStreamError: a failure after the stream started is an
// Anthropic error event.
func TestMessagesStreamError(t *testing.T) {
	svc := &fakeService{events: []job.Event{
		{Worker: "mac-1", Role: "assistant", Text: "Hel"},
		{Worker: "mac-1", Err: openai.Unavailable("worker mac-1 went away")},
	}}
	_, hs := newTestServer(t, svc, nil)
	resp := postMessages(t, hs.URL+"/v1/messages", `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	frames := readFrames(t, resp.Body)
	last := frames[len(frames)-1]
	e, _ := last.data["error"].(map[string]any)
	if last.event != "error" || e["type"] != "overloaded_error" || !strings.Contains(e["message"].(string), "went away") {
		t.Errorf("last frame = %+v", last)
	}
}

// scriptService answers job i with scripts[i] and records the jobs.
type scriptService struct {
	fakeService
	scripts [][]job.Event
	mu      sync.Mutex
	n       int
}

func (s *scriptService) Submit(ctx context.Context, j *job.Job) (job.Stream, error) {
	s.mu.Lock()
	i := s.n
	s.n++
	s.mu.Unlock()
	s.fakeService.events = s.scripts[min(i, len(s.scripts)-1)]
	return s.fakeService.Submit(ctx, j)
}

// TestMessagesThinkingBudget: thinking that runs into budget_tokens is
// closed there and the answer continues in a second job, one stream to the
// client.
func TestMessagesThinkingBudget(t *testing.T) {
	svc := &scriptService{scripts: [][]job.Event{
		{{Role: "assistant", Reasoning: "think "}, {Reasoning: "more"}, {FinishReason: "length", Usage: &openai.Usage{PromptTokens: 10, CompletionTokens: 50, TotalTokens: 60}}},
		{{Role: "assistant", Text: "Answer."}, {FinishReason: "stop", Usage: &openai.Usage{PromptTokens: 60, CompletionTokens: 3, TotalTokens: 63}}},
	}}
	_, hs := newTestServer(t, svc, nil)
	resp := postMessages(t, hs.URL+"/v1/messages", strings.Replace(messagesBody, "%s", "", 1), nil)
	var m anthropic.MessageResponse
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d body %s", resp.StatusCode, raw)
	}
	if len(m.Content) != 2 || m.Content[0].Thinking != "think more" || m.Content[1].Text != "Answer." || *m.StopReason != "end_turn" {
		t.Errorf("message = %s", raw)
	}
	if m.Usage.InputTokens != 10 || m.Usage.OutputTokens != 53 {
		t.Errorf("usage = %+v, want input 10 (phase one's prompt), output 53", m.Usage)
	}
	svc.mu.Lock()
	jobs := svc.jobs
	svc.mu.Unlock()
	if len(jobs) != 2 {
		t.Fatalf("%d jobs, want 2", len(jobs))
	}
	if got := jobs[0].Chat.MaxNewTokens(); got != 50 {
		t.Errorf("phase one max tokens = %d, want the budget 50", got)
	}
	c2 := jobs[1].Chat
	last := c2.Messages[len(c2.Messages)-1]
	if !c2.ContinueFinalMessage || last.Role != "assistant" || last.ReasoningContent != "think more" || c2.MaxNewTokens() != 50 {
		t.Errorf("phase two = continue %v last %+v max %d", c2.ContinueFinalMessage, last, c2.MaxNewTokens())
	}
	for _, st := range svc.streams {
		closedOnce(t, st)
	}
}

func TestCountTokens(t *testing.T) {
	svc := &fakeService{events: []job.Event{{Role: "assistant", Text: "x"}, {FinishReason: "length", Usage: &openai.Usage{PromptTokens: 42, CompletionTokens: 1, TotalTokens: 43}}}}
	_, hs := newTestServer(t, svc, nil)
	resp := postMessages(t, hs.URL+"/v1/messages/count_tokens", `{"model":"qwen3-8b","system":"s","messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"}}`, nil)
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || strings.TrimSpace(string(raw)) != `{"input_tokens":42}` {
		t.Errorf("status %d body %s", resp.StatusCode, raw)
	}
	chat := svc.lastJob(t).Chat
	if chat.MaxNewTokens() != 1 || chat.ToolChoice != nil || len(chat.Tools) != 1 {
		t.Errorf("count job = max %d choice %+v tools %d", chat.MaxNewTokens(), chat.ToolChoice, len(chat.Tools))
	}
}

// TestMessagesSystemMessages: the system prompt and system messages before
// the first turn become one system message; a later one stays in place as
// a marked user turn (Qwen3.5's template takes one system message, first).
func TestMessagesSystemMessages(t *testing.T) {
	svc := &fakeService{events: scriptedChat()}
	_, hs := newTestServer(t, svc, nil)
	resp := postMessages(t, hs.URL+"/v1/messages", `{"model":"m","max_tokens":5,"system":"s","messages":[
		{"role":"system","content":"early"},{"role":"user","content":"u"},{"role":"system","content":[{"type":"text","text":"late"}]}]}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var got []string
	for _, m := range svc.lastJob(t).Chat.Messages {
		got = append(got, m.Role+":"+m.Content.String())
	}
	if want := []string{"system:s\n\nearly", "user:u", "user:<system>\nlate\n</system>"}; !slices.Equal(got, want) {
		t.Errorf("messages = %q, want %q", got, want)
	}
}
