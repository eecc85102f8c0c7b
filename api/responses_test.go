package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

func responseParams() responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model:        "qwen3-8b",
		Instructions: oai.String("Be brief."),
		Input:        responses.ResponseNewParamsInputUnion{OfString: oai.String("Weather in Paris?")},
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{
			Name:       "get_weather",
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
			Strict:     oai.Bool(false),
		}}},
		MaxOutputTokens: oai.Int(200),
		Metadata:        map[string]string{"ticket": "16"},
	}
}

func TestResponsesNonStream(t *testing.T) {
	svc := &fakeService{events: scriptedChat()}
	_, hs := newTestServer(t, svc, nil)
	client := newClient(hs.URL)

	var httpResp *http.Response
	resp, err := client.Responses.New(context.Background(), responseParams(), option.WithResponseInto(&httpResp))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if got := httpResp.Header.Get(HeaderWorker); got != "mac-1" {
		t.Errorf("X-Macpool-Worker = %q, want mac-1", got)
	}
	if resp.ID != "resp_req1" || resp.Status != "completed" || resp.Model != "qwen3-8b" {
		t.Errorf("id, status, model = %q %q %q", resp.ID, resp.Status, resp.Model)
	}
	if got := resp.OutputText(); got != "Let me check <b>&</b>." {
		t.Errorf("output_text = %q", got)
	}
	var types []string
	for _, it := range resp.Output {
		types = append(types, it.Type)
	}
	if want := []string{"reasoning", "message", "function_call"}; !slices.Equal(types, want) {
		t.Fatalf("output types = %v, want %v", types, want)
	}
	if got := resp.Output[0].Content[0].Text; got != "The user wants the weather." {
		t.Errorf("reasoning text = %q", got)
	}
	fc := resp.Output[2]
	if fc.CallID != "call_1" || fc.Name != "get_weather" || fc.Arguments.OfString != `{"city":"Paris"}` {
		t.Errorf("function call = %s", fc.RawJSON())
	}
	u := resp.Usage
	if u.InputTokens != 12 || u.OutputTokens != 20 || u.TotalTokens != 32 || u.InputTokensDetails.CachedTokens != 8 || u.OutputTokensDetails.ReasoningTokens != 6 {
		t.Errorf("usage = %s", u.RawJSON())
	}
	if resp.Metadata["ticket"] != "16" || resp.Instructions.OfString != "Be brief." {
		t.Errorf("metadata, instructions = %v, %s", resp.Metadata, resp.Instructions.RawJSON())
	}

	j := svc.lastJob(t)
	chat := j.Chat
	if j.Kind != job.KindChat || chat == nil || len(chat.Messages) != 2 || chat.Messages[0].Role != "system" || chat.Messages[1].Content.String() != "Weather in Paris?" {
		t.Fatalf("job = %+v", j)
	}
	if chat.MaxNewTokens() != 200 || len(chat.Tools) != 1 || chat.Tools[0].Function.Name != "get_weather" {
		t.Errorf("chat = max %d tools %+v", chat.MaxNewTokens(), chat.Tools)
	}
	closedOnce(t, svc.lastStream(t))
}

