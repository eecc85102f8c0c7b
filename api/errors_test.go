package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/macpool/macpool/job"
)

// checkErrorBody asserts the OpenAI error shape: exactly
// {"error":{"message","type","param","code"}}.
func checkErrorBody(t *testing.T, body []byte, wantType, wantParam string) map[string]any {
	t.Helper()
	var env map[string]map[string]any
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	if len(env) != 1 || env["error"] == nil {
		t.Fatalf("error body %s: want exactly one key \"error\"", body)
	}
	e := env["error"]
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e[k]; !ok {
			t.Errorf("error body %s: missing %q", body, k)
		}
	}
	if len(e) != 4 {
		t.Errorf("error body %s: got %d keys, want 4", body, len(e))
	}
	if msg, _ := e["message"].(string); msg == "" {
		t.Errorf("error body %s: empty message", body)
	}
	if e["type"] != wantType {
		t.Errorf("type = %v, want %s", e["type"], wantType)
	}
	var wantP any
	if wantParam != "" {
		wantP = wantParam
	}
	if e["param"] != wantP {
		t.Errorf("param = %v, want %v (message %q)", e["param"], wantP, e["message"])
	}
	return e
}

func TestBadRequests(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	chat := func(extra string) string {
		if extra == "" {
			return `{"model":"qwen3-8b",` + msgs + `}`
		}
		return `{"model":"qwen3-8b",` + msgs + `,` + extra + `}`
	}
	tool := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	cases := []struct {
		name, path, body string
		status           int
		param            string
		msgHas           string
	}{
		{"malformed json", "/v1/chat/completions", `{"model":`, 400, "", "not valid JSON"},
		{"trailing garbage", "/v1/chat/completions", chat("") + "x", 400, "", "not valid JSON"},
		{"not an object", "/v1/chat/completions", `[1,2]`, 400, "", "JSON object"},
		{"empty body", "/v1/chat/completions", ``, 400, "", "empty"},
		{"temperature wrong type", "/v1/chat/completions", chat(`"temperature":"hot"`), 400, "temperature", "expected a number, got a string"},
		{"n wrong type", "/v1/chat/completions", chat(`"n":1.5`), 400, "n", "integer"},
		{"stream wrong type", "/v1/chat/completions", chat(`"stream":"yes"`), 400, "stream", "boolean"},
		{"messages wrong type", "/v1/chat/completions", `{"model":"m","messages":"hi"}`, 400, "messages", "array"},
		{"content wrong type", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":5}]}`, 400, "messages[1].content", "string or an array"},
		{"role wrong type", "/v1/chat/completions", `{"model":"m","messages":[{"role":7,"content":"a"}]}`, 400, "messages[0].role", "string"},
		{"unknown model", "/v1/chat/completions", `{"model":"missing",` + msgs + `}`, 404, "model", "does not exist"},
		{"missing model", "/v1/chat/completions", `{` + msgs + `}`, 400, "model", "required"},
		{"empty messages", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "messages", "at least one"},
		{"missing messages", "/v1/chat/completions", `{"model":"m"}`, 400, "messages", "at least one"},
		{"max_tokens zero", "/v1/chat/completions", chat(`"max_tokens":0`), 400, "max_tokens", "at least 1"},
		{"max_completion_tokens negative", "/v1/chat/completions", chat(`"max_completion_tokens":-5`), 400, "max_completion_tokens", "at least 1"},
		{"n zero", "/v1/chat/completions", chat(`"n":0`), 400, "n", "between 1"},
		{"n too large", "/v1/chat/completions", chat(`"n":1000`), 400, "n", "between 1"},
		{"temperature high", "/v1/chat/completions", chat(`"temperature":2.5`), 400, "temperature", "between 0 and 2"},
		{"temperature negative", "/v1/chat/completions", chat(`"temperature":-0.1`), 400, "temperature", "between 0 and 2"},
		{"top_p zero", "/v1/chat/completions", chat(`"top_p":0`), 400, "top_p", "greater than 0"},
		{"top_p above one", "/v1/chat/completions", chat(`"top_p":1.01`), 400, "top_p", "at most 1"},
		{"top_logprobs too many", "/v1/chat/completions", chat(`"logprobs":true,"top_logprobs":21`), 400, "top_logprobs", "between 0 and 20"},
		{"top_logprobs negative", "/v1/chat/completions", chat(`"logprobs":true,"top_logprobs":-1`), 400, "top_logprobs", "between 0 and 20"},
		{"top_logprobs without logprobs", "/v1/chat/completions", chat(`"top_logprobs":3`), 400, "top_logprobs", "requires logprobs"},
		{"top_logprobs zero with logprobs false", "/v1/chat/completions", chat(`"logprobs":false,"top_logprobs":0`), 400, "top_logprobs", "requires logprobs"},
		{"stop too many", "/v1/chat/completions", chat(`"stop":["a","b","c","d","e"]`), 400, "stop", "at most 4"},
		{"stop wrong type", "/v1/chat/completions", chat(`"stop":5`), 400, "stop", "string or an array"},
		{"presence_penalty", "/v1/chat/completions", chat(`"presence_penalty":2.5`), 400, "presence_penalty", "between -2 and 2"},
		{"frequency_penalty", "/v1/chat/completions", chat(`"frequency_penalty":-3`), 400, "frequency_penalty", "between -2 and 2"},
		{"logit_bias key", "/v1/chat/completions", chat(`"logit_bias":{"hello":5}`), 400, "logit_bias", "token ids"},
		{"logit_bias value", "/v1/chat/completions", chat(`"logit_bias":{"42":101}`), 400, "logit_bias", "between -100 and 100"},
		{"bad role", "/v1/chat/completions", `{"model":"m","messages":[{"role":"robot","content":"beep"}]}`, 400, "messages[0].role", "robot"},
		{"missing role", "/v1/chat/completions", `{"model":"m","messages":[{"content":"x"}]}`, 400, "messages[0].role", "required"},
		{"tool_choice unknown tool", "/v1/chat/completions", chat(tool + `,"tool_choice":{"type":"function","function":{"name":"launch_rockets"}}`), 400, "tool_choice", "launch_rockets"},
		{"tool_choice bad mode", "/v1/chat/completions", chat(tool + `,"tool_choice":"sometimes"`), 400, "tool_choice", "sometimes"},
		{"tool_choice required without tools", "/v1/chat/completions", chat(`"tool_choice":"required"`), 400, "tool_choice", "needs tools"},
		{"tool type", "/v1/chat/completions", chat(`"tools":[{"type":"retrieval","function":{"name":"x"}}]`), 400, "tools[0].type", "function"},
		{"response_format unknown", "/v1/chat/completions", chat(`"response_format":{"type":"xml"}`), 400, "response_format.type", "xml"},
		{"json_schema missing", "/v1/chat/completions", chat(`"response_format":{"type":"json_schema"}`), 400, "response_format.json_schema", "requires json_schema"},
		{"image part", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]}`, 400, "messages[0].content[1].type", "not supported"},
		{"stream_options without stream", "/v1/chat/completions", chat(`"stream_options":{"include_usage":true}`), 400, "stream_options", "stream is true"},
		{"user without content", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user"}]}`, 400, "messages[0].content", "required"},
		{"completion prompt missing", "/v1/completions", `{"model":"m"}`, 400, "prompt", "required"},
		{"completion prompt wrong type", "/v1/completions", `{"model":"m","prompt":{"a":1}}`, 400, "prompt", "must be a string"},
		{"completion temperature", "/v1/completions", `{"model":"m","prompt":"x","temperature":"hot"}`, 400, "temperature", "number"},
		{"completion logprobs", "/v1/completions", `{"model":"m","prompt":"x","logprobs":50}`, 400, "logprobs", "between 0 and 20"},
		{"completion max_tokens", "/v1/completions", `{"model":"m","prompt":"x","max_tokens":0}`, 400, "max_tokens", "at least 1"},
		{"completion unknown model", "/v1/completions", `{"model":"missing","prompt":"x"}`, 404, "model", "does not exist"},
	}
	svc := &fakeService{events: []job.Event{{Text: "ok", FinishReason: "stop"}}}
	_, hs := newTestServer(t, svc, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(hs.URL+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type = %q", ct)
			}
			e := checkErrorBody(t, body, "invalid_request_error", tc.param)
			if msg := e["message"].(string); !strings.Contains(msg, tc.msgHas) {
				t.Errorf("message %q does not mention %q", msg, tc.msgHas)
			}
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	svc := &fakeService{events: []job.Event{{Text: "ok", FinishReason: "stop"}}}
	_, hs := newTestServer(t, svc, func(c *Config) { c.MaxBodyBytes = 4096 })
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	cases := []struct {
		name, method, path, body string
		chunked                  bool
		status                   int
		typ                      string
	}{
		{"unknown route", "POST", "/v1/audio/speech", `{}`, false, 404, "invalid_request_error"},
		{"unknown root", "GET", "/", "", false, 404, "invalid_request_error"},
		{"wrong method", "GET", "/v1/chat/completions", "", false, 405, "invalid_request_error"},
		{"body too large", "POST", "/v1/chat/completions", big, false, 413, "invalid_request_error"},
		{"body too large chunked", "POST", "/v1/chat/completions", big, true, 413, "invalid_request_error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
				if tc.chunked {
					body = io.MultiReader(body) // hides the length: chunked encoding
				}
			}
			req, _ := http.NewRequest(tc.method, hs.URL+tc.path, body)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			checkErrorBody(t, b, tc.typ, "")
			if tc.status == 405 && resp.Header.Get("Allow") != "POST" {
				t.Errorf("Allow = %q, want POST", resp.Header.Get("Allow"))
			}
			if resp.Header.Get(HeaderRequestID) == "" {
				t.Error("no X-Request-Id")
			}
		})
	}
}

