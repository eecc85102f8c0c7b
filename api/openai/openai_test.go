package openai

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

const fullChat = `{
  "model": "qwen3-8b",
  "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Paris?"}]},
    {"role": "assistant", "content": null, "reasoning_content": "need a tool", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18C"}
  ],
  "max_tokens": 64, "max_completion_tokens": 32, "temperature": 0.7, "top_p": 0.8, "n": 2,
  "stream": true, "stream_options": {"include_usage": true}, "stop": "\n\n",
  "presence_penalty": 1.5, "frequency_penalty": -0.5, "logit_bias": {"151643": -100},
  "logprobs": true, "top_logprobs": 5, "seed": 42, "user": "u1",
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
  "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
  "parallel_tool_calls": false,
  "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": true}},
  "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.05, "min_tokens": 1,
  "chat_template_kwargs": {"enable_thinking": false, "custom": {"a": [1, 2]}},
  "add_generation_prompt": true,
  "some_vendor_extra": {"ignored": true}
}`

func TestParseChatFull(t *testing.T) {
	req, err := ParseChatCompletionRequest([]byte(fullChat))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if got := req.Messages[1].Content.String(); got != "Weather in Paris?" {
		t.Errorf("parts content = %q", got)
	}
	if req.Messages[2].Content != nil || len(req.Messages[2].ToolCalls) != 1 {
		t.Errorf("assistant message = %+v", req.Messages[2])
	}
	if !reflect.DeepEqual(req.Stop, Stop{"\n\n"}) {
		t.Errorf("stop = %q", req.Stop)
	}
	if req.ToolChoice.Mode != ToolChoiceFunction || req.ToolChoice.Function != "get_weather" {
		t.Errorf("tool_choice = %+v", req.ToolChoice)
	}
	if string(req.ChatTemplateKwargs["enable_thinking"]) != "false" || string(req.ChatTemplateKwargs["custom"]) != `{"a": [1, 2]}` {
		t.Errorf("chat_template_kwargs = %s", req.ChatTemplateKwargs)
	}
	if req.MaxNewTokens() != 32 || req.Choices() != 2 || !req.IncludeUsage() {
		t.Errorf("MaxNewTokens %d Choices %d IncludeUsage %v", req.MaxNewTokens(), req.Choices(), req.IncludeUsage())
	}

	// The coordinator forwards the request as JSON: it must come back equal.
	data, merr := json.Marshal(req)
	if merr != nil {
		t.Fatal(merr)
	}
	again, err := ParseChatCompletionRequest(data)
	if err != nil {
		t.Fatalf("re-parse %s: %v", data, err)
	}
	data2, _ := json.Marshal(again)
	if string(data) != string(data2) {
		t.Errorf("round trip differs:\n%s\n%s", data, data2)
	}
	if !reflect.DeepEqual(req.Messages, again.Messages) || !reflect.DeepEqual(req.ToolChoice, again.ToolChoice) {
		t.Errorf("round trip changed messages or tool_choice")
	}
}

func TestWireForms(t *testing.T) {
	t.Run("content", func(t *testing.T) {
		for _, in := range []string{`"hi"`, `[{"type":"text","text":"hi"}]`, `[]`} {
			var c Content
			if err := json.Unmarshal([]byte(in), &c); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			out, _ := json.Marshal(c)
			if string(out) != in {
				t.Errorf("%s came back as %s", in, out)
			}
		}
	})
	t.Run("tool_choice", func(t *testing.T) {
		for _, in := range []string{`"auto"`, `"none"`, `"required"`, `{"type":"function","function":{"name":"f"}}`} {
			var tc ToolChoice
			if err := json.Unmarshal([]byte(in), &tc); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			out, _ := json.Marshal(tc)
			if string(out) != in {
				t.Errorf("%s came back as %s", in, out)
			}
		}
	})
	t.Run("prompt", func(t *testing.T) {
		for _, in := range []string{`"hi"`, `["a","b"]`, `[1,2,3]`, `[[1,2],[3]]`} {
			var p Prompt
			if err := json.Unmarshal([]byte(in), &p); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			out, _ := json.Marshal(p)
			if string(out) != in {
				t.Errorf("%s came back as %s", in, out)
			}
		}
		var p Prompt
		json.Unmarshal([]byte(`[[1,2],[3]]`), &p)
		if p.Len() != 2 || len(p.Tokens[1]) != 1 {
			t.Errorf("token lists = %+v", p)
		}
	})
	t.Run("stop", func(t *testing.T) {
		var s Stop
		if err := json.Unmarshal([]byte(`["a","b"]`), &s); err != nil || len(s) != 2 {
			t.Errorf("stop list: %v %q", err, s)
		}
	})
}

func TestErrorJSON(t *testing.T) {
	e := InvalidRequest("", "bad")
	out, _ := json.Marshal(ErrorResponse{Error: e})
	if want := `{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}`; string(out) != want {
		t.Errorf("got %s, want %s", out, want)
	}
	var back ErrorResponse
	if err := json.Unmarshal([]byte(`{"error":{"message":"m","type":"BadRequestError","param":"n","code":400}}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.Error.Param != "n" || back.Error.Code != "400" {
		t.Errorf("vLLM-style error decoded as %+v", back.Error)
	}
}

func TestParseCompletionForms(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","prompt":"hi"}`,
		`{"model":"m","prompt":["hi"]}`,
		`{"model":"m","prompt":[1,2,3]}`,
		`{"model":"m","prompt":[[1,2,3]]}`,
		`{"model":"m","prompt":"hi","stop":["\n"],"logprobs":5,"echo":true,"best_of":1,"stream":true,"stream_options":{"include_usage":true}}`,
	} {
		if _, err := ParseCompletionRequest([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
	// Lists of prompts are several prompts (one choice set each).
	for body, want := range map[string]int{`{"model":"m","prompt":["a","b"]}`: 2, `{"model":"m","prompt":[[1],[2,3],[4]]}`: 3} {
		r, err := ParseCompletionRequest([]byte(body))
		if err != nil || r.Prompt.Len() != want {
			t.Errorf("%s: got %v, %v; want %d prompts", body, r, err, want)
		}
	}
}

func TestEmbeddingRequest(t *testing.T) {
	if _, err := ParseEmbeddingRequest([]byte(`{"model":"m","input":["a","b"]}`)); err != nil {
		t.Error(err)
	}
	_, err := ParseEmbeddingRequest([]byte(`{"model":"m","input":{"x":1}}`))
	if err == nil || err.Param != "input" || !strings.HasPrefix(err.Message, "input must") {
		t.Errorf("bad input: %v", err)
	}
}

// FuzzChatRequest checks that parsing never panics, that every rejection is a
// well-formed 400, and that an accepted request survives the JSON round trip
// the coordinator puts it through.
func FuzzChatRequest(f *testing.F) {
	f.Add([]byte(fullChat))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := ParseChatCompletionRequest(data)
		if err != nil {
			if err.Status != 400 || err.Type != TypeInvalidRequest || err.Message == "" {
				t.Fatalf("malformed error %+v", err)
			}
			return
		}
		out, merr := json.Marshal(req)
		if merr != nil {
			t.Fatalf("marshal accepted request: %v", merr)
		}
		again, err := ParseChatCompletionRequest(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		out2, _ := json.Marshal(again)
		if string(out) != string(out2) {
			t.Fatalf("round trip not stable:\n%s\n%s", out, out2)
		}
	})
}
