package toolcall

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

var weatherTools = []Tool{
	{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{
		"city":{"type":"string"},"days":{"type":"integer"},"temp":{"type":"number"},
		"metric":{"type":"boolean"},"opts":{"type":"object"},"tags":{"type":"array","items":{"type":"string"}},
		"maybe":{"type":["integer","null"]},"either":{"anyOf":[{"type":"integer"},{"type":"string"}]},
		"unit":{"enum":["c","f"]}}}`)},
	{Name: "noop"},
}

func seqIDs(i int) string { return fmt.Sprintf("call_%d", i) }

func chunkings(s string) [][]string {
	var chars, toks []string
	for _, r := range s {
		chars = append(chars, string(r))
	}
	for i, n := 0, 0; i < len(s); i += n {
		n = min(1+(i*5+2)%6, len(s)-i)
		toks = append(toks, s[i:i+n])
	}
	return [][]string{chars, toks, {s}}
}

func feed(chunks []string) (string, []Call, []CallDelta) {
	return feedOpt(chunks, Options{NewID: seqIDs})
}

func feedOpt(chunks []string, opt Options) (string, []Call, []CallDelta) {
	p := NewParser(weatherTools, opt)
	var content string
	var deltas []CallDelta
	for _, c := range append(chunks, "") {
		var d Delta
		if c == "" {
			d = p.Flush()
		} else {
			d = p.Add(c)
		}
		content += d.Content
		deltas = append(deltas, d.Calls...)
	}
	return content, Merge(deltas), deltas
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		content string
		calls   []Call
	}{
		{"no call", "Just text.", "Just text.", nil},
		{"json", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			"", []Call{{"call_0", "get_weather", `{"city": "Paris"}`}}},
		{"json with text and two calls",
			"Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": {\"a\": [1, 2]}}}\n</tool_call>\n<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>",
			"Let me check.", []Call{{"call_0", "get_weather", `{"city": "Paris", "n": {"a": [1, 2]}}`}, {"call_1", "noop", `{}`}}},
		{"json arguments before name", "<tool_call>\n{\"arguments\": {\"x\": 1}, \"name\": \"noop\"}\n</tool_call>",
			"", []Call{{"call_0", "noop", `{"x": 1}`}}},
		{"json string arguments", "<tool_call>\n{\"arguments\": \"{\\\"x\\\": 1}\", \"name\": \"noop\"}\n</tool_call>",
			"", []Call{{"call_0", "noop", `{"x": 1}`}}},
		{"json missing close tag", "<tool_call>\n{\"name\": \"noop\", \"arguments\": {\"a\": \"}\"}}\n",
			"", []Call{{"call_0", "noop", `{"a": "}"}`}}},
		{"json brace in string", "<tool_call>\n{\"name\": \"noop\", \"arguments\": {\"a\": \"} </tool\"}}\n</tool_call> after",
			"after", []Call{{"call_0", "noop", `{"a": "} </tool"}`}}},
		{"xml typed", "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=temp>\n21.5\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=opts>\n{\"a\":1}\n</parameter>\n<parameter=tags>\n[\"x\",\"y\"]\n</parameter>\n</function>\n</tool_call>",
			"", []Call{{"call_0", "get_weather", `{"city": "New York", "days": 3, "temp": 21.5, "metric": true, "opts": {"a": 1}, "tags": ["x", "y"]}`}}},
		{"xml multiline string and text before", "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nline1\nline2\n\n</parameter>\n</function>\n</tool_call>",
			"Sure.", []Call{{"call_0", "get_weather", `{"city": "line1\nline2\n"}`}}},
		{"xml coercion fallbacks", "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n<parameter=maybe>\nnull\n</parameter>\n<parameter=either>\nabc\n</parameter>\n<parameter=unit>\nc\n</parameter>\n<parameter=extra>\n5\n</parameter>\n<parameter=metric>\nyes\n</parameter>\n</function>\n</tool_call>",
			"", []Call{{"call_0", "get_weather", `{"days": "three", "maybe": null, "either": "abc", "unit": "c", "extra": "5", "metric": "yes"}`}}},
		{"xml integer from float spelling", "<tool_call>\n<function=get_weather>\n<parameter=days>\n4.0\n</parameter>\n<parameter=either>\n7\n</parameter>\n</function>\n</tool_call>",
			"", []Call{{"call_0", "get_weather", `{"days": 4, "either": 7}`}}},
		{"xml no params", "<tool_call>\n<function=noop>\n</function>\n</tool_call>", "", []Call{{"call_0", "noop", `{}`}}},
		{"xml unknown tool stays strings", "<tool_call>\n<function=other>\n<parameter=n>\n1\n</parameter>\n</function>\n</tool_call>",
			"", []Call{{"call_0", "other", `{"n": "1"}`}}},
		{"xml missing end tags", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n<parameter=days>\n2",
			"", []Call{{"call_0", "get_weather", `{"city": "Paris", "days": 2}`}}},
		{"xml html chars", "<tool_call>\n<function=noop>\n<parameter=q>\na < b && c\n</parameter>\n</function>\n</tool_call>",
			"", []Call{{"call_0", "noop", `{"q": "a < b && c"}`}}},
		// Malformed calls stay content.
		{"malformed json", "<tool_call>\n{not json}\n</tool_call> tail", "<tool_call>\n{not json}\n</tool_call> tail", nil},
		{"no name", "<tool_call>\n{\"arguments\": {}}\n</tool_call>", "<tool_call>\n{\"arguments\": {}}\n</tool_call>", nil},
		{"unknown shape", "<tool_call>hello</tool_call>", "<tool_call>hello</tool_call>", nil},
		{"bad function line", "<tool_call>\n<function=\nx</tool_call>", "<tool_call>\n<function=\nx</tool_call>", nil},
		{"open tag only", "text <tool_call>", "text <tool_call>", nil},
		{"partial tag at end", "text <tool_ca", "text <tool_ca", nil},
		{"malformed then good",
			"<tool_call>oops</tool_call>\n<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>",
			"<tool_call>oops</tool_call>", []Call{{"call_0", "noop", `{}`}}},
		{"text after call", "<tool_call>\n<function=noop>\n</function>\n</tool_call>\n\nDone.", "Done.", []Call{{"call_0", "noop", `{}`}}},
		{"trailing whitespace kept without call", "a  \n", "a  \n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content, calls := Parse(tc.in, weatherTools, Options{NewID: seqIDs})
			if content != tc.content {
				t.Errorf("content %q, want %q", content, tc.content)
			}
			if !reflect.DeepEqual(calls, tc.calls) {
				t.Errorf("calls %+v, want %+v", calls, tc.calls)
			}
			for _, c := range calls {
				if !json.Valid([]byte(c.Arguments)) {
					t.Errorf("arguments %q are not JSON", c.Arguments)
				}
			}
			for _, ch := range chunkings(tc.in) {
				c2, calls2, deltas := feed(ch)
				if c2 != content || !reflect.DeepEqual(calls2, calls) {
					t.Errorf("chunked %q: (%q, %+v), one-shot (%q, %+v)", ch, c2, calls2, content, calls)
				}
				// Each call's first delta carries id and name.
				seen := map[int]bool{}
				for _, d := range deltas {
					if !seen[d.Index] && (d.ID == "" || d.Name == "") {
						t.Errorf("first delta of call %d lacks id or name: %+v", d.Index, d)
					}
					seen[d.Index] = true
				}
			}
		})
	}
}

func TestBareXMLCalls(t *testing.T) {
	opt := Options{NewID: seqIDs, BareXMLCalls: true}
	for _, tc := range []struct {
		name    string
		in      string
		content string
		calls   []Call
	}{
		{"bare", "Sure.\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n</function>",
			"Sure.", []Call{{"call_0", "get_weather", `{"days": 2}`}}},
		{"bare then wrapped", "<function=noop>\n</function>\n<tool_call>\n<function=noop>\n</function>\n</tool_call>",
			"", []Call{{"call_0", "noop", `{}`}, {"call_1", "noop", `{}`}}},
		{"bad bare header stays content", "a <function=\nb", "a <function=\nb", nil},
		{"partial bare tag", "x <funct", "x <funct", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content, calls := Parse(tc.in, weatherTools, opt)
			if content != tc.content || !reflect.DeepEqual(calls, tc.calls) {
				t.Errorf("got (%q, %+v), want (%q, %+v)", content, calls, tc.content, tc.calls)
			}
			for _, ch := range chunkings(tc.in) {
				c2, calls2, _ := feedOpt(ch, opt)
				if c2 != content || !reflect.DeepEqual(calls2, calls) {
					t.Errorf("chunked %q: (%q, %+v), one-shot (%q, %+v)", ch, c2, calls2, content, calls)
				}
			}
		})
	}
	// Off by default: the text is content.
	if content, calls := Parse("<function=noop>\n</function>", nil, Options{}); content != "<function=noop>\n</function>" || calls != nil {
		t.Errorf("without BareXMLCalls: (%q, %+v)", content, calls)
	}
}

func TestStreamingOrder(t *testing.T) {
	p := NewParser(weatherTools, Options{NewID: seqIDs})
	d := p.Add("Hi <tool_call>\n<function=get_weather>\n")
	if d.Content != "Hi" || len(d.Calls) != 1 || d.Calls[0].Name != "get_weather" || d.Calls[0].Arguments != "" {
		t.Fatalf("after the function line: %+v, want content and the call's id+name only", d)
	}
	d = p.Add("<parameter=city>\nParis\n</parameter>\n")
	if len(d.Calls) != 1 || d.Calls[0].Arguments != `{"city": "Paris"` || d.Calls[0].ID != "" {
		t.Fatalf("after a parameter: %+v, want an arguments delta", d)
	}
	d = p.Add("</function>\n</tool_call>")
	if len(d.Calls) != 1 || d.Calls[0].Arguments != "}" {
		t.Fatalf("at the end: %+v", d)
	}
	// JSON arguments stream before the call is closed.
	p = NewParser(nil, Options{NewID: seqIDs})
	d = p.Add("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"text\": \"a long")
	if len(d.Calls) != 1 || d.Calls[0].Name != "f" || d.Calls[0].Arguments != `{"text": "a long` {
		t.Fatalf("json streaming: %+v", d)
	}
}

func TestToolsFromRequest(t *testing.T) {
	tools := ToolsFromRequest([]json.RawMessage{
		json.RawMessage(`{"type":"function","function":{"name":"a","parameters":{"type":"object"}}}`),
		json.RawMessage(`{"type":"function","function":{}}`),
		json.RawMessage(`garbage`),
	})
	if len(tools) != 1 || tools[0].Name != "a" || string(tools[0].Parameters) != `{"type":"object"}` {
		t.Errorf("got %+v", tools)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"<tool_call>\n{\"name\": \"noop\", \"arguments\": {\"a\": 1}}\n</tool_call>",
		"x<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>y",
		"<tool_call><tool_call></tool_call>", "<tool_call>\n{\"name\"", "<tool_call>\n<function=a>\n<parameter=",
	} {
		f.Add(s, uint8(1))
		f.Add(s, uint8(4))
		f.Add(s, uint8(0x83))
	}
	f.Fuzz(func(t *testing.T, s string, step uint8) {
		opt := Options{NewID: seqIDs, BareXMLCalls: step&0x80 != 0}
		content, calls := Parse(s, weatherTools, opt)
		n := int(step%9) + 1
		var chunks []string
		for i := 0; i < len(s); i += n {
			chunks = append(chunks, s[i:min(i+n, len(s))])
		}
		c2, calls2, _ := feedOpt(chunks, opt)
		if c2 != content || !reflect.DeepEqual(calls, calls2) {
			t.Fatalf("chunks of %d: (%q, %+v), one-shot (%q, %+v)", n, c2, calls2, content, calls)
		}
	})
}
