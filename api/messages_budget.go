package api

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/macpool/macpool/api/anthropic"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// thinkingBudget is the thinking budget to enforce, or 0 for none: thinking
// enabled with budget_tokens below max_tokens. A budget of max_tokens or
// more (allowed with interleaved thinking, where it spans the whole turn;
// Claude Code sends budget = max_tokens) is bounded by max_tokens anyway.
func thinkingBudget(r *anthropic.MessagesRequest) int {
	if t := r.Thinking; t != nil && t.Type == "enabled" && t.BudgetTokens > 0 && t.BudgetTokens < r.MaxTokens {
		return t.BudgetTokens
	}
	return 0
}

// submitBudgeted runs a thinking request so that its thinking ends at the
// budget: a Qwen model has no budget of its own, it thinks until it closes
// </think>. Phase one generates at most budget tokens. If it ran out (finish
// "length") before a tool call started, phase two continues the same
// assistant turn for the tokens left under max_tokens, with the thinking so
// far closed and the text so far kept (continue_final_message): the model
// must answer now. Both phases are ordinary jobs, so failover and the prefix
// cache apply to each (phase two's prompt extends phase one's). The client
// sees one stream.
func (s *Server) submitBudgeted(ctx context.Context, req *job.Job, requested string, budget int) (job.Stream, *openai.Error) {
	first := *req.Chat
	first.MaxTokens = ptrTo(budget)
	j1 := *req
	j1.Chat = &first
	st, e := s.submitAgentJob(ctx, &j1, requested)
	if e != nil {
		return nil, e
	}
	return &budgetStream{s: s, job: req, requested: requested, budget: budget, st: st}, nil
}

// budgetStream is the two-phase job.Stream of submitBudgeted.
type budgetStream struct {
	s         *Server
	job       *job.Job // the request as the client sent it (its max_tokens)
	requested string
	budget    int
	st        job.Stream

	second    bool
	reasoning strings.Builder
	text      strings.Builder
	toolCall  bool
	ranOut    bool          // phase one ended by length; its finish is held back
	usage1    *openai.Usage // phase one's usage, held back
}

func (b *budgetStream) Recv(ctx context.Context) (*job.Event, error) {
	for {
		ev, err := b.st.Recv(ctx)
		if b.second {
			if ev != nil && ev.Usage != nil && b.usage1 != nil {
				u := *ev.Usage
				// The prompt is phase one's; phase two's repeats it
				// with the thinking.
				u.PromptTokens, u.PromptTokensDetails = b.usage1.PromptTokens, b.usage1.PromptTokensDetails
				u.CompletionTokens += b.usage1.CompletionTokens
				u.TotalTokens = u.PromptTokens + u.CompletionTokens
				ev.Usage = &u
			}
			if ev != nil {
				ev.Role = "" // the turn goes on
			}
			return ev, err
		}
		if errors.Is(err, io.EOF) && b.ranOut {
			if next, e := b.startSecond(ctx); e != nil || next {
				if e != nil {
					return nil, e
				}
				continue
			}
			return &job.Event{FinishReason: "length", Usage: b.usage1}, nil
		}
		if err != nil || ev.Err != nil {
			return ev, err
		}
		b.reasoning.WriteString(ev.Reasoning)
		b.text.WriteString(ev.Text)
		if len(ev.ToolCalls) > 0 {
			b.toolCall = true
		}
		if ev.FinishReason == "length" && !b.toolCall {
			b.ranOut = true
		}
		if b.ranOut {
			// Hold back the finish and usage until phase two decides.
			if ev.Usage != nil {
				b.usage1 = ev.Usage
			}
			ev.FinishReason, ev.Usage = "", nil
		}
		return ev, nil
	}
}

// startSecond submits phase two; next is false when no tokens are left.
func (b *budgetStream) startSecond(ctx context.Context) (next bool, err error) {
	used := b.budget
	if b.usage1 != nil {
		used = b.usage1.CompletionTokens
	}
	left := b.job.Chat.MaxNewTokens() - used
	if left <= 0 {
		return false, nil
	}
	chat := *b.job.Chat
	chat.Messages = append(append([]openai.ChatMessage(nil), chat.Messages...), openai.ChatMessage{
		Role: openai.RoleAssistant, ReasoningContent: b.reasoning.String(), Content: openai.TextContent(b.text.String())})
	chat.ContinueFinalMessage = true
	chat.MaxTokens, chat.MaxCompletionTokens = ptrTo(left), nil
	if e := chat.Validate(); e != nil {
		return false, e
	}
	cont := *b.job
	cont.ID = b.s.newID()
	cont.Chat = &chat
	st, e := b.s.submitAgentJob(ctx, &cont, b.requested)
	if e != nil {
		return false, e
	}
	b.st.Close()
	b.st, b.second = st, true
	return true, nil
}

func (b *budgetStream) Close() error { return b.st.Close() }
