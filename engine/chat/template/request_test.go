package template

import (
	"strings"
	"testing"
)

func TestRenderRequest(t *testing.T) {
	cache := map[string]*Template{}
	qwen3 := goldenTemplate(t, "tokenizer_config", cache)
	coder := goldenTemplate(t, "Qwen3-Coder.jinja", cache)
	for _, tc := range []struct {
		name string
		tp   *Template
		body string
		want string // substring of the rendering, or of the error with "error: "
	}{
		{"generation prompt by default", qwen3, `{"messages":[{"role":"user","content":"Hi"}]}`,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		{"no generation prompt", qwen3, `{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":false}`,
			"<|im_start|>user\nHi<|im_end|>\n"},
		{"string arguments decoded (JSON format)", qwen3,
			`{"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"b\": 1, \"a\": \"x<y\"}"}}]},{"role":"tool","content":"ok"}]}`,
			"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": \"x<y\"}}\n</tool_call>"},
		{"string arguments decoded (XML format)", coder,
			`{"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":"","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"city\": \"Paris\", \"days\": [1, 2]}"}}]}]}`,
			"<function=f>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n[1, 2]\n</parameter>\n</function>"},
		{"parts joined for string-only templates", coder,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"one"},{"type":"text","text":"two"}]}]}`,
			"<|im_start|>user\none\ntwo<|im_end|>"},
		{"image parts rejected", coder,
			`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`,
			"error: content part 0: type \"image_url\" is not supported"},
		{"continue final message", qwen3,
			`{"messages":[{"role":"user","content":"Count"},{"role":"assistant","content":"1, 2,"}],"continue_final_message":true}`,
			"<|im_start|>assistant\n<think>\n\n</think>\n\n1, 2,"},
		{"null content as empty string", qwen3,
			`{"messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r"},{"role":"user","content":"ok"}]}`,
			"<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|im_end|>"},
		{"empty messages", qwen3, `{"messages":[]}`, "error: messages must not be empty"},
		{"bad arguments", qwen3,
			`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{oops"}}]}]}`,
			"error: message 0: tool_calls[0].function.arguments is not valid JSON"},
		{"kwargs cannot replace messages", qwen3, `{"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"messages":[]}}`,
			"error: chat_template_kwargs may not set messages"},
		{"not JSON", qwen3, `{"messages":`, "error: parse chat request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.tp.RenderRequest([]byte(tc.body))
			if wantErr, ok := strings.CutPrefix(tc.want, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), wantErr) {
					t.Errorf("error %v, want one containing %q", err, wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("got\n%q\nwant it to contain\n%q", got, tc.want)
			}
			if strings.Contains(tc.name, "continue") && !strings.HasSuffix(got, tc.want) {
				t.Errorf("continue_final_message: got %q, want it to end with %q", got, tc.want)
			}
		})
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add(`{"messages":[{"role":"user","content":"Hi"}]}`)
	f.Add(`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`)
	f.Add(`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"tools":[{}]}`)
	tp, err := New("{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}", nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		_, _ = ParseRequest([]byte(body))
		_, _ = tp.RenderRequest([]byte(body))
	})
}