// TestResponsesStream checks the event sequence openai-go parses and that
// its events add up to the non-streamed response.
func TestResponsesStream(t *testing.T) {
	svc := &fakeService{events: scriptedChat()}
	_, hs := newTestServer(t, svc, nil)
	client := newClient(hs.URL)

	stream := client.Responses.NewStreaming(context.Background(), responseParams())
	defer stream.Close()
	var types []string
	var text, reasoning, args strings.Builder
	var completed responses.Response
	seq := int64(0)
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq {
			t.Errorf("event %s has sequence_number %d, want %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq++
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.reasoning_text.delta":
			reasoning.WriteString(ev.Delta)
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Delta)
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	want := []string{
		"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added",
		"response.reasoning_text.delta", "response.reasoning_text.delta",
		"response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added",
		"response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done",
		"response.completed",
	}
	if !slices.Equal(types, want) {
		t.Errorf("events:\n got %v\nwant %v", types, want)
	}
	if text.String() != "Let me check <b>&</b>." || reasoning.String() != "The user wants the weather." || args.String() != `{"city":"Paris"}` {
		t.Errorf("deltas: text %q reasoning %q args %q", text.String(), reasoning.String(), args.String())
	}
	if completed.Status != "completed" || completed.OutputText() != text.String() || completed.Usage.InputTokensDetails.CachedTokens != 8 {
		t.Errorf("completed = %s", completed.RawJSON())
	}
	closedOnce(t, svc.lastStream(t))
}

// TestResponsesState chains responses with previous_response_id through two
// servers sharing one store (two coordinators of a cluster), then reads,
// lists and deletes the stored response.
func TestResponsesState(t *testing.T) {
	store := NewMemoryResponseStore(memoryResponseTTL, 100)
	svc := &fakeService{events: scriptedChat()}
	_, hs1 := newTestServer(t, svc, func(c *Config) { c.Responses = store })
	_, hs2 := newTestServer(t, svc, func(c *Config) { c.Responses = store })
	c1, c2 := newClient(hs1.URL), newClient(hs2.URL)
	ctx := context.Background()

	first, err := c1.Responses.New(ctx, responseParams())
	if err != nil {
		t.Fatalf("first: %v", err)
	}
	third, err := c2.Responses.New(ctx, responses.ResponseNewParams{
		Model:              "qwen3-8b",
		PreviousResponseID: oai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{{
			OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: oai.String("call_1"),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: oai.String(`{"temp":21}`)},
			},
		}}},
	})
	if err != nil {
		t.Fatalf("third: %v", err)
	}
	msgs := svc.lastJob(t).Chat.Messages
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	// The first turn's instructions do not carry over; its input, its
	// output (reasoning + text + call in one assistant message) and the
	// tool result do.
	if want := []string{"user", "assistant", "tool"}; !slices.Equal(roles, want) {
		t.Fatalf("roles = %v, want %v", roles, want)
	}
	a := msgs[1]
	if a.Content.String() != "Let me check <b>&</b>." || a.ReasoningContent != "The user wants the weather." || len(a.ToolCalls) != 1 || a.ToolCalls[0].ID != "call_1" {
		t.Errorf("assistant = %+v", a)
	}
	if msgs[2].ToolCallID != "call_1" || msgs[2].Content.String() != `{"temp":21}` {
		t.Errorf("tool = %+v", msgs[2])
	}

	got, err := c1.Responses.Get(ctx, third.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != third.ID || got.PreviousResponseID != first.ID || got.OutputText() != third.OutputText() {
		t.Fatalf("Get = %v, %v", got, err)
	}
	page, err := c1.Responses.InputItems.List(ctx, third.ID, responses.InputItemListParams{Order: responses.InputItemListParamsOrderAsc})
	if err != nil {
		t.Fatalf("input items: %v", err)
	}
	var itemTypes []string
	for _, it := range page.Data {
		itemTypes = append(itemTypes, it.Type)
	}
	if want := []string{"message", "reasoning", "message", "function_call", "function_call_output"}; !slices.Equal(itemTypes, want) {
		t.Errorf("input items = %v, want %v", itemTypes, want)
	}
	if err := c2.Responses.Delete(ctx, third.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = c1.Responses.Get(ctx, third.ID, responses.ResponseGetParams{})
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("Get after delete: %v, want a 404", err)
	}
	_, err = c1.Responses.New(ctx, responses.ResponseNewParams{Model: "qwen3-8b", PreviousResponseID: oai.String("resp_nope"),
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("hi")}})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "previous_response_not_found" {
		t.Errorf("unknown previous_response_id: %v", err)
	}
}

// TestResponsesStoreFalse keeps nothing.
func TestResponsesStoreFalse(t *testing.T) {
	svc := &fakeService{events: scriptedChat()}
	_, hs := newTestServer(t, svc, nil)
	client := newClient(hs.URL)
	p := responseParams()
	p.Store = oai.Bool(false)
	resp, err := client.Responses.New(context.Background(), p)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := client.Responses.Get(context.Background(), resp.ID, responses.ResponseGetParams{}); err == nil {
		t.Errorf("Get of a store:false response succeeded")
	}
}

