package api

import (
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestGolden compares whole response bodies (SSE streams byte for byte) with
// testdata/*.golden. Run with -update to rewrite them after a deliberate change.
func TestGolden(t *testing.T) {
	twoChoices := []job.Event{
		{Worker: "mac-1", Choice: 0, Role: "assistant"},
		{Worker: "mac-1", Choice: 1, Role: "assistant", Text: "Bonjour"},
		{Worker: "mac-1", Choice: 0, Text: "Hello"},
		{Worker: "mac-1", Choice: 1, FinishReason: "stop"},
		{Worker: "mac-1", Choice: 0, Text: "!", FinishReason: "length"},
		{Worker: "mac-1", Usage: &openai.Usage{PromptTokens: 5, CompletionTokens: 4, TotalTokens: 9}},
	}
	cases := []struct {
		name   string
		path   string
		body   string
		events []job.Event
	}{
		{"chat_stream", "/v1/chat/completions",
			`{"model":"qwen3-8b","messages":[{"role":"user","content":"Weather in Paris?"}],"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":1}`,
			scriptedChat()},
		{"chat_stream_no_usage", "/v1/chat/completions",
			`{"model":"qwen3-8b","messages":[{"role":"user","content":"Greet twice"}],"stream":true,"n":2}`,
			twoChoices},
		{"chat_stream_error", "/v1/chat/completions",
			`{"model":"qwen3-8b","messages":[{"role":"user","content":"hi"}],"stream":true}`,
			[]job.Event{{Worker: "mac-3", Role: "assistant", Text: "Hel"}, {Worker: "mac-3", Err: openai.ServerError("worker mac-3 left the cluster")}}},
		{"chat_nonstream", "/v1/chat/completions",
			`{"model":"qwen3-8b","messages":[{"role":"user","content":"Weather in Paris?"}],"logprobs":true,"top_logprobs":1}`,
			scriptedChat()},
		{"completion_stream", "/v1/completions",
			`{"model":"qwen3-8b","prompt":"Once","stream":true,"stream_options":{"include_usage":true},"n":2}`,
			twoChoices},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := &fakeService{events: tc.events}
			_, hs := newTestServer(t, svc, nil)
			req, _ := http.NewRequest("POST", hs.URL+tc.path, strings.NewReader(tc.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("body differs from %s\ngot:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}
