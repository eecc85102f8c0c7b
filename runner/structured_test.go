package runner

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

var testSchemas = []string{
	`{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer"}},"required":["ok","n"],"additionalProperties":false}`,
	`{"type":"object","properties":{"color":{"enum":["red","green","blue"]},"tags":{"type":"array","items":{"type":"boolean"},"maxItems":3}},"required":["color","tags"],"additionalProperties":false}`,
	`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"number"},"pet":{"anyOf":[{"type":"null"},{"type":"object","properties":{"kind":{"const":"cat"}},"required":["kind"],"additionalProperties":false}]}},"required":["name","age","pet"],"additionalProperties":false}`,
}

// validate checks v against the small JSON Schema subset of testSchemas.
func validate(schema map[string]any, v any, path string) error {
	if c, ok := schema["const"]; ok && fmt.Sprint(c) != fmt.Sprint(v) {
		return fmt.Errorf("%s: %v is not const %v", path, v, c)
	}
	if enum, ok := schema["enum"].([]any); ok {
		found := false
		for _, x := range enum {
			found = found || fmt.Sprint(x) == fmt.Sprint(v)
		}
		if !found {
			return fmt.Errorf("%s: %v not in enum %v", path, v, enum)
		}
	}
	if alts, ok := schema["anyOf"].([]any); ok {
		var errs []string
		for _, a := range alts {
			err := validate(a.(map[string]any), v, path)
			if err == nil {
				return nil
			}
			errs = append(errs, err.Error())
		}
		return fmt.Errorf("%s: no anyOf alternative matches: %s", path, strings.Join(errs, "; "))
	}
	switch schema["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %T is not an object", path, v)
		}
		props, _ := schema["properties"].(map[string]any)
		for _, r := range schema["required"].([]any) {
			if _, ok := m[r.(string)]; !ok {
				return fmt.Errorf("%s: required %s missing", path, r)
			}
		}
		for k, x := range m {
			ps, ok := props[k].(map[string]any)
			if !ok {
				if schema["additionalProperties"] == false {
					return fmt.Errorf("%s: unexpected property %s", path, k)
				}
				continue
			}
			if err := validate(ps, x, path+"."+k); err != nil {
				return err
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: %T is not an array", path, v)
		}
		if mx, ok := schema["maxItems"].(float64); ok && len(a) > int(mx) {
			return fmt.Errorf("%s: %d items > maxItems %v", path, len(a), mx)
		}
		for i, x := range a {
			if err := validate(schema["items"].(map[string]any), x, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: %T is not a boolean", path, v)
		}
	case "integer":
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) {
			return fmt.Errorf("%s: %v is not an integer", path, v)
		}
	case "number":
		if _, ok := v.(float64); !ok {
			return fmt.Errorf("%s: %T is not a number", path, v)
		}
	case "string":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: %T is not a string", path, v)
		}
	case "null":
		if v != nil {
			return fmt.Errorf("%s: %v is not null", path, v)
		}
	}
	return nil
}

func TestJSONSchema(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	stopped := 0
	total := 0
	for si, schema := range testSchemas {
		var sm map[string]any
		if err := json.Unmarshal([]byte(schema), &sm); err != nil {
			t.Fatal(err)
		}
		for seed := int64(1); seed <= 2; seed++ {
			r := mustRun(t, e, chatJob("Give me JSON", func(r *openai.ChatCompletionRequest) {
				r.MaxTokens = ptr(200)
				r.Temperature = ptr(1.0)
				r.Seed = ptr(seed)
				r.LogitBias = quoteBias(e)
				r.ResponseFormat = &openai.ResponseFormat{Type: "json_schema", JSONSchema: &openai.JSONSchema{Name: "s", Schema: json.RawMessage(schema), Strict: ptr(true)}}
			}))
			c := r.choices[0]
			total++
			if c.finish != "stop" {
				t.Logf("schema %d seed %d: finish %s after %d tokens: %q", si, seed, c.finish, r.usage.CompletionTokens, short(c.text))
				continue
			}
			stopped++
			var v any
			if err := json.Unmarshal([]byte(c.text), &v); err != nil {
				t.Errorf("schema %d seed %d: output does not parse: %v\n%s", si, seed, err, c.text)
				continue
			}
			if err := validate(sm, v, "$"); err != nil {
				t.Errorf("schema %d seed %d: %v\n%s", si, seed, err, c.text)
			}
			if c.reasoning != "" {
				t.Errorf("schema %d seed %d: reasoning %q under a response format", si, seed, c.reasoning)
			}
		}
	}
	if stopped < total/2 {
		t.Errorf("only %d of %d structured outputs completed", stopped, total)
	}
}

