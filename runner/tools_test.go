package runner

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/macpool/macpool/api/openai"
)

var testTools = []openai.Tool{
	{Type: "function", Function: openai.FunctionDefinition{Name: "get_weather", Description: "Weather of a city",
		Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city","days"]}`)}},
	{Type: "function", Function: openai.FunctionDefinition{Name: "set_alarm", Description: "Set an alarm",
		Parameters: json.RawMessage(`{"type":"object","properties":{"loud":{"type":"boolean"}},"required":["loud"]}`)}},
}

// TestForcedToolCall forces calls with tool_choice required / named on the
// random model and checks they parse into OpenAI tool_calls, in the JSON
// format (Qwen3 template) and the XML format (Qwen3.5, Qwen3-Coder).
func TestForcedToolCall(t *testing.T) {
	for _, model := range []string{"qwen3", "qwen3.5", "coder"} {
		t.Run(model, func(t *testing.T) {
			e := newEngine(t, model, nil)
			if want := model != "qwen3"; e.xmlTools != want {
				t.Fatalf("xml tool format %v, want %v", e.xmlTools, want)
			}
			for _, tc := range []struct {
				name   string
				choice *openai.ToolChoice
				want   string // function name, "" = any
			}{
				{"named", &openai.ToolChoice{Mode: openai.ToolChoiceFunction, Function: "get_weather"}, "get_weather"},
				{"named2", &openai.ToolChoice{Mode: openai.ToolChoiceFunction, Function: "set_alarm"}, "set_alarm"},
				{"required", &openai.ToolChoice{Mode: openai.ToolChoiceRequired}, ""},
			} {
				ok := false
				for seed := int64(1); seed <= 3 && !ok; seed++ {
					r := mustRun(t, e, chatJob("What's the weather in Paris?", func(r *openai.ChatCompletionRequest) {
						r.Tools = testTools
						r.ToolChoice = tc.choice
						r.MaxTokens = ptr(150)
						r.Seed = ptr(seed)
						r.LogitBias = quoteBias(e)
					}))
					c := r.choices[0]
					if c.finish == "length" {
						t.Logf("%s seed %d: ran out of tokens: %q", tc.name, seed, short(c.text))
						continue
					}
					if c.finish != "tool_calls" || len(c.calls) != 1 {
						t.Errorf("%s seed %d: finish %q, %d calls (text %q), want one tool call", tc.name, seed, c.finish, len(c.calls), c.text)
						continue
					}
					call := c.calls[0]
					if !strings.HasPrefix(call.ID, "call_") || call.Type != "function" {
						t.Errorf("%s: call id %q type %q", tc.name, call.ID, call.Type)
					}
					if tc.want != "" && call.Function.Name != tc.want {
						t.Errorf("%s: called %q, want %q", tc.name, call.Function.Name, tc.want)
					}
					var args map[string]any
					if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
						t.Errorf("%s: arguments %q do not parse: %v", tc.name, call.Function.Arguments, err)
						continue
					}
					switch call.Function.Name {
					case "get_weather":
						if _, ok := args["city"].(string); !ok {
							t.Errorf("%s: city %v is not a string (%s)", tc.name, args["city"], call.Function.Arguments)
						}
						if d, ok := args["days"].(float64); !ok || d != float64(int64(d)) {
							t.Errorf("%s: days %v is not an integer (%s)", tc.name, args["days"], call.Function.Arguments)
						}
					case "set_alarm":
						if _, ok := args["loud"].(bool); !ok {
							t.Errorf("%s: loud %v is not a boolean (%s)", tc.name, args["loud"], call.Function.Arguments)
						}
					default:
						t.Errorf("%s: unknown function %q", tc.name, call.Function.Name)
					}
					if strings.TrimSpace(c.text) != "" {
						t.Errorf("%s: content %q next to a forced call", tc.name, c.text)
					}
					ok = true
					t.Logf("%s seed %d: %s(%s)", tc.name, seed, call.Function.Name, short(call.Function.Arguments))
				}
				if !ok {
					t.Errorf("%s: no seed completed a call within the token budget", tc.name)
				}
			}
		})
	}
}

// TestToolRoundTrip feeds a forced call and its result back through the
// template and generates the next turn.
func TestToolRoundTrip(t *testing.T) {
	for _, model := range []string{"qwen3", "qwen3.5"} {
		t.Run(model, func(t *testing.T) {
			e := newEngine(t, model, nil)
			first := mustRun(t, e, chatJob("Weather in Paris?", func(r *openai.ChatCompletionRequest) {
				r.Tools = testTools
				r.ToolChoice = &openai.ToolChoice{Mode: openai.ToolChoiceFunction, Function: "set_alarm"}
				r.MaxTokens = ptr(100)
				r.Seed = ptr(int64(3))
			}))
			c := first.choices[0]
			if len(c.calls) != 1 {
				t.Fatalf("no forced call: %+v", c)
			}
			second := mustRun(t, e, chatJob("Weather in Paris?", func(r *openai.ChatCompletionRequest) {
				r.Tools = testTools
				r.Messages = append(r.Messages,
					openai.ChatMessage{Role: "assistant", ToolCalls: c.calls},
					openai.ChatMessage{Role: "tool", ToolCallID: c.calls[0].ID, Content: openai.TextContent(`{"ok":true}`)})
				r.MaxTokens = ptr(8)
				r.ToolChoice = &openai.ToolChoice{Mode: openai.ToolChoiceNone}
			}))
			if second.usage.PromptTokens <= first.usage.PromptTokens {
				t.Errorf("second turn prompt %d tokens, first %d", second.usage.PromptTokens, first.usage.PromptTokens)
			}
			if n := len(second.choices[0].calls); n != 0 {
				t.Errorf("tool_choice none gave %d calls", n)
			}
		})
	}
}

// quoteBias makes the random model close JSON strings sooner (a client
// may send any logit_bias; without it a random model writes strings of
// hundreds of tokens).
func quoteBias(e *Runner) map[string]float64 {
	m := map[string]float64{}
	for _, s := range []string{`"`, `",`, `"}`, `",Ġ"`, `":`, `":Ġ`, `":"`} {
		if id, ok := e.tok.TokenID(s); ok {
			m[strconv.Itoa(id)] = 8
		}
	}
	return m
}

// TestRequiredParallelToolCalls: tool_choice required with
// parallel_tool_calls lets the model make several calls (each one a valid
// call of a listed tool, the last closed in time by max_tokens); without
// it, exactly one.
func TestRequiredParallelToolCalls(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	most := 0
	for _, parallel := range []bool{true, false} {
		for seed := int64(1); seed <= 6; seed++ {
			r := mustRun(t, e, chatJob("Weather in Paris and Rome, and an alarm", func(r *openai.ChatCompletionRequest) {
				r.Tools = testTools
				r.ToolChoice = &openai.ToolChoice{Mode: openai.ToolChoiceRequired}
				r.ParallelToolCalls = ptr(parallel)
				r.MaxTokens = ptr(400)
				r.Seed = ptr(seed)
				r.LogitBias = quoteBias(e)
				if seed%2 == 0 {
					// Discourage ending: the reply should go on with more calls.
					for _, id := range e.eos {
						r.LogitBias[strconv.Itoa(id)] = -100
					}
				}
			}))
			c := r.choices[0]
			if len(c.calls) == 0 {
				t.Errorf("parallel %v seed %d: no tool call (%q)", parallel, seed, short(c.text))
				continue
			}
			if !parallel && len(c.calls) != 1 {
				t.Errorf("parallel false seed %d: %d calls, want 1", seed, len(c.calls))
			}
			if parallel {
				most = max(most, len(c.calls))
			}
			for _, call := range c.calls {
				var args map[string]any
				if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
					t.Errorf("parallel %v seed %d: %s arguments %q do not parse: %v", parallel, seed, call.Function.Name, call.Function.Arguments, err)
				}
				if call.Function.Name != "get_weather" && call.Function.Name != "set_alarm" {
					t.Errorf("parallel %v seed %d: called %q", parallel, seed, call.Function.Name)
				}
			}
		}
	}
	if most < 2 {
		t.Errorf("with parallel_tool_calls no seed made more than %d call(s)", most)
	}
}
