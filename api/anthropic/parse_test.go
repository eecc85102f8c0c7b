package anthropic

import (
	"net/http"
	"strings"
	"testing"
)

func TestParseMessagesRequest(t *testing.T) {
	cases := []struct{ name, body, err string }{
		{"ok", `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"messages":[{"role":"user","content":"hi"}]}`, ""},
		{"system blocks", `{"model":"m","max_tokens":5,"system":[{"type":"image"}],"messages":[{"role":"user","content":"hi"}]}`, "system blocks must be text"},
		{"content type", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":5}]}`, "content must be a string or an array"},
		{"tool_use in user", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f"}]}]}`, "only allowed in assistant"},
		{"tool input", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":[1]}]}]}`, "input: must be a JSON object"},
		{"duplicate tool", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"},{"name":"f"}]}`, "unique"},
		{"stop sequences", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"stop_sequences":["a","b","c","d","e"]}`, "at most 4"},
		{"thinking type", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"on"}}`, "thinking.type"},
		{"system message", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"system","content":"y"}]}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ParseMessagesRequest([]byte(tc.body))
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("got error %q", err.Message)
			case tc.err == "":
				if req.System != nil && req.System.String() != "a\n\nb" {
					t.Errorf("system = %q", req.System.String())
				}
			case err == nil:
				t.Fatalf("got no error, want %q", tc.err)
			case err.Status != http.StatusBadRequest || !strings.Contains(err.Message, tc.err):
				t.Errorf("got %d %q, want 400 containing %q", err.Status, err.Message, tc.err)
			}
		})
	}
}

// FuzzParseMessagesRequest: any body is a request or a 400, never a panic.
func FuzzParseMessagesRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":"x"}],"is_error":true}]}]}`,
		`{"system":[{"type":"text"}],"thinking":{"type":"enabled","budget_tokens":3},"tool_choice":{"type":"tool","name":"f"}}`,
		`[]`, `null`, `{"messages":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := ParseMessagesRequest(body); err != nil && err.Status != http.StatusBadRequest {
			t.Fatalf("status %d for %q", err.Status, body)
		}
		if _, err := ParseCountTokensRequest(body); err != nil && err.Status != http.StatusBadRequest {
			t.Fatalf("count_tokens status %d for %q", err.Status, body)
		}
	})
}