func TestJSONObject(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	ok := 0
	for seed := int64(3); seed <= 5 && ok == 0; seed++ {
		r := mustRun(t, e, chatJob("Give me JSON", func(r *openai.ChatCompletionRequest) {
			r.MaxTokens = ptr(200)
			r.Seed = ptr(seed)
			r.LogitBias = quoteBias(e)
			r.ResponseFormat = &openai.ResponseFormat{Type: "json_object"}
		}))
		c := r.choices[0]
		if c.finish != "stop" {
			t.Logf("seed %d: finish %s: %q", seed, c.finish, short(c.text))
			continue
		}
		ok++
		var v map[string]any
		if err := json.Unmarshal([]byte(c.text), &v); err != nil {
			t.Errorf("seed %d: not a JSON object: %v\n%s", seed, err, c.text)
		}
	}
	if ok == 0 {
		t.Error("no json_object output completed")
	}
}

// TestJSONSchemaNeverTruncated: with a max_tokens that leaves room for the
// shortest document, a rambling sample still ends in a complete, valid
// document; finish_reason says length when the budget forced the close.
func TestJSONSchemaNeverTruncated(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	schema := `{"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","tags"],"additionalProperties":false}`
	var sm map[string]any
	if err := json.Unmarshal([]byte(schema), &sm); err != nil {
		t.Fatal(err)
	}
	// {"name":"","tags":[]} is 21 bytes; every byte is a token.
	lengths := 0
	for _, maxTok := range []int{21, 24, 32, 48} {
		for seed := int64(1); seed <= 3; seed++ {
			r := mustRun(t, e, chatJob("Give me JSON", func(r *openai.ChatCompletionRequest) {
				r.MaxTokens = ptr(maxTok)
				r.Temperature = ptr(1.5)
				r.Seed = ptr(seed)
				r.ResponseFormat = &openai.ResponseFormat{Type: "json_schema", JSONSchema: &openai.JSONSchema{Name: "s", Schema: json.RawMessage(schema), Strict: ptr(true)}}
			}))
			c := r.choices[0]
			if c.finish == "length" {
				lengths++
			}
			if r.usage.CompletionTokens > maxTok {
				t.Errorf("max_tokens %d seed %d: %d tokens", maxTok, seed, r.usage.CompletionTokens)
			}
			var v any
			if err := json.Unmarshal([]byte(c.text), &v); err != nil {
				t.Errorf("max_tokens %d seed %d (finish %s): output does not parse: %v\n%s", maxTok, seed, c.finish, err, c.text)
				continue
			}
			if err := validate(sm, v, "$"); err != nil {
				t.Errorf("max_tokens %d seed %d: %v\n%s", maxTok, seed, err, c.text)
			}
		}
	}
	if lengths == 0 {
		t.Error("no generation reached max_tokens: the test does not exercise the budget")
	}
}

// TestUnenforcedReported: a non-strict schema with a keyword the
// constraint cannot enforce is served, and the choice's first event names
// what was not enforced; strict, the same schema is a 400.
func TestUnenforcedReported(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	schema := []byte(`{"type":"object","properties":{"a":{"$ref":"https://example.com/remote.json"}},"required":["a"]}`)
	req := func(strict bool) *job.Job {
		return chatJob("give json", func(r *openai.ChatCompletionRequest) {
			r.MaxTokens = ptr(24)
			r.ResponseFormat = &openai.ResponseFormat{Type: "json_schema", JSONSchema: &openai.JSONSchema{Name: "s", Strict: ptr(strict), Schema: schema}}
		})
	}
	r := mustRun(t, e, req(false))
	var got []string
	for _, ev := range r.events {
		got = append(got, ev.Unenforced...)
	}
	if len(got) != 1 || !strings.Contains(got[0], "response_format: $ref") || !strings.Contains(got[0], "/properties/a") {
		t.Errorf("unenforced %q, want the remote $ref at /properties/a", got)
	}
	if _, err := run(t, e, req(true)); err == nil {
		t.Error("strict: the unenforceable schema was served")
	}
}
