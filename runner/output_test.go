package runner

import (
	"testing"

	"github.com/macpool/macpool/engine/chat/toolcall"
	"github.com/macpool/macpool/job"
)

// TestOutputPipeline feeds known model output through the per-choice
// pipeline (what tool_choice auto and reasoning see from a real model).
func TestOutputPipeline(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	two := "<think>\nLet me call.\n</think>\n\nSure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"set_alarm\", \"arguments\": {\"loud\": true}}\n</tool_call>"
	for _, tc := range []struct {
		name      string
		text      string
		parallel  bool
		stops     []string
		calls     int
		content   string
		reasoning string
		finish    string
	}{
		{"two calls", two, true, nil, 2, "Sure.", "Let me call.", "tool_calls"},
		{"parallel off", two, false, nil, 1, "Sure.", "Let me call.", "tool_calls"},
		{"stop before calls", two, true, []string{"<tool_"}, 0, "Sure.\n", "Let me call.", "stop"},
		{"plain", "<think>\nhmm\n</think>\n\nHello world", true, nil, 0, "Hello world", "hmm", "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &plan{kind: job.KindChat, reasoning: true, parseTools: true, parallel: tc.parallel, stops: tc.stops,
				tools: []toolcall.Tool{{Name: "get_weather"}, {Name: "set_alarm"}}}
			r := &result{}
			collect := func(ev *job.Event, _ []int) error {
				r.events = append(r.events, ev)
				return nil
			}
			o := e.newOutput(p, 0, collect)
			var content, reasoning string
			calls := map[int]string{}
			for _, id := range e.tok.Encode(tc.text) {
				stopped, err := o.token(id)
				if err != nil {
					t.Fatal(err)
				}
				if stopped {
					break
				}
			}
			if err := o.finish("stop"); err != nil {
				t.Fatal(err)
			}
			finish := ""
			for _, ev := range r.events {
				content += ev.Text
				reasoning += ev.Reasoning
				for _, d := range ev.ToolCalls {
					if d.ID != "" && d.Function.Name == "" {
						t.Errorf("call %d: id without name", d.Index)
					}
					calls[d.Index] += d.Function.Arguments
				}
				finish = ev.FinishReason
			}
			if content != tc.content || reasoning != tc.reasoning || len(calls) != tc.calls || finish != tc.finish {
				t.Errorf("content %q reasoning %q calls %v finish %q; want %q %q %d %q", content, reasoning, calls, finish, tc.content, tc.reasoning, tc.calls, tc.finish)
			}
		})
	}
}
