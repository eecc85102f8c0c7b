package api

import (
	"net/http"
	"testing"

	"github.com/macpool/macpool/api/anthropic"
)

// FuzzAgentRequests: any Responses or Messages body becomes a chat request
// or a 4xx, never a panic or a 5xx.
func FuzzAgentRequests(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":[{"type":"reasoning","summary":[{"type":"summary_text","text":"s"}]},{"type":"function_call","call_id":"c","name":"f","arguments":""},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"o"}]}],"tools":[{"type":"namespace","name":"n","tools":[{"type":"function","name":"g"}]}],"text":{"format":{"type":"json_schema","name":"x"}}}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]}],"tool_choice":{"type":"any"}}`,
		`{"model":"m","input":[{"role":"assistant","content":null}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if r, e := parseResponseRequest(body); e == nil {
			if _, _, e := responsesToChat(r, r.Input.Items, r.Model); e != nil && e.HTTPStatus() >= http.StatusInternalServerError {
				t.Fatalf("responses: status %d for %q", e.HTTPStatus(), body)
			}
		} else if e.HTTPStatus() >= http.StatusInternalServerError {
			t.Fatalf("responses parse: status %d for %q", e.HTTPStatus(), body)
		}
		if r, e := anthropic.ParseMessagesRequest(body); e == nil {
			if _, e := messagesToChat(r, r.Model); e != nil && e.HTTPStatus() >= http.StatusInternalServerError {
				t.Fatalf("messages: status %d for %q", e.HTTPStatus(), body)
			}
		}
	})
}
