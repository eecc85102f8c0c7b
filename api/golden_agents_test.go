package api

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// TestGoldenAgents pins the Messages and Responses bodies byte for byte
// (testdata/*.golden; -update rewrites them): the streams are what the
// official SDKs were checked against (e2e/agents), so any change to them
// must be deliberate.
func TestGoldenAgents(t *testing.T) {
	failing := []job.Event{{Worker: "mac-3", Role: "assistant", Text: "Hel"}, {Worker: "mac-3", Err: openai.Unavailable("worker mac-3 left the cluster")}}
	msgs := `"model":"claude-sonnet-4-5","max_tokens":100,"system":"Be brief.","messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"thinking":{"type":"enabled","budget_tokens":100}`
	resp := `"model":"qwen3-8b","input":"Weather in Paris?","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],"metadata":{"k":"v"}`
	cases := []struct {
		name, path, body string
		events           []job.Event
	}{
		{"messages_stream", "/v1/messages", `{` + msgs + `,"stream":true}`, scriptedChat()},
		{"messages_nonstream", "/v1/messages", `{` + msgs + `}`, scriptedChat()},
		{"messages_stream_error", "/v1/messages", `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, failing},
		{"responses_stream", "/v1/responses", `{` + resp + `,"stream":true}`, scriptedChat()},
		{"responses_nonstream", "/v1/responses", `{` + resp + `}`, scriptedChat()},
		{"responses_stream_error", "/v1/responses", `{"model":"m","input":"hi","stream":true}`, failing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := &fakeService{events: tc.events}
			_, hs := newTestServer(t, svc, func(c *Config) { c.ModelAliases = map[string]string{"claude-sonnet-4-5": "qwen3-8b"} })
			r, err := http.Post(hs.URL+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(r.Body)
			r.Body.Close()
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
