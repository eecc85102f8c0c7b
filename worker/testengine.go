package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// TestEngine is an instant engine for tests and the coordinator-overhead
// benchmark: it answers with the words of the last message (or prompt),
// one word per token, up to max_tokens (DefaultTokens when unset). It loads
// no model. Selected on the command line with --backend test.
type TestEngine struct {
	// TokenDelay is slept (honouring ctx) before every token; 0 is instant.
	TokenDelay time.Duration
	// DefaultTokens is the token count when the request sets no max_tokens.
	DefaultTokens int
}

// testRequest is the subset of chat/completion JSON the test engine reads;
// going through JSON keeps it independent of the Go shape of api/openai.
type testRequest struct {
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
}

func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
		return list[0]
	}
	return ""
}

// Generate implements Engine.
func (e *TestEngine) Generate(ctx context.Context, j *job.Job, emit func(*job.Event) error) error {
	return e.GenerateResume(ctx, j, nil, func(ev *job.Event, _ []int) error { return emit(ev) })
}

// GenerateResume implements ResumeEngine: token i is word i (id i); a
// resumed run checks the tokens and continues after them.
func (e *TestEngine) GenerateResume(ctx context.Context, j *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error {
	var src any = j.Chat
	if j.Kind == job.KindCompletion {
		src = j.Completion
	}
	b, err := json.Marshal(src)
	if err != nil {
		return fmt.Errorf("test engine: %w", err)
	}
	var req testRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return fmt.Errorf("test engine: %w", err)
	}
	var input string
	if len(req.Messages) > 0 {
		input = textOf(req.Messages[len(req.Messages)-1].Content)
	} else {
		input = textOf(req.Prompt)
	}
	words := strings.Fields(input)
	if len(words) == 0 {
		words = []string{"ok"}
	}
	limit := e.DefaultTokens
	if limit <= 0 {
		limit = 16
	}
	if req.MaxCompletionTokens != nil {
		limit = *req.MaxCompletionTokens
	} else if req.MaxTokens != nil {
		limit = *req.MaxTokens
	}
	n, finish := len(words), "stop"
	if limit < n {
		n, finish = limit, "length"
	}
	first := 0
	if r != nil && len(r.Tokens) > 0 {
		for i, id := range r.Tokens[0] {
			if id != i || i >= n {
				return openai.InvalidRequest("", "test engine: resume token %d is %d, want %d (< %d)", i, id, i, n)
			}
		}
		first = len(r.Tokens[0])
	}
	var t *time.Timer
	if e.TokenDelay > 0 {
		t = time.NewTimer(e.TokenDelay)
		defer t.Stop()
	}
	for i := first; i < n; i++ {
		if t != nil {
			t.Reset(e.TokenDelay)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
		} else if err := ctx.Err(); err != nil {
			return err
		}
		ev := &job.Event{Text: words[i]}
		if i > 0 {
			ev.Text = " " + words[i]
		} else if j.Kind != job.KindCompletion {
			ev.Role = "assistant"
		}
		if err := emit(ev, []int{i}); err != nil {
			return err
		}
	}
	prompt := len(strings.Fields(input))
	return emit(&job.Event{FinishReason: finish, Usage: &openai.Usage{PromptTokens: prompt, CompletionTokens: n, TotalTokens: prompt + n}}, nil)
}