// TestResponsesRequestMapping checks what reaches the chat job.
func TestResponsesRequestMapping(t *testing.T) {
	svc := &fakeService{events: scriptedChat()}
	_, hs := newTestServer(t, svc, func(c *Config) { c.ModelAliases = map[string]string{"gpt-5": "qwen3-8b"} })
	body := `{"model":"gpt-5","input":[
		{"role":"developer","content":"dev"},
		{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
		{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"hmm"}]},
		{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"x\":1}"},
		{"type":"function_call_output","call_id":"c1","output":"ok"}],
		"tools":[{"type":"function","name":"f","parameters":{"type":"object"}},
		         {"type":"namespace","name":"ns","tools":[{"type":"function","name":"g"}]}],
		"tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false,
		"text":{"format":{"type":"json_schema","name":"out","schema":{"type":"object"}}},
		"reasoning":{"effort":"minimal"},"temperature":0.5,"top_p":0.9,"seed":7,"truncation":"auto",
		"include":["reasoning.encrypted_content"],"prompt_cache_key":"k","store":false}`
	resp, err := http.Post(hs.URL+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var r openai.Response
	json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	if resp.StatusCode != 200 || r.Model != "gpt-5" || r.Truncation != "auto" || r.ParallelToolCalls {
		t.Fatalf("status %d, response %+v", resp.StatusCode, r)
	}
	chat := svc.lastJob(t).Chat
	if chat.Model != "qwen3-8b" || chat.Truncation != "auto" {
		t.Errorf("model %q truncation %q, want the alias target qwen3-8b and auto", chat.Model, chat.Truncation)
	}
	var roles []string
	for _, m := range chat.Messages {
		roles = append(roles, m.Role)
	}
	if want := []string{"system", "user", "assistant", "tool"}; !slices.Equal(roles, want) {
		t.Errorf("roles = %v, want %v", roles, want)
	}
	if m := chat.Messages[2]; m.ReasoningContent != "hmm" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Arguments != `{"x":1}` {
		t.Errorf("assistant = %+v", m)
	}
	if chat.Messages[1].Content.String() != "ab" {
		t.Errorf("user content = %q", chat.Messages[1].Content.String())
	}
	if len(chat.Tools) != 2 || chat.Tools[1].Function.Name != "g" || chat.ToolChoice.Function != "f" || *chat.ParallelToolCalls {
		t.Errorf("tools %+v choice %+v", chat.Tools, chat.ToolChoice)
	}
	if chat.ResponseFormat == nil || chat.ResponseFormat.JSONSchema.Name != "out" || string(chat.ChatTemplateKwargs["enable_thinking"]) != "false" {
		t.Errorf("format %+v kwargs %v", chat.ResponseFormat, chat.ChatTemplateKwargs)
	}
	if *chat.Temperature != 0.5 || *chat.TopP != 0.9 || *chat.Seed != 7 {
		t.Errorf("sampling = %v %v %v", *chat.Temperature, *chat.TopP, *chat.Seed)
	}
}

func TestResponsesErrors(t *testing.T) {
	svc := &fakeService{events: scriptedChat(), models: []openai.Model{{ID: "qwen3-8b"}}}
	_, hs := newTestServer(t, svc, nil)
	cases := []struct {
		name, body string
		status     int
		param, msg string
	}{
		{"empty", ``, 400, "", "request body is empty"},
		{"not json", `{`, 400, "", "not valid JSON"},
		{"no model", `{"input":"hi"}`, 400, "model", "model is required"},
		{"no input", `{"model":"m"}`, 400, "input", "input is required"},
		{"input type", `{"model":"m","input":5}`, 400, "input", "string or an array"},
		{"hosted tool", `{"model":"m","input":"hi","tools":[{"type":"web_search"}]}`, 400, "tools[0].type", `web_search = "disabled"`},
		{"image", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, 400, "input[0].content[0].type", "text-only"},
		{"item type", `{"model":"m","input":[{"type":"computer_call"}]}`, 400, "input[0].type", "not supported"},
		{"background", `{"model":"m","input":"hi","background":true}`, 400, "background", "not supported"},
		{"effort", `{"model":"m","input":"hi","reasoning":{"effort":"max"}}`, 400, "reasoning.effort", "must be one of"},
		{"format", `{"model":"m","input":"hi","text":{"format":{"type":"yaml"}}}`, 400, "text.format.type", "must be"},
		{"tool choice", `{"model":"m","input":"hi","tool_choice":{"type":"file_search"}}`, 400, "tool_choice.type", "not supported"},
		{"max tokens", `{"model":"m","input":"hi","max_output_tokens":0}`, 400, "max_output_tokens", "at least 1"},
		{"unknown model", `{"model":"missing","input":"hi"}`, 404, "model", "available models: qwen3-8b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(hs.URL+"/v1/responses", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body openai.ErrorResponse
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error == nil {
				t.Fatalf("body: %v", err)
			}
			if resp.StatusCode != tc.status || body.Error.Param != tc.param || !strings.Contains(body.Error.Message, tc.msg) {
				t.Errorf("got %d param %q %q, want %d param %q containing %q", resp.StatusCode, body.Error.Param, body.Error.Message, tc.status, tc.param, tc.msg)
			}
		})
	}
}

