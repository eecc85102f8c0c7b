// Package template renders a checkpoint's own Jinja chat template into the
// prompt text, byte-identical to Hugging Face transformers'
// apply_chat_template(..., tokenize=False) for the Qwen templates.
//
// Templates are executed by github.com/ardanlabs/jinja, a pure-Go Jinja
// engine built for LLM chat templates. Differences from Python Jinja2 that
// this package corrects or that remain are listed in docs/engine.md, "Chat templates".
package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Template is a compiled chat template with the special tokens the
// tokenizer configuration defines. It is safe for concurrent use.
type Template struct {
	main    *jinja.Template
	toolUse *jinja.Template // the "tool_use" named template, if any
	src     string
	special map[string]string // bos_token, eos_token, pad_token, unk_token
	parts   bool              // main accepts content given as a list of parts
}

// Input is what a template is rendered with.
type Input struct {
	// Messages are OpenAI chat messages as JSON objects; key order is kept
	// (templates that print them, e.g. with tojson, see it).
	Messages []json.RawMessage
	// Tools are OpenAI tool objects ({"type":"function","function":{...}});
	// nil renders without tools.
	Tools []json.RawMessage
	// AddGenerationPrompt appends the assistant header. OpenAI requests
	// default it to true (see ParseRequest).
	AddGenerationPrompt bool
	// ContinueFinalMessage renders the last (assistant) message open, so that
	// generation continues it (vLLM and transformers semantics). It excludes
	// AddGenerationPrompt.
	ContinueFinalMessage bool
	// Kwargs are extra template variables (chat_template_kwargs), such as
	// enable_thinking. They may override the special tokens.
	Kwargs map[string]json.RawMessage
}

// Load reads the chat template of the checkpoint in dir: chat_template.jinja
// if present, else tokenizer_config.json's chat_template (a string, or a list
// of {"name","template"} where "default" is used and "tool_use" serves
// requests with tools, as transformers does). Special tokens come from
// tokenizer_config.json.
func Load(dir string) (*Template, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("load chat template: %w", err)
	}
	special := map[string]string{}
	if err == nil {
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, fmt.Errorf("load chat template: %s: %w", filepath.Join(dir, "tokenizer_config.json"), err)
		}
		var all map[string]json.RawMessage
		_ = json.Unmarshal(raw, &all)
		for _, k := range []string{"bos_token", "eos_token", "pad_token", "unk_token"} {
			if s, ok := tokenString(all[k]); ok {
				special[k] = s
			}
		}
	}

	var main, toolUse string
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		main = string(b)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("load chat template: %w", err)
	} else if len(cfg.ChatTemplate) > 0 && string(cfg.ChatTemplate) != "null" {
		var s string
		if err := json.Unmarshal(cfg.ChatTemplate, &s); err == nil {
			main = s
		} else {
			var named []struct{ Name, Template string }
			if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
				return nil, fmt.Errorf("load chat template: chat_template in %s is neither a string nor a list of named templates", dir)
			}
			for _, n := range named {
				switch n.Name {
				case "default":
					main = n.Template
				case "tool_use":
					toolUse = n.Template
				}
			}
			if main == "" {
				return nil, fmt.Errorf("load chat template: %s has named chat templates but none called \"default\"", dir)
			}
		}
	}
	if main == "" {
		return nil, fmt.Errorf("load chat template: no chat_template.jinja or chat_template in tokenizer_config.json in %s", dir)
	}
	t, err := New(main, special)
	if err != nil {
		return nil, err
	}
	if toolUse != "" {
		toolUse = strings.TrimSuffix(strings.TrimSuffix(toolUse, "\n"), "\r")
		if t.toolUse, err = jinja.Compile(toolUse); err != nil {
			return nil, fmt.Errorf("compile tool_use chat template: %w", err)
		}
	}
	return t, nil
}

// New compiles template source src; special maps bos_token etc. to their text.
func New(src string, special map[string]string) (*Template, error) {
	// Jinja2 drops one trailing newline of the source (keep_trailing_newline
	// is off in transformers); the Go engine keeps it.
	src = strings.TrimSuffix(src, "\n")
	src = strings.TrimSuffix(src, "\r")
	m, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("compile chat template: %w", err)
	}
	t := &Template{main: m, src: src, special: map[string]string{}}
	for k, v := range special {
		t.special[k] = v
	}
	t.parts = t.probeParts()
	return t, nil
}

// Source returns the template text.
func (t *Template) Source() string { return t.src }

// Special returns the text of a special token variable ("eos_token", ...).
func (t *Template) Special(name string) (string, bool) {
	s, ok := t.special[name]
	return s, ok
}

// AcceptsContentParts reports whether the template renders a user message
// whose content is a list of text parts. Templates that do not (Qwen2.5,
// QwQ, Qwen3-Coder) need the parts joined first; ParseRequest does that.
func (t *Template) AcceptsContentParts() bool { return t.parts }

func (t *Template) probeParts() bool {
	const probe = "\x00macpool-probe\x00"
	out, err := t.Render(Input{
		Messages:            []json.RawMessage{json.RawMessage(`{"role":"user","content":[{"type":"text","text":"` + "\\u0000macpool-probe\\u0000" + `"}]}`)},
		AddGenerationPrompt: true,
	})
	return err == nil && strings.Contains(out, probe)
}

