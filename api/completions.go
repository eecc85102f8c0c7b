package api

import (
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

func (s *Server) completions(c *gin.Context) {
	body, e := s.readBody(c)
	if e != nil {
		writeError(c, e)
		return
	}
	req, e := openai.ParseCompletionRequest(body)
	if e != nil {
		writeError(c, e)
		return
	}
	id, created, e := s.streamStart(c, req.Stream) // resume.go
	if e != nil {
		writeError(c, e)
		return
	}
	j := &job.Job{ID: id, Kind: job.KindCompletion, Model: req.Model, APIKey: keyID(c), Completion: req, Stream: streamInfo(req.Stream, created)}
	g := &completionGen{id: "cmpl-" + id, model: req.Model, created: created.Unix(), choices: make([]completionChoice, req.Prompt.Len()*req.Choices()),
		usageNull: req.Stream && req.IncludeUsage()}
	s.serve(c, j, req.Stream, req.IncludeUsage(), g)
}

// completionGen turns events into text_completion chunks or one response.
// Reasoning and tool calls do not exist for raw completions and are dropped.
type completionGen struct {
	id        string
	model     string
	created   int64
	usageNull bool // include_usage: "usage":null on every chunk but the last
	choices   []completionChoice
}

// completionChunkNullUsage writes "usage":null; its Usage shadows the embedded one.
type completionChunkNullUsage struct {
	openai.CompletionResponse
	Usage *openai.Usage `json:"usage"`
}

type completionChoice struct {
	text     strings.Builder
	offset   int // characters of text so far, for logprobs.text_offset
	logprobs *openai.CompletionLogprobs
	finish   string
}

func (g *completionGen) choice(i int) (*completionChoice, *openai.Error) {
	if i < 0 || i >= len(g.choices) {
		return nil, openai.ServerError("event for choice %d of a request with n=%d", i, len(g.choices))
	}
	return &g.choices[i], nil
}

// legacyLogprobs converts chat-style logprobs to the completions form;
// offset is the text length (in characters) before this delta.
func legacyLogprobs(lp *openai.ChoiceLogprobs, offset int) *openai.CompletionLogprobs {
	out := &openai.CompletionLogprobs{
		Tokens:        make([]string, 0, len(lp.Content)),
		TokenLogprobs: make([]float64, 0, len(lp.Content)),
		TopLogprobs:   make([]map[string]float64, 0, len(lp.Content)),
		TextOffset:    make([]int, 0, len(lp.Content)),
	}
	for _, t := range lp.Content {
		out.Tokens = append(out.Tokens, t.Token)
		out.TokenLogprobs = append(out.TokenLogprobs, t.Logprob)
		var top map[string]float64
		if len(t.TopLogprobs) > 0 {
			top = make(map[string]float64, len(t.TopLogprobs))
			for _, a := range t.TopLogprobs {
				top[a.Token] = a.Logprob
			}
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
		out.TextOffset = append(out.TextOffset, offset)
		offset += utf8.RuneCountInString(t.Token)
	}
	return out
}

func (g *completionGen) chunk(w *sseWriter, ev *job.Event, worker string) *openai.Error {
	if ev.Text == "" && ev.Logprobs == nil && ev.FinishReason == "" {
		return nil
	}
	ch, e := g.choice(ev.Choice)
	if e != nil {
		return e
	}
	cc := openai.CompletionChoice{Index: ev.Choice, Text: ev.Text}
	if ev.Logprobs != nil {
		cc.Logprobs = legacyLogprobs(ev.Logprobs, ch.offset)
	}
	ch.offset += utf8.RuneCountInString(ev.Text)
	var out completionChunkNullUsage // one allocation for either form
	resp := &out.CompletionResponse
	*resp = openai.CompletionResponse{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model}
	if ev.FinishReason != "" {
		cc.FinishReason = &ev.FinishReason
		resp.MacpoolWorker = worker
	}
	resp.Choices = []openai.CompletionChoice{cc}
	if g.usageNull {
		w.add(&out)
	} else {
		w.add(resp)
	}
	return nil
}

func (g *completionGen) usageChunk(w *sseWriter, u *openai.Usage, worker string) {
	w.add(&openai.CompletionResponse{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model,
		Choices: []openai.CompletionChoice{}, Usage: u, MacpoolWorker: worker})
}

func (g *completionGen) add(ev *job.Event) *openai.Error {
	if ev.Text == "" && ev.Logprobs == nil && ev.FinishReason == "" {
		return nil
	}
	ch, e := g.choice(ev.Choice)
	if e != nil {
		return e
	}
	if ev.Logprobs != nil {
		lp := legacyLogprobs(ev.Logprobs, ch.offset)
		if ch.logprobs == nil {
			ch.logprobs = lp
		} else {
			ch.logprobs.Tokens = append(ch.logprobs.Tokens, lp.Tokens...)
			ch.logprobs.TokenLogprobs = append(ch.logprobs.TokenLogprobs, lp.TokenLogprobs...)
			ch.logprobs.TopLogprobs = append(ch.logprobs.TopLogprobs, lp.TopLogprobs...)
			ch.logprobs.TextOffset = append(ch.logprobs.TextOffset, lp.TextOffset...)
		}
	}
	ch.text.WriteString(ev.Text)
	ch.offset += utf8.RuneCountInString(ev.Text)
	if ev.FinishReason != "" {
		ch.finish = ev.FinishReason
	}
	return nil
}

func (g *completionGen) response(u *openai.Usage, worker string) any {
	resp := &openai.CompletionResponse{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model,
		Usage: u, MacpoolWorker: worker, Choices: make([]openai.CompletionChoice, len(g.choices))}
	for i := range g.choices {
		ch := &g.choices[i]
		finish := ch.finish
		if finish == "" {
			finish = "stop"
		}
		resp.Choices[i] = openai.CompletionChoice{Index: i, Text: ch.text.String(), Logprobs: ch.logprobs, FinishReason: &finish}
	}
	return resp
}