// TestResponsesStreamFailure: an error after the stream started ends it
// with response.failed carrying the error.
func TestResponsesStreamFailure(t *testing.T) {
	svc := &fakeService{events: []job.Event{
		{Worker: "mac-1", Role: "assistant", Text: "Hel"},
		{Worker: "mac-1", Err: openai.Unavailable("worker mac-1 went away")},
	}}
	_, hs := newTestServer(t, svc, nil)
	resp, err := http.Post(hs.URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","input":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	var last openai.ResponseEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, name)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			last = openai.ResponseEvent{}
			if err := json.Unmarshal([]byte(data), &last); err != nil {
				t.Fatalf("data %s: %v", data, err)
			}
		}
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.failed"}
	if !slices.Equal(events, want) {
		t.Errorf("events:\n got %v\nwant %v", events, want)
	}
	if last.Response == nil || last.Response.Status != "failed" || last.Response.Error == nil || !strings.Contains(last.Response.Error.Message, "went away") {
		t.Errorf("last event = %+v", last)
	}
}

// TestResponsesSystemMessages: instructions and leading system/developer
// messages become one system message (Qwen3.5's template takes one and no
// developer role); a later one stays in place as a marked user turn.
func TestResponsesSystemMessages(t *testing.T) {
	svc := &fakeService{events: scriptedChat()}
	_, hs := newTestServer(t, svc, nil)
	body := `{"model":"m","instructions":"i","input":[{"role":"developer","content":"d1"},{"role":"system","content":"d2"},
		{"role":"user","content":"u"},{"role":"developer","content":"late"}]}`
	resp, err := http.Post(hs.URL+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var got []string
	for _, m := range svc.lastJob(t).Chat.Messages {
		got = append(got, m.Role+":"+m.Content.String())
	}
	if want := []string{"system:i\n\nd1\n\nd2", "user:u", "user:<system>\nlate\n</system>"}; !slices.Equal(got, want) {
		t.Errorf("messages = %q, want %q", got, want)
	}
}

// TestResponsesEncryptedReasoning: with include reasoning.encrypted_content
// the reasoning comes back sealed, and a stateless next request that sends
// only the sealed form (as Codex does) gives the model its thinking again.
func TestResponsesEncryptedReasoning(t *testing.T) {
	svc := &fakeService{events: scriptedChat()}
	_, hs := newTestServer(t, svc, nil)
	resp, err := http.Post(hs.URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","input":"hi","store":false,"include":["reasoning.encrypted_content"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var r openai.Response
	json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	rs := r.Output[0]
	if rs.Type != "reasoning" || rs.EncryptedContent == nil {
		t.Fatalf("reasoning item = %+v", rs)
	}
	next := fmt.Sprintf(`{"model":"m","store":false,"input":[{"role":"user","content":"hi"},
		{"type":"reasoning","id":%q,"summary":[],"encrypted_content":%q},
		{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{}"},
		{"type":"function_call_output","call_id":"call_1","output":"sunny"}]}`, rs.ID, *rs.EncryptedContent)
	resp, err = http.Post(hs.URL+"/v1/responses", "application/json", strings.NewReader(next))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if m := svc.lastJob(t).Chat.Messages[1]; m.Role != "assistant" || m.ReasoningContent != "The user wants the weather." {
		t.Errorf("assistant = %+v, want the unsealed thinking", m)
	}
}
