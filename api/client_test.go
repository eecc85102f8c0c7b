package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

func newClient(url string, opts ...option.RequestOption) oai.Client {
	base := []option.RequestOption{option.WithBaseURL(url + "/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0)}
	return oai.NewClient(append(base, opts...)...)
}

func chatParams() oai.ChatCompletionNewParams {
	return oai.ChatCompletionNewParams{
		Model:    "qwen3-8b",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Weather in Paris?")},
		Tools: []oai.ChatCompletionToolUnionParam{oai.ChatCompletionFunctionTool(oai.FunctionDefinitionParam{
			Name:       "get_weather",
			Parameters: oai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		})},
		Logprobs:    oai.Bool(true),
		TopLogprobs: oai.Int(1),
	}
}

func TestChatNonStream(t *testing.T) {
	svc := &fakeService{events: scriptedChat()}
	_, hs := newTestServer(t, svc, nil)
	client := newClient(hs.URL)

	var httpResp *http.Response
	resp, err := client.Chat.Completions.New(context.Background(), chatParams(), option.WithResponseInto(&httpResp))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if got := httpResp.Header.Get(HeaderWorker); got != "mac-1" {
		t.Errorf("X-Macpool-Worker = %q, want mac-1", got)
	}
	rid := httpResp.Header.Get(HeaderRequestID)
	if rid == "" || resp.ID != "chatcmpl-"+rid {
		t.Errorf("id = %q, X-Request-Id = %q, want chatcmpl-<request id>", resp.ID, rid)
	}
	if len(resp.Choices) != 1 {
		t.Fatalf("got %d choices, want 1", len(resp.Choices))
	}
	ch := resp.Choices[0]
	if ch.Message.Content != "Let me check <b>&</b>." {
		t.Errorf("content = %q", ch.Message.Content)
	}
	if got := ch.Message.JSON.ExtraFields["reasoning_content"].Raw(); got != `"The user wants the weather."` {
		t.Errorf("reasoning_content raw = %s", got)
	}
	if ch.FinishReason != "tool_calls" {
		t.Errorf("finish_reason = %q, want tool_calls", ch.FinishReason)
	}
	if len(ch.Message.ToolCalls) != 1 {
		t.Fatalf("got %d tool calls, want 1", len(ch.Message.ToolCalls))
	}
	tc := ch.Message.ToolCalls[0]
	if tc.ID != "call_1" || tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city":"Paris"}` {
		t.Errorf("tool call = %+v", tc)
	}
	if n := len(ch.Logprobs.Content); n != 2 || ch.Logprobs.Content[1].Token != " <" || ch.Logprobs.Content[1].Logprob != -1.5 {
		t.Errorf("logprobs = %+v", ch.Logprobs.Content)
	}
	u := resp.Usage
	if u.PromptTokens != 12 || u.CompletionTokens != 20 || u.TotalTokens != 32 || u.PromptTokensDetails.CachedTokens != 8 || u.CompletionTokensDetails.ReasoningTokens != 6 {
		t.Errorf("usage = %+v", u)
	}
	if got := resp.JSON.ExtraFields["macpool_worker"].Raw(); got != `"mac-1"` {
		t.Errorf("macpool_worker = %s", got)
	}

	j := svc.lastJob(t)
	if j.Kind != job.KindChat || j.Model != "qwen3-8b" || j.ID != rid || j.Chat == nil || len(j.Chat.Tools) != 1 || !j.Chat.Logprobs {
		t.Errorf("job = %+v", j)
	}
	closedOnce(t, svc.lastStream(t))
}

func TestChatStream(t *testing.T) {
	svc := &fakeService{events: scriptedChat()}
	_, hs := newTestServer(t, svc, nil)
	client := newClient(hs.URL)

	params := chatParams()
	params.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
	var httpResp *http.Response
	stream := client.Chat.Completions.NewStreaming(context.Background(), params, option.WithResponseInto(&httpResp))
	defer stream.Close()

	var acc oai.ChatCompletionAccumulator
	var reasoning strings.Builder
	var chunks int
	var lastWorker string
	for stream.Next() {
		chunk := stream.Current()
		chunks++
		if !acc.AddChunk(chunk) {
			t.Fatalf("accumulator rejected chunk %d: %s", chunks, chunk.RawJSON())
		}
		if chunk.Object != "chat.completion.chunk" {
			t.Errorf("object = %q", chunk.Object)
		}
		for _, c := range chunk.Choices {
			if f, ok := c.Delta.JSON.ExtraFields["reasoning_content"]; ok {
				var s string
				if err := unmarshalString(f.Raw(), &s); err != nil {
					t.Fatalf("reasoning_content %s: %v", f.Raw(), err)
				}
				reasoning.WriteString(s)
			}
		}
		if f, ok := chunk.JSON.ExtraFields["macpool_worker"]; ok {
			lastWorker = f.Raw()
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if got := httpResp.Header.Get(HeaderWorker); got != "mac-1" {
		t.Errorf("X-Macpool-Worker = %q, want mac-1", got)
	}
	if got := httpResp.Header.Get("Content-Type"); !strings.HasPrefix(got, "text/event-stream") {
		t.Errorf("Content-Type = %q", got)
	}
	if lastWorker != `"mac-1"` {
		t.Errorf("macpool_worker in final chunk = %s", lastWorker)
	}
	if reasoning.String() != "The user wants the weather." {
		t.Errorf("reasoning = %q", reasoning.String())
	}
	got := acc.ChatCompletion
	if len(got.Choices) != 1 {
		t.Fatalf("accumulated %d choices", len(got.Choices))
	}
	msg := got.Choices[0].Message
	if msg.Content != "Let me check <b>&</b>." {
		t.Errorf("content = %q", msg.Content)
	}
	if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].ID != "call_1" || msg.ToolCalls[0].Function.Name != "get_weather" || msg.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` {
		t.Errorf("tool calls = %+v", msg.ToolCalls)
	}
	if got.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("finish_reason = %q", got.Choices[0].FinishReason)
	}
	if got.Usage.TotalTokens != 32 || got.Usage.PromptTokensDetails.CachedTokens != 8 || got.Usage.CompletionTokensDetails.ReasoningTokens != 6 {
		t.Errorf("usage = %+v", got.Usage)
	}
	closedOnce(t, svc.lastStream(t))
}

func TestCompletions(t *testing.T) {
	events := []job.Event{
		{Worker: "mac-2", Text: "Once", Logprobs: &openai.ChoiceLogprobs{Content: []openai.TokenLogprob{{Token: "Once", Logprob: -0.5, TopLogprobs: []openai.TopLogprob{{Token: "Once", Logprob: -0.5}}}}}},
		{Worker: "mac-2", Text: " upon", Logprobs: &openai.ChoiceLogprobs{Content: []openai.TokenLogprob{{Token: " upon", Logprob: -0.1, TopLogprobs: []openai.TopLogprob{{Token: " upon", Logprob: -0.1}}}}}},
		{Worker: "mac-2", FinishReason: "length", Usage: &openai.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}},
	}
	svc := &fakeService{events: events}
	_, hs := newTestServer(t, svc, nil)
	client := newClient(hs.URL)
	params := oai.CompletionNewParams{
		Model:     "qwen3-8b",
		Prompt:    oai.CompletionNewParamsPromptUnion{OfString: oai.String("Tell a story")},
		MaxTokens: oai.Int(2),
		Logprobs:  oai.Int(1),
	}

	t.Run("non-stream", func(t *testing.T) {
		var httpResp *http.Response
		resp, err := client.Completions.New(context.Background(), params, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if resp.Object != "text_completion" || len(resp.Choices) != 1 {
			t.Fatalf("resp = %s", resp.RawJSON())
		}
		c := resp.Choices[0]
		if c.Text != "Once upon" || c.FinishReason != "length" {
			t.Errorf("choice = %q / %q", c.Text, c.FinishReason)
		}
		if len(c.Logprobs.Tokens) != 2 || c.Logprobs.TextOffset[1] != 4 || c.Logprobs.TokenLogprobs[1] != -0.1 {
			t.Errorf("logprobs = %s", c.Logprobs.RawJSON())
		}
		if resp.Usage.TotalTokens != 5 || httpResp.Header.Get(HeaderWorker) != "mac-2" {
			t.Errorf("usage %+v, worker %q", resp.Usage, httpResp.Header.Get(HeaderWorker))
		}
		j := svc.lastJob(t)
		if j.Kind != job.KindCompletion || j.Completion == nil || j.Completion.Prompt.Texts[0] != "Tell a story" {
			t.Errorf("job = %+v", j)
		}
	})

	t.Run("stream", func(t *testing.T) {
		p := params
		p.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
		stream := client.Completions.NewStreaming(context.Background(), p)
		defer stream.Close()
		var text strings.Builder
		var usage oai.CompletionUsage
		finish := ""
		for stream.Next() {
			c := stream.Current()
			for _, ch := range c.Choices {
				text.WriteString(ch.Text)
				if ch.FinishReason != "" {
					finish = string(ch.FinishReason)
				}
			}
			if c.Usage.TotalTokens != 0 {
				usage = c.Usage
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if text.String() != "Once upon" || finish != "length" || usage.TotalTokens != 5 {
			t.Errorf("text %q finish %q usage %+v", text.String(), finish, usage)
		}
	})
}

func TestModels(t *testing.T) {
	svc := &fakeService{models: []openai.Model{{ID: "qwen3-8b", Created: 1, MaxModelLen: 32768}, {ID: "Qwen/Qwen3-30B-A3B", OwnedBy: "office"}}}
	_, hs := newTestServer(t, svc, nil)
	client := newClient(hs.URL)
	page, err := client.Models.List(context.Background())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(page.Data) != 2 || page.Data[0].ID != "qwen3-8b" || page.Data[0].OwnedBy != "macpool" || page.Data[0].Object != "model" || page.Data[1].OwnedBy != "office" {
		t.Errorf("models = %s", page.RawJSON())
	}
	m, err := client.Models.Get(context.Background(), "Qwen/Qwen3-30B-A3B")
	if err != nil || m.ID != "Qwen/Qwen3-30B-A3B" {
		t.Errorf("Get: %v, %+v", err, m)
	}
	_, err = client.Models.Get(context.Background(), "nope")
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
		t.Errorf("Get unknown: %v", err)
	}
}

func TestSubmitErrors(t *testing.T) {
	cases := []struct {
		name       string
		err        error
		status     int
		retryAfter string
		typ        string
	}{
		{"queue full", openai.RateLimited(2500*1e6, "queue is full"), 429, "3", openai.TypeRateLimit},
		{"unknown model", openai.ModelNotFound("qwen3-8b"), 404, "", openai.TypeInvalidRequest},
		{"no workers", openai.Unavailable("no workers serve qwen3-8b"), 503, "", openai.TypeUnavailable},
		{"plain error", errors.New("nats: timeout"), 500, "", openai.TypeServer},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := &fakeService{submitErr: tc.err}
			_, hs := newTestServer(t, svc, nil)
			client := newClient(hs.URL)
			_, err := client.Chat.Completions.New(context.Background(), chatParams())
			var apiErr *oai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want *openai.Error", err)
			}
			if apiErr.StatusCode != tc.status || apiErr.Type != tc.typ {
				t.Errorf("status %d type %q, want %d %q", apiErr.StatusCode, apiErr.Type, tc.status, tc.typ)
			}
			if got := apiErr.Response.Header.Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tc.retryAfter)
			}
		})
	}
}

func TestAuth(t *testing.T) {
	svc := &fakeService{events: []job.Event{{Worker: "w", Text: "hi", FinishReason: "stop"}}}
	_, hs := newTestServer(t, svc, func(c *Config) { c.Auth = NewStaticKeys(map[string]string{"sk-good": "alice"}) })

	for _, tc := range []struct {
		name string
		opts []option.RequestOption
	}{
		{"wrong key", []option.RequestOption{option.WithAPIKey("sk-bad")}},
		{"no key", []option.RequestOption{option.WithHeaderDel("Authorization")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := newClient(hs.URL, tc.opts...)
			_, err := client.Chat.Completions.New(context.Background(), chatParams())
			var apiErr *oai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" {
				t.Fatalf("err = %v, want 401 invalid_api_key", err)
			}
		})
	}
	t.Run("good key", func(t *testing.T) {
		client := newClient(hs.URL, option.WithAPIKey("sk-good"))
		resp, err := client.Chat.Completions.New(context.Background(), chatParams())
		if err != nil || resp.Choices[0].Message.Content != "hi" {
			t.Fatalf("New: %v", err)
		}
		if got := svc.lastJob(t).APIKey; got != "alice" {
			t.Errorf("job APIKey = %q, want key id alice", got)
		}
	})
	t.Run("anonymous allowed by checker", func(t *testing.T) {
		_, hs := newTestServer(t, svc, func(c *Config) { c.Auth = anonymousOK{} })
		client := newClient(hs.URL, option.WithHeaderDel("Authorization"))
		if _, err := client.Chat.Completions.New(context.Background(), chatParams()); err != nil {
			t.Fatalf("anonymous request: %v", err)
		}
		if got := svc.lastJob(t).APIKey; got != "" {
			t.Errorf("job APIKey = %q, want anonymous", got)
		}
	})
	t.Run("probes need no key", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz"} {
			resp, err := http.Get(hs.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("%s: status %d", path, resp.StatusCode)
			}
		}
	})
}

func TestStreamErrorMidway(t *testing.T) {
	svc := &fakeService{events: []job.Event{
		{Worker: "mac-3", Role: "assistant", Text: "Hel"},
		{Worker: "mac-3", Err: openai.ServerError("worker mac-3 left the cluster")},
	}}
	_, hs := newTestServer(t, svc, nil)
	client := newClient(hs.URL)
	stream := client.Chat.Completions.NewStreaming(context.Background(), chatParams())
	defer stream.Close()
	var text strings.Builder
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	err := stream.Err()
	if err == nil || !strings.Contains(err.Error(), "worker mac-3 left the cluster") {
		t.Fatalf("stream.Err() = %v, want the worker error", err)
	}
	if text.String() != "Hel" {
		t.Errorf("text before the error = %q", text.String())
	}
}

func TestErrorBeforeFirstChunk(t *testing.T) {
	svc := &fakeService{events: []job.Event{{Worker: "mac-4", Err: &openai.Error{Status: 400, Type: openai.TypeInvalidRequest, Param: "messages", Message: "prompt is 40000 tokens, the model's context is 32768"}}}}
	_, hs := newTestServer(t, svc, nil)
	client := newClient(hs.URL)
	stream := client.Chat.Completions.NewStreaming(context.Background(), chatParams())
	defer stream.Close()
	for stream.Next() {
		t.Errorf("unexpected chunk %s", stream.Current().RawJSON())
	}
	var apiErr *oai.Error
	if err := stream.Err(); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "messages" {
		t.Fatalf("err = %v, want 400 naming messages", err)
	}
	if got := apiErr.Response.Header.Get(HeaderWorker); got != "mac-4" {
		t.Errorf("X-Macpool-Worker = %q", got)
	}
}

func TestDisconnectClosesStream(t *testing.T) {
	svc := &fakeService{events: []job.Event{{Worker: "mac-5", Role: "assistant", Text: "thinking forever"}}, hold: true}
	_, hs := newTestServer(t, svc, nil)
	client := newClient(hs.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := client.Chat.Completions.NewStreaming(ctx, chatParams())
	defer stream.Close()
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	st := svc.lastStream(t)
	if st.closes.Load() != 0 {
		t.Fatal("stream closed while the client is still reading")
	}
	cancel()
	eventually(t, "Stream.Close after client disconnect", func() bool { return st.closes.Load() == 1 })
}

func TestDisconnectClosesNonStream(t *testing.T) {
	svc := &fakeService{events: []job.Event{{Worker: "mac-5", Role: "assistant", Text: "thinking forever"}}, hold: true}
	_, hs := newTestServer(t, svc, nil)
	client := newClient(hs.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := client.Chat.Completions.New(ctx, chatParams())
		errc <- err
	}()
	var st *fakeStream
	eventually(t, "stream opened", func() bool {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		if len(svc.streams) == 0 {
			return false
		}
		st = svc.streams[0]
		return true
	})
	<-st.delivered // the handler is now blocked in Recv
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("client err = %v, want context.Canceled", err)
	}
	eventually(t, "Stream.Close after client disconnect", func() bool { return st.closes.Load() == 1 })
}

// anonymousOK lets callers without a key in, like the coordinator with no keys.
type anonymousOK struct{}

func (anonymousOK) Check(_ context.Context, key string) (string, error) {
	if key == "" {
		return "", nil
	}
	return "", errors.New("unknown key")
}

// TestBadEvents: events that break the Stream contract become a 500 (or an
// error frame mid-stream), never a panic or a silently wrong answer.
func TestBadEvents(t *testing.T) {
	cases := []struct {
		name   string
		events []job.Event
	}{
		{"choice out of range", []job.Event{{Worker: "w", Text: "a"}, {Worker: "w", Choice: 3, Text: "b"}}},
		{"tool call index gap", []job.Event{{Worker: "w", ToolCalls: []openai.ToolCallDelta{{Index: 2, ID: "c", Function: &openai.FunctionCallDelta{Name: "f"}}}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := &fakeService{events: tc.events}
			_, hs := newTestServer(t, svc, nil)
			client := newClient(hs.URL)
			_, err := client.Chat.Completions.New(context.Background(), chatParams())
			var apiErr *oai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 {
				t.Errorf("non-stream: %v, want 500", err)
			}
		})
	}
	svc := &fakeService{events: cases[0].events}
	_, hs := newTestServer(t, svc, nil)
	client := newClient(hs.URL)
	stream := client.Chat.Completions.NewStreaming(context.Background(), chatParams())
	defer stream.Close()
	for stream.Next() {
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "choice 3") {
		t.Errorf("stream: %v, want an error frame about choice 3", err)
	}
}
