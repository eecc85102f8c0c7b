package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ParseRequest reads the template-relevant fields of an OpenAI
// chat-completions request body: messages, tools, add_generation_prompt
// (default true), continue_final_message and chat_template_kwargs. Messages
// keep their JSON as sent, except that assistant tool-call arguments given as
// a JSON string are decoded to an object, as vLLM does, because templates
// iterate over them (`arguments|items`).
func ParseRequest(body []byte) (Input, error) {
	var req struct {
		Messages             []json.RawMessage          `json:"messages"`
		Tools                []json.RawMessage          `json:"tools"`
		AddGenerationPrompt  *bool                      `json:"add_generation_prompt"`
		ContinueFinalMessage bool                       `json:"continue_final_message"`
		ChatTemplateKwargs   map[string]json.RawMessage `json:"chat_template_kwargs"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return Input{}, fmt.Errorf("parse chat request: %w", err)
	}
	if len(req.Messages) == 0 {
		return Input{}, errors.New("parse chat request: messages must not be empty")
	}
	in := Input{
		Messages:             req.Messages,
		Tools:                req.Tools,
		AddGenerationPrompt:  req.AddGenerationPrompt == nil || *req.AddGenerationPrompt,
		ContinueFinalMessage: req.ContinueFinalMessage,
		Kwargs:               req.ChatTemplateKwargs,
	}
	if in.ContinueFinalMessage && req.AddGenerationPrompt == nil {
		in.AddGenerationPrompt = false
	}
	for i, m := range in.Messages {
		fixed, err := decodeToolArguments(m)
		if err != nil {
			return Input{}, fmt.Errorf("parse chat request: message %d: %w", i, err)
		}
		in.Messages[i] = fixed
	}
	return in, nil
}

// RenderRequest renders an OpenAI chat-completions request body. Content
// given as a list of text parts is joined with "\n" first when the template
// cannot render such lists (vLLM's "string" content format); other part
// types are rejected, this engine being text-only.
func (t *Template) RenderRequest(body []byte) (string, error) {
	in, err := ParseRequest(body)
	if err != nil {
		return "", err
	}
	if !t.parts {
		for i, m := range in.Messages {
			if in.Messages[i], err = stringContent(m); err != nil {
				return "", fmt.Errorf("message %d: %w", i, err)
			}
		}
	}
	return t.Render(in)
}

// message fields are rewritten through an ordered decode/encode so that key
// order survives.
type orderedObject struct {
	keys []string
	vals map[string]json.RawMessage
}

func decodeObject(raw json.RawMessage) (*orderedObject, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	o := &orderedObject{vals: map[string]json.RawMessage{}}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		key := k.(string)
		if _, dup := o.vals[key]; !dup {
			o.keys = append(o.keys, key)
		}
		o.vals[key] = v
	}
	return o, nil
}

func (o *orderedObject) encode() json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(o.vals[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

func decodeToolArguments(m json.RawMessage) (json.RawMessage, error) {
	msg, err := decodeObject(m)
	if err != nil {
		return nil, err
	}
	calls, ok := msg.vals["tool_calls"]
	if !ok {
		return m, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(calls, &list) != nil {
		return m, nil
	}
	changed := false
	for i, c := range list {
		call, err := decodeObject(c)
		if err != nil {
			return nil, fmt.Errorf("tool_calls[%d]: %w", i, err)
		}
		fn, ok := call.vals["function"]
		if !ok {
			continue
		}
		f, err := decodeObject(fn)
		if err != nil {
			return nil, fmt.Errorf("tool_calls[%d].function: %w", i, err)
		}
		args, ok := f.vals["arguments"]
		var s string
		if !ok || json.Unmarshal(args, &s) != nil {
			continue
		}
		if strings.TrimSpace(s) == "" {
			s = "{}"
		}
		if !json.Valid([]byte(s)) {
			return nil, fmt.Errorf("tool_calls[%d].function.arguments is not valid JSON", i)
		}
		f.vals["arguments"] = json.RawMessage(s)
		call.vals["function"] = f.encode()
		list[i] = call.encode()
		changed = true
	}
	if !changed {
		return m, nil
	}
	nb, _ := json.Marshal(list)
	msg.vals["tool_calls"] = nb
	return msg.encode(), nil
}

// stringContent gives a message string content for templates that only
// render strings, as vLLM's "string" content format does: text parts joined
// with "\n", null or missing content as "".
func stringContent(m json.RawMessage) (json.RawMessage, error) {
	msg, err := decodeObject(m)
	if err != nil {
		return nil, err
	}
	c, ok := msg.vals["content"]
	c = bytes.TrimSpace(c)
	if !ok || string(c) == "null" {
		if !ok {
			msg.keys = append(msg.keys, "content")
		}
		msg.vals["content"] = json.RawMessage(`""`)
		return msg.encode(), nil
	}
	if len(c) == 0 || c[0] != '[' {
		return m, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(c, &parts); err != nil {
		return nil, fmt.Errorf("content: %w", err)
	}
	texts := make([]string, 0, len(parts))
	for i, p := range parts {
		if p.Type != "text" && p.Type != "" || p.Text == nil {
			return nil, fmt.Errorf("content part %d: type %q is not supported (text only)", i, p.Type)
		}
		texts = append(texts, *p.Text)
	}
	js, _ := json.Marshal(strings.Join(texts, "\n"))
	msg.vals["content"] = js
	return msg.encode(), nil
}
