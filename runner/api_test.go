package runner

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// localService is an api.Service that runs jobs on one Engine in process
// (no coordinator, no NATS), passing the job through JSON as the cluster does.
type localService struct {
	e    *Runner
	name string
	wg   sync.WaitGroup
}

func (s *localService) Models(ctx context.Context) ([]openai.Model, error) {
	return []openai.Model{{ID: s.name, Object: "model", OwnedBy: "macpool"}}, nil
}

func (s *localService) Ready(ctx context.Context) error { return nil }

func (s *localService) Submit(ctx context.Context, jb *job.Job) (job.Stream, error) {
	if jb.Model != s.name {
		return nil, openai.ModelNotFound(jb.Model)
	}
	b, err := json.Marshal(jb)
	if err != nil {
		return nil, err
	}
	var j job.Job
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, err
	}
	gctx, cancel := context.WithCancel(context.Background())
	st := &localStream{events: make(chan *job.Event, 64), cancel: cancel}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(st.events)
		err := s.e.Generate(gctx, &j, func(ev *job.Event) error {
			ev.Worker = "local"
			select {
			case st.events <- ev:
				return nil
			case <-gctx.Done():
				return gctx.Err()
			}
		})
		if err != nil && gctx.Err() == nil {
			var oe *openai.Error
			if !errors.As(err, &oe) {
				oe = openai.ServerError("%v", err)
			}
			st.events <- &job.Event{Err: oe}
		}
	}()
	return st, nil
}

type localStream struct {
	events chan *job.Event
	cancel context.CancelFunc
}

func (s *localStream) Recv(ctx context.Context) (*job.Event, error) {
	select {
	case ev, ok := <-s.events:
		if !ok {
			return nil, io.EOF
		}
		return ev, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *localStream) Close() error {
	s.cancel()
	return nil
}

func newAPI(t *testing.T, model string) (oai.Client, *Runner) {
	t.Helper()
	e := newEngine(t, model, nil)
	svc := &localService{e: e, name: "tiny"}
	srv, err := api.New(api.DefaultConfig(), svc, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		svc.wg.Wait()
	})
	return oai.NewClient(option.WithBaseURL(hs.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0)), e
}

func TestAPIChat(t *testing.T) {
	client, _ := newAPI(t, "qwen3")
	ctx := context.Background()
	params := oai.ChatCompletionNewParams{
		Model:       "tiny",
		Messages:    []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Hello!")},
		MaxTokens:   oai.Int(12),
		Temperature: oai.Float(0),
		Logprobs:    oai.Bool(true),
		TopLogprobs: oai.Int(2),
	}
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Usage.CompletionTokens == 0 || resp.Usage.PromptTokens == 0 {
		t.Fatalf("response %+v", resp)
	}
	ch := resp.Choices[0]
	reasoning := ch.Message.JSON.ExtraFields["reasoning_content"].Raw()
	if ch.Message.Content == "" && reasoning == "" {
		t.Error("empty message")
	}
	if int64(len(ch.Logprobs.Content)) != resp.Usage.CompletionTokens {
		t.Errorf("%d logprobs for %d tokens", len(ch.Logprobs.Content), resp.Usage.CompletionTokens)
	}

	// The stream carries the same greedy text.
	params.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc oai.ChatCompletionAccumulator
	var text, reasoningText strings.Builder
	for stream.Next() {
		c := stream.Current()
		acc.AddChunk(c)
		if len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
			if r, ok := c.Choices[0].Delta.JSON.ExtraFields["reasoning_content"]; ok {
				var s string
				_ = json.Unmarshal([]byte(r.Raw()), &s)
				reasoningText.WriteString(s)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != ch.Message.Content {
		t.Errorf("streamed content %q, non-streamed %q", text.String(), ch.Message.Content)
	}
	if acc.Usage.CompletionTokens != resp.Usage.CompletionTokens {
		t.Errorf("streamed usage %+v, non-streamed %+v", acc.Usage, resp.Usage)
	}

	// Context length errors are 400s naming messages.
	_, err = client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
		Model: "tiny", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}, MaxTokens: oai.Int(100000)})
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "messages" {
		t.Errorf("got %v, want a 400 naming messages", err)
	}
}

func TestAPIToolRoundTrip(t *testing.T) {
	for _, model := range []string{"qwen3", "qwen3.5"} {
		t.Run(model, func(t *testing.T) {
			client, e := newAPI(t, model)
			ctx := context.Background()
			tools := []oai.ChatCompletionToolUnionParam{oai.ChatCompletionFunctionTool(oai.FunctionDefinitionParam{
				Name: "set_alarm",
				Parameters: oai.FunctionParameters{"type": "object", "required": []string{"loud"},
					"properties": map[string]any{"loud": map[string]any{"type": "boolean"}}},
			})}
			bias := map[string]int64{}
			for k, v := range quoteBias(e) {
				bias[k] = int64(v)
			}
			params := oai.ChatCompletionNewParams{
				Model:      "tiny",
				Messages:   []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Wake me up loudly")},
				Tools:      tools,
				ToolChoice: oai.ToolChoiceOptionFunctionToolChoice(oai.ChatCompletionNamedToolChoiceFunctionParam{Name: "set_alarm"}),
				MaxTokens:  oai.Int(120),
				Seed:       oai.Int(1),
				LogitBias:  bias,
			}
			// Streamed: id and name first, then argument deltas.
			stream := client.Chat.Completions.NewStreaming(ctx, params)
			var acc oai.ChatCompletionAccumulator
			first := true
			for stream.Next() {
				c := stream.Current()
				acc.AddChunk(c)
				if len(c.Choices) > 0 && len(c.Choices[0].Delta.ToolCalls) > 0 && first {
					first = false
					d := c.Choices[0].Delta.ToolCalls[0]
					if d.ID == "" || d.Function.Name != "set_alarm" {
						t.Errorf("first tool call delta %+v lacks id or name", d)
					}
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "tool_calls" || len(acc.Choices[0].Message.ToolCalls) != 1 {
				t.Fatalf("streamed answer %+v", acc.Choices)
			}
			// Non-streamed, then the result goes back through the template.
			resp, err := client.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			msg := resp.Choices[0].Message
			if resp.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 {
				t.Fatalf("answer %+v", resp.Choices[0])
			}
			call := msg.ToolCalls[0]
			var args struct{ Loud *bool }
			if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil || args.Loud == nil {
				t.Fatalf("arguments %q: %v", call.Function.Arguments, err)
			}
			params.Messages = append(params.Messages, msg.ToParam(), oai.ToolMessage(`{"status":"set"}`, call.ID))
			params.ToolChoice = oai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: oai.String("none")}
			params.MaxTokens = oai.Int(6)
			resp2, err := client.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			// The call and its result are in the second prompt.
			if resp2.Usage.PromptTokens < resp.Usage.PromptTokens+8 {
				t.Errorf("second turn prompt %d tokens; first turn %d", resp2.Usage.PromptTokens, resp.Usage.PromptTokens)
			}
			if len(resp2.Choices[0].Message.ToolCalls) != 0 {
				t.Errorf("tool_choice none gave tool calls")
			}
		})
	}
}
