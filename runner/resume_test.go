package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// TestResumeConstrained resumes constrained generations (response_format
// json_schema, forced tool calls in the JSON and XML formats, seeded
// sampling) after every event that carried token ids, as a mid-stream
// failover does: the constraint state (grammar, forced literals, substituted
// EOS, capped XML text) must be replayed so that the continuation equals the
// uninterrupted run's remainder, token for token.
func TestResumeConstrained(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		edit        func(e *Runner, r *openai.ChatCompletionRequest)
	}{
		{"json_schema", "qwen3", func(e *Runner, r *openai.ChatCompletionRequest) {
			r.LogitBias = quoteBias(e)
			r.ResponseFormat = &openai.ResponseFormat{Type: "json_schema", JSONSchema: &openai.JSONSchema{Name: "s", Schema: json.RawMessage(testSchemas[0]), Strict: ptr(true)}}
		}},
		{"tool_json", "qwen3", func(e *Runner, r *openai.ChatCompletionRequest) {
			r.LogitBias = quoteBias(e)
			r.Tools = testTools
			r.ToolChoice = &openai.ToolChoice{Mode: openai.ToolChoiceRequired}
		}},
		{"tool_xml", "qwen3.5", func(e *Runner, r *openai.ChatCompletionRequest) {
			r.Tools = testTools
			r.ToolChoice = &openai.ToolChoice{Mode: openai.ToolChoiceFunction, Function: "get_weather"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, tc.model, nil)
			done := 0
			for seed := int64(1); seed <= 2; seed++ {
				j := func() *job.Job {
					return chatJob("What's the weather in Paris?", func(r *openai.ChatCompletionRequest) {
						r.MaxTokens = ptr(120)
						r.Temperature = ptr(1.0)
						r.Seed = ptr(seed)
						tc.edit(e, r)
					})
				}
				if resumeEveryCut(t, e, j) {
					done++
				}
			}
			if done == 0 {
				t.Errorf("no seed finished its constrained output within the token budget")
			}
		})
	}
}

// render is the client-visible content of an event (ids of tool calls
// excluded: they are random per run).
func render(ev *job.Event) string {
	var b strings.Builder
	b.WriteString(ev.Text)
	if ev.Reasoning != "" {
		fmt.Fprintf(&b, "<r:%s>", ev.Reasoning)
	}
	for _, c := range ev.ToolCalls {
		fmt.Fprintf(&b, "<call %d", c.Index)
		if c.Function != nil {
			fmt.Fprintf(&b, " %s %s", c.Function.Name, c.Function.Arguments)
		}
		b.WriteString(">")
	}
	if ev.FinishReason != "" {
		fmt.Fprintf(&b, "<finish:%s>", ev.FinishReason)
	}
	return b.String()
}

// resumeEveryCut runs job, then resumes it after every event with token ids
// and compares: rendered content, ids and completion tokens. It reports
// whether the run finished (not cut by max_tokens).
func resumeEveryCut(t *testing.T, e *Runner, j func() *job.Job) bool {
	t.Helper()
	type cut struct {
		ids  int
		text string
	}
	var ids []int
	var full strings.Builder
	var cuts []cut
	var usage *openai.Usage
	finished := false
	err := e.GenerateResume(context.Background(), j(), nil, func(ev *job.Event, toks []int) error {
		ids = append(ids, toks...)
		full.WriteString(render(ev))
		if ev.FinishReason != "" && ev.FinishReason != "length" {
			finished = true
		}
		if ev.Usage != nil {
			usage = ev.Usage
		}
		if len(toks) > 0 {
			cuts = append(cuts, cut{len(ids), full.String()})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if usage == nil || usage.CompletionTokens != len(ids) {
		t.Fatalf("usage %+v, want completion tokens = %d reported ids", usage, len(ids))
	}
	t.Logf("%d ids, %d cuts: %s", len(ids), len(cuts), short(full.String()))
	for _, c := range cuts[:len(cuts)-1] {
		var got strings.Builder
		var rest []int
		var u *openai.Usage
		err := e.GenerateResume(context.Background(), j(), &job.Resume{Tokens: [][]int{ids[:c.ids]}}, func(ev *job.Event, toks []int) error {
			rest = append(rest, toks...)
			got.WriteString(render(ev))
			if ev.Usage != nil {
				u = ev.Usage
			}
			return nil
		})
		if err != nil {
			t.Fatalf("resume after %d ids: %v", c.ids, err)
		}
		if want := full.String()[len(c.text):]; got.String() != want {
			t.Errorf("resumed after %d ids: got %q, want %q", c.ids, short(got.String()), short(want))
			continue
		}
		if !slices.Equal(rest, ids[c.ids:]) {
			t.Errorf("resumed after %d ids: ids %v, want %v", c.ids, rest, ids[c.ids:])
		}
		if u == nil || u.CompletionTokens != len(ids) {
			t.Errorf("resumed after %d ids: usage %+v, want %d completion tokens", c.ids, u, len(ids))
		}
	}
	return finished
}