// Render renders in. Errors raised by the template (raise_exception, a
// method called on the wrong type, ...) are returned, as transformers raises
// them.
func (t *Template) Render(in Input) (string, error) {
	if in.ContinueFinalMessage && in.AddGenerationPrompt {
		return "", errors.New("continue_final_message and add_generation_prompt cannot both be set")
	}
	if len(in.Messages) == 0 {
		return "", errors.New("messages must not be empty")
	}
	data := make(map[string]jinja.Value, 8+len(in.Kwargs))
	for k, v := range t.special {
		data[k] = jinja.NewString(v)
	}
	msgs := make([]jinja.Value, len(in.Messages))
	for i, m := range in.Messages {
		v, err := FromJSON(m)
		if err != nil {
			return "", fmt.Errorf("message %d: %w", i, err)
		}
		if !v.IsDict() {
			return "", fmt.Errorf("message %d is not a JSON object", i)
		}
		msgs[i] = v
	}
	data["messages"] = jinja.NewList(msgs)
	data["tools"] = jinja.None() // transformers passes tools=None
	tmpl := t.main
	if len(in.Tools) > 0 {
		tools := make([]jinja.Value, len(in.Tools))
		for i, tj := range in.Tools {
			v, err := FromJSON(tj)
			if err != nil {
				return "", fmt.Errorf("tool %d: %w", i, err)
			}
			tools[i] = v
		}
		data["tools"] = jinja.NewList(tools)
		if t.toolUse != nil {
			tmpl = t.toolUse
		}
	}
	data["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	for k, raw := range in.Kwargs {
		switch k {
		case "messages", "tools", "add_generation_prompt", "documents":
			return "", fmt.Errorf("chat_template_kwargs may not set %s", k)
		}
		v, err := FromJSON(raw)
		if err != nil {
			return "", fmt.Errorf("chat_template_kwargs %s: %w", k, err)
		}
		data[k] = v
	}
	out, err := tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("render chat template: %w", err)
	}
	if err := checkStringifiedParts(out, msgs); err != nil {
		return "", err
	}
	if in.ContinueFinalMessage {
		return continueFinal(out, msgs[len(msgs)-1])
	}
	return out, nil
}

// checkStringifiedParts stands in for a Python TypeError that the Go engine
// does not raise: `'...' + message.content` with list content fails in
// transformers ("can only concatenate str (not "list") to str"), while the
// engine concatenates the list's repr. No chat template prints the repr of a
// content list on purpose, so finding it in the output means the template
// did that concatenation.
func checkStringifiedParts(out string, msgs []jinja.Value) error {
	for i, m := range msgs {
		c, ok := m.AsDict().Get("content")
		if !ok || !c.IsList() || c.AsList().Len() == 0 {
			continue
		}
		if strings.Contains(out, c.String()) {
			return fmt.Errorf("render chat template: message %d: the template uses list content as a string (transformers raises TypeError: can only concatenate str (not \"list\") to str)", i)
		}
	}
	return nil
}

// continueFinal cuts the rendering right after the final message's content,
// as transformers does for continue_final_message.
func continueFinal(out string, last jinja.Value) (string, error) {
	c, _ := last.AsDict().Get("content")
	var final string
	switch {
	case c.IsString():
		final = c.AsString()
	case c.IsList():
		found := false
		items := c.AsList().Items
		for i := len(items) - 1; i >= 0 && !found; i-- {
			if items[i].IsDict() {
				if tx, ok := items[i].AsDict().Get("text"); ok && tx.IsString() {
					final, found = tx.AsString(), true
				}
			}
		}
		if !found {
			return "", errors.New("continue_final_message is set but the final message has no text to continue")
		}
	default:
		return "", errors.New("continue_final_message is set but the final message has no content")
	}
	trimmed := strings.TrimSpace(final)
	loc := strings.LastIndex(out, trimmed)
	if loc < 0 {
		return "", errors.New("continue_final_message is set but the final message does not appear in the rendered chat")
	}
	left := strings.TrimLeftFunc(final, isPySpace)
	if strings.HasPrefix(out[loc:], left) && out[loc:loc+len(left)] == final {
		return out[:loc+len(left)], nil
	}
	return out[:loc+len(trimmed)], nil
}

func isPySpace(r rune) bool {
	return strings.ContainsRune(" \t\n\r\v\f", r) || r == 0x1c || r == 0x1d || r == 0x1e || r == 0x1f || r == 0x85 || r == 0xa0
}

// tokenString reads a special token from tokenizer_config.json: a string or
// an AddedToken object {"content": ...}.
func tokenString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Content != nil {
		return *obj.Content, true
	}
	return "", false
}

// FromJSON converts a JSON document to a template value, keeping object key
// order and the int/float distinction Python's json.loads makes.
func FromJSON(raw json.RawMessage) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := fromDecoder(dec)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("bad JSON: %w", err)
	}
	if _, err := dec.Token(); err == nil {
		return jinja.Undefined(), errors.New("bad JSON: data after the value")
	}
	return v, nil
}

func fromDecoder(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				v, err := fromDecoder(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		case '[':
			items := []jinja.Value{}
			for dec.More() {
				v, err := fromDecoder(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		}
		return jinja.Undefined(), fmt.Errorf("unexpected %v", t)
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return jinja.NewInt(i), nil
		}
		f, err := t.Float64()
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewFloat(f), nil
	case bool:
		return jinja.NewBool(t), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("unexpected token %v", tok)
}
