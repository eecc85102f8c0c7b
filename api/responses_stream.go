package api

import (
	"fmt"
	"slices"
	"strings"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// responseGen renders a chat job's events as one Response: output items in
// the order they appear (reasoning, message, function_call), each opened
// when its kind of output starts and closed when another starts, with the
// event sequence the official SDKs accumulate:
//
//	response.created, response.in_progress,
//	per item: output_item.added,
//	  reasoning: content_part.added, reasoning_text.delta…, reasoning_text.done, content_part.done
//	  message:   content_part.added, output_text.delta…, output_text.done, content_part.done
//	  function_call: function_call_arguments.delta…, function_call_arguments.done
//	output_item.done,
//	response.completed (response.incomplete when max_output_tokens ran out),
//	or response.failed on an error.
type responseGen struct {
	resp       openai.Response // the snapshot; Output grows as items close
	namespaces map[string]string
	persist    func(*openai.Response) // stores the final response; nil = store false
	// sealReasoning: include has reasoning.encrypted_content.
	sealReasoning bool

	seq   int
	cur   int // index in resp.Output of the open item, -1 = none
	text  strings.Builder
	tools map[int]int // chat tool-call index → output index
	stop  string      // the job's finish reason
}

func newResponseGen(id string, r *openai.ResponseRequest, created int64, namespaces map[string]string) *responseGen {
	g := &responseGen{cur: -1, tools: map[int]int{}, namespaces: namespaces, sealReasoning: slices.Contains(r.Include, "reasoning.encrypted_content")}
	g.resp = openai.Response{
		ID: id, Object: "response", CreatedAt: created, Status: "in_progress", Model: r.Model,
		MaxOutputTokens: r.MaxOutputTokens, Output: []openai.ResponseItem{}, ParallelToolCalls: r.ParallelToolCalls == nil || *r.ParallelToolCalls,
		Store: r.Stored(), Temperature: r.Temperature, TopP: r.TopP, Truncation: r.Truncation,
		ToolChoice: openai.ResponseToolChoice{Mode: openai.ToolChoiceAuto}, Tools: r.Tools, Metadata: r.Metadata,
		Text: openai.ResponseText{Format: &openai.ResponseTextFormat{Type: "text"}},
	}
	if g.resp.Tools == nil {
		g.resp.Tools = []openai.ResponseTool{}
	}
	if g.resp.Metadata == nil {
		g.resp.Metadata = map[string]string{}
	}
	if g.resp.Truncation == "" {
		g.resp.Truncation = "disabled"
	}
	if r.Instructions != "" {
		g.resp.Instructions = &r.Instructions
	}
	if r.PreviousResponseID != "" {
		g.resp.PreviousResponseID = &r.PreviousResponseID
	}
	if r.ToolChoice != nil {
		g.resp.ToolChoice = *r.ToolChoice
	}
	if r.Text != nil && r.Text.Format != nil {
		g.resp.Text = *r.Text
	}
	if r.Reasoning != nil {
		g.resp.Reasoning = *r.Reasoning
	}
	if r.User != "" {
		g.resp.User = &r.User
	}
	return g
}

func (g *responseGen) send(w *sseWriter, ev openai.ResponseEvent) {
	ev.SequenceNumber = g.seq
	g.seq++
	w.event(ev.Type, &ev)
}

// snapshot is a copy of the response for a lifecycle event.
func (g *responseGen) snapshot() *openai.Response {
	r := g.resp
	r.Output = append([]openai.ResponseItem{}, g.resp.Output...)
	return &r
}

func ptrInt(i int) *int { return &i }

func (g *responseGen) open(w *sseWriter) {
	g.send(w, openai.ResponseEvent{Type: "response.created", Response: g.snapshot()})
	g.send(w, openai.ResponseEvent{Type: "response.in_progress", Response: g.snapshot()})
}

func (g *responseGen) kind() string {
	if g.cur < 0 {
		return ""
	}
	return g.resp.Output[g.cur].Type
}

// openItem closes the open item and adds it (with the part it streams into).
func (g *responseGen) openItem(w *sseWriter, it openai.ResponseItem) {
	g.closeItem(w)
	idx := len(g.resp.Output)
	prefix := map[string]string{"reasoning": "rs", "message": "msg", "function_call": "fc"}[it.Type]
	it.ID = fmt.Sprintf("%s_%s_%d", prefix, strings.TrimPrefix(g.resp.ID, "resp_"), idx)
	if it.Type != "reasoning" {
		it.Status = "in_progress"
	}
	g.resp.Output = append(g.resp.Output, it)
	g.cur = idx
	g.text.Reset()
	added := it
	g.send(w, openai.ResponseEvent{Type: "response.output_item.added", OutputIndex: ptrInt(idx), Item: &added})
	switch it.Type {
	case "reasoning":
		g.send(w, openai.ResponseEvent{Type: "response.content_part.added", ItemID: it.ID, OutputIndex: ptrInt(idx), ContentIndex: ptrInt(0),
			Part: &openai.ResponsePart{Type: "reasoning_text"}})
	case "message":
		g.send(w, openai.ResponseEvent{Type: "response.content_part.added", ItemID: it.ID, OutputIndex: ptrInt(idx), ContentIndex: ptrInt(0),
			Part: &openai.ResponsePart{Type: "output_text"}})
	}
}

func (g *responseGen) closeItem(w *sseWriter) {
	if g.cur < 0 {
		return
	}
	idx := g.cur
	it := &g.resp.Output[idx]
	text := g.text.String()
	empty := []any{}
	switch it.Type {
	case "reasoning":
		part := openai.ResponsePart{Type: "reasoning_text", Text: text}
		it.Content = []openai.ResponsePart{part}
		if g.sealReasoning {
			it.EncryptedContent = sealReasoning(text)
		}
		g.send(w, openai.ResponseEvent{Type: "response.reasoning_text.done", ItemID: it.ID, OutputIndex: ptrInt(idx), ContentIndex: ptrInt(0), Text: &text})
		g.send(w, openai.ResponseEvent{Type: "response.content_part.done", ItemID: it.ID, OutputIndex: ptrInt(idx), ContentIndex: ptrInt(0), Part: &part})
	case "message":
		part := openai.ResponsePart{Type: "output_text", Text: text}
		it.Content = []openai.ResponsePart{part}
		g.send(w, openai.ResponseEvent{Type: "response.output_text.done", ItemID: it.ID, OutputIndex: ptrInt(idx), ContentIndex: ptrInt(0), Text: &text, Logprobs: &empty})
		g.send(w, openai.ResponseEvent{Type: "response.content_part.done", ItemID: it.ID, OutputIndex: ptrInt(idx), ContentIndex: ptrInt(0), Part: &part})
	case "function_call":
		it.Arguments = text
		g.send(w, openai.ResponseEvent{Type: "response.function_call_arguments.done", ItemID: it.ID, OutputIndex: ptrInt(idx), Arguments: &text, Name: it.Name})
	}
	if it.Type != "reasoning" {
		it.Status = "completed"
	}
	done := *it
	g.send(w, openai.ResponseEvent{Type: "response.output_item.done", OutputIndex: ptrInt(idx), Item: &done})
	g.cur = -1
}

func (g *responseGen) event(w *sseWriter, ev *job.Event) *openai.Error {
	if ev.Choice != 0 {
		return openai.ServerError("event for choice %d of a responses request", ev.Choice)
	}
	if ev.Reasoning != "" {
		if g.kind() != "reasoning" {
			g.openItem(w, openai.ResponseItem{Type: "reasoning"})
		}
		g.text.WriteString(ev.Reasoning)
		g.send(w, openai.ResponseEvent{Type: "response.reasoning_text.delta", ItemID: g.resp.Output[g.cur].ID, OutputIndex: ptrInt(g.cur), ContentIndex: ptrInt(0), Delta: &ev.Reasoning})
	}
	if ev.Text != "" {
		if g.kind() != "message" {
			g.openItem(w, openai.ResponseItem{Type: "message", Role: openai.RoleAssistant})
		}
		g.text.WriteString(ev.Text)
		empty := []any{}
		g.send(w, openai.ResponseEvent{Type: "response.output_text.delta", ItemID: g.resp.Output[g.cur].ID, OutputIndex: ptrInt(g.cur), ContentIndex: ptrInt(0), Delta: &ev.Text, Logprobs: &empty})
	}
	for _, d := range ev.ToolCalls {
		idx, ok := g.tools[d.Index]
		if !ok {
			it := openai.ResponseItem{Type: "function_call", CallID: d.ID}
			if d.Function != nil {
				it.Name = d.Function.Name
			}
			if it.CallID == "" {
				it.CallID = fmt.Sprintf("call_%s_%d", strings.TrimPrefix(g.resp.ID, "resp_"), d.Index)
			}
			it.Namespace = g.namespaces[it.Name]
			g.openItem(w, it)
			idx = g.cur
			g.tools[d.Index] = idx
		} else if idx != g.cur {
			return openai.ServerError("tool call %d continued after another output item started", d.Index)
		}
		if d.Function != nil && d.Function.Arguments != "" {
			g.text.WriteString(d.Function.Arguments)
			g.send(w, openai.ResponseEvent{Type: "response.function_call_arguments.delta", ItemID: g.resp.Output[idx].ID, OutputIndex: ptrInt(idx), Delta: &d.Function.Arguments})
		}
	}
	if ev.FinishReason != "" {
		g.stop = ev.FinishReason
	}
	return nil
}

func responseUsage(u *openai.Usage) *openai.ResponseUsage {
	ru := &openai.ResponseUsage{}
	if u == nil {
		return ru
	}
	ru.InputTokens, ru.OutputTokens, ru.TotalTokens = u.PromptTokens, u.CompletionTokens, u.TotalTokens
	if d := u.PromptTokensDetails; d != nil {
		ru.InputTokensDetails.CachedTokens = d.CachedTokens
	}
	if d := u.CompletionTokensDetails; d != nil {
		ru.OutputTokensDetails.ReasoningTokens = d.ReasoningTokens
	}
	return ru
}

// complete closes the response, stores it and returns the final object.
func (g *responseGen) complete(w *sseWriter, u *openai.Usage, worker string) *openai.Response {
	g.closeItem(w)
	g.resp.Status = "completed"
	if g.stop == "length" {
		g.resp.Status = "incomplete"
		g.resp.IncompleteDetails = &openai.IncompleteDetails{Reason: "max_output_tokens"}
	}
	g.resp.Usage = responseUsage(u)
	g.resp.MacpoolWorker = worker
	final := g.snapshot()
	if g.persist != nil {
		g.persist(final)
	}
	return final
}

func (g *responseGen) finish(w *sseWriter, u *openai.Usage, worker string) {
	final := g.complete(w, u, worker)
	typ := "response.completed"
	if final.Status == "incomplete" {
		typ = "response.incomplete"
	}
	g.send(w, openai.ResponseEvent{Type: typ, Response: final})
}

// fail ends the stream with response.failed: the SDKs surface its error,
// and an agent retries the turn.
func (g *responseGen) fail(w *sseWriter, e *openai.Error) {
	g.closeItem(w)
	r := g.snapshot()
	r.Status = "failed"
	code := e.Code
	if code == "" {
		code = e.Type
	}
	r.Error = &openai.ResponseError{Code: code, Message: e.Message}
	g.send(w, openai.ResponseEvent{Type: "response.failed", Response: r})
}