func TestPanicRecovered(t *testing.T) {
	svc := &fakeService{panicOn: true}
	_, hs := newTestServer(t, svc, nil)
	for i := range 2 { // the server survives the first one
		resp, err := http.Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 500 {
			t.Fatalf("request %d: status %d, want 500: %s", i, resp.StatusCode, b)
		}
		checkErrorBody(t, b, "server_error", "")
	}
}

func TestProbes(t *testing.T) {
	svc := &fakeService{readyErr: fmt.Errorf("no workers joined")}
	_, hs := newTestServer(t, svc, nil)
	resp, err := http.Get(hs.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("healthz status %d", resp.StatusCode)
	}
	resp, err = http.Get(hs.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("readyz status %d, want 503", resp.StatusCode)
	}
	e := checkErrorBody(t, b, "service_unavailable_error", "")
	if !strings.Contains(e["message"].(string), "no workers joined") {
		t.Errorf("readyz message %q", e["message"])
	}
}

func TestRequestIDNotFromClient(t *testing.T) {
	svc := &fakeService{events: []job.Event{{Worker: "w", Text: "ok", FinishReason: "stop"}}}
	_, hs := newTestServer(t, svc, nil)
	req, _ := http.NewRequest("POST", hs.URL+"/v1/chat/completions", bytes.NewReader([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)))
	req.Header.Set(HeaderRequestID, "client.chosen.id")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	rid := resp.Header.Get(HeaderRequestID)
	if rid == "" || rid == "client.chosen.id" || out.ID != "chatcmpl-"+rid || svc.lastJob(t).ID != rid {
		t.Errorf("X-Request-Id %q, id %q, job id %q", rid, out.ID, svc.lastJob(t).ID)
	}
}

func TestNewRequestID(t *testing.T) {
	a, b := newRequestID(), newRequestID()
	if len(a) != 24 || a == b {
		t.Errorf("ids %q %q", a, b)
	}
}

// TestUnenforcedHeader: what a non-strict schema could not enforce reaches
// the client as X-Macpool-Unenforced, streamed or not; without it, no header.
func TestUnenforcedHeader(t *testing.T) {
	for _, stream := range []bool{false, true} {
		for _, list := range [][]string{{"response_format: $ref at /properties/a (remote)", "tools[0].function.parameters: x at / (y)"}, nil} {
			svc := &fakeService{events: []job.Event{{Worker: "w", Role: "assistant", Unenforced: list}, {Worker: "w", Text: "{}", FinishReason: "stop"}}}
			_, hs := newTestServer(t, svc, nil)
			body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
			resp, err := http.Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got, want := resp.Header.Get(HeaderUnenforced), strings.Join(list, "; "); resp.StatusCode != 200 || got != want {
				t.Errorf("stream %v: status %d header %q, want %q", stream, resp.StatusCode, got, want)
			}
		}
	}
}
