package api

import (
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

func (s *Server) chatCompletions(c *gin.Context) {
	body, e := s.readBody(c)
	if e != nil {
		writeError(c, e)
		return
	}
	req, e := openai.ParseChatCompletionRequest(body)
	if e != nil {
		writeError(c, e)
		return
	}
	id, created, e := s.streamStart(c, req.Stream) // resume.go
	if e != nil {
		writeError(c, e)
		return
	}
	j := &job.Job{ID: id, Kind: job.KindChat, Model: req.Model, APIKey: keyID(c), Chat: req, Stream: streamInfo(req.Stream, created)}
	g := newChatGen("chatcmpl-"+id, req.Model, created, req.Choices())
	g.usageNull = req.Stream && req.IncludeUsage()
	s.serve(c, j, req.Stream, req.IncludeUsage(), g)
}

// chatGen turns events into chat chunks or one chat response.
type chatGen struct {
	id        string
	model     string
	created   int64
	usageNull bool // include_usage: every chunk but the last has "usage":null, as OpenAI sends it
	choices   []chatChoice
}

// chatChunkNullUsage writes "usage":null; its Usage shadows the embedded one.
type chatChunkNullUsage struct {
	openai.ChatCompletionChunk
	Usage *openai.Usage `json:"usage"`
}

type chatChoice struct {
	started   bool // the role delta went out
	content   strings.Builder
	reasoning strings.Builder
	toolCalls []openai.ToolCall
	logprobs  *openai.ChoiceLogprobs
	finish    string
}

func newChatGen(id, model string, created time.Time, n int) *chatGen {
	return &chatGen{id: id, model: model, created: created.Unix(), choices: make([]chatChoice, n)}
}

func (g *chatGen) choice(i int) (*chatChoice, *openai.Error) {
	if i < 0 || i >= len(g.choices) {
		return nil, openai.ServerError("event for choice %d of a request with n=%d", i, len(g.choices))
	}
	return &g.choices[i], nil
}

func (g *chatGen) chunk(w *sseWriter, ev *job.Event, worker string) *openai.Error {
	if ev.Text == "" && ev.Reasoning == "" && len(ev.ToolCalls) == 0 && ev.Logprobs == nil && ev.FinishReason == "" && ev.Role == "" {
		return nil // usage-only or empty event
	}
	ch, e := g.choice(ev.Choice)
	if e != nil {
		return e
	}
	cc := openai.ChatChunkChoice{Index: ev.Choice, Logprobs: ev.Logprobs}
	d := &cc.Delta
	if !ch.started {
		ch.started = true
		d.Role = openai.RoleAssistant
		if len(ev.ToolCalls) == 0 {
			d.Content = &ev.Text // "" on a bare role delta, as OpenAI sends it
		}
	}
	if ev.Text != "" {
		d.Content = &ev.Text
	}
	d.ReasoningContent = ev.Reasoning
	d.ToolCalls = ev.ToolCalls
	var out chatChunkNullUsage // one allocation for either form
	chunk := &out.ChatCompletionChunk
	*chunk = openai.ChatCompletionChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.model}
	if ev.FinishReason != "" {
		cc.FinishReason = &ev.FinishReason
		chunk.MacpoolWorker = worker
	}
	chunk.Choices = []openai.ChatChunkChoice{cc}
	if g.usageNull {
		w.add(&out)
	} else {
		w.add(chunk)
	}
	return nil
}

func (g *chatGen) usageChunk(w *sseWriter, u *openai.Usage, worker string) {
	w.add(&openai.ChatCompletionChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.model,
		Choices: []openai.ChatChunkChoice{}, Usage: u, MacpoolWorker: worker})
}

func (g *chatGen) add(ev *job.Event) *openai.Error {
	if ev.Text == "" && ev.Reasoning == "" && len(ev.ToolCalls) == 0 && ev.Logprobs == nil && ev.FinishReason == "" {
		return nil
	}
	ch, e := g.choice(ev.Choice)
	if e != nil {
		return e
	}
	ch.content.WriteString(ev.Text)
	ch.reasoning.WriteString(ev.Reasoning)
	for _, d := range ev.ToolCalls {
		if d.Index < 0 || d.Index > len(ch.toolCalls) {
			return openai.ServerError("tool call delta index %d out of order (have %d calls)", d.Index, len(ch.toolCalls))
		}
		if d.Index == len(ch.toolCalls) {
			ch.toolCalls = append(ch.toolCalls, openai.ToolCall{Type: "function"})
		}
		tc := &ch.toolCalls[d.Index]
		if d.ID != "" {
			tc.ID = d.ID
		}
		if d.Type != "" {
			tc.Type = d.Type
		}
		if d.Function != nil {
			if d.Function.Name != "" {
				tc.Function.Name = d.Function.Name
			}
			tc.Function.Arguments += d.Function.Arguments
		}
	}
	if ev.Logprobs != nil {
		if ch.logprobs == nil {
			ch.logprobs = &openai.ChoiceLogprobs{Content: []openai.TokenLogprob{}}
		}
		ch.logprobs.Content = append(ch.logprobs.Content, ev.Logprobs.Content...)
	}
	if ev.FinishReason != "" {
		ch.finish = ev.FinishReason
	}
	return nil
}

func (g *chatGen) response(u *openai.Usage, worker string) any {
	resp := &openai.ChatCompletionResponse{ID: g.id, Object: "chat.completion", Created: g.created, Model: g.model,
		Usage: u, MacpoolWorker: worker, Choices: make([]openai.ChatChoice, len(g.choices))}
	for i := range g.choices {
		ch := &g.choices[i]
		msg := openai.ResponseMessage{Role: openai.RoleAssistant, ReasoningContent: ch.reasoning.String(), ToolCalls: ch.toolCalls}
		if content := ch.content.String(); content != "" || len(ch.toolCalls) == 0 {
			msg.Content = &content
		}
		finish := ch.finish
		if finish == "" {
			finish = "stop"
		}
		resp.Choices[i] = openai.ChatChoice{Index: i, Message: msg, Logprobs: ch.logprobs, FinishReason: finish}
	}
	return resp
}
