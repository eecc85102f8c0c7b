// Package toolcall turns Qwen tool-call markup in generated content into
// OpenAI tool_calls, incrementally (streaming deltas) or in one shot.
//
// Two formats are recognised inside <tool_call>…</tool_call>, chosen per call
// by its first character:
//
//   - Qwen2.5/QwQ/Qwen3 JSON: {"name": "f", "arguments": {...}}
//   - Qwen3-Coder/Qwen3.5 XML: <function=f> <parameter=k>v</parameter> … </function>,
//     each value coerced by the tool's JSON Schema (integer, number, boolean,
//     object, array, string).
//
// Text outside calls is content. A call whose opening cannot be recognised
// (unknown shape, bad JSON) is left as content, never an error. Once a call's
// name is recognised it is committed: its id and name are emitted, then its
// arguments as they complete, and later damage is tolerated (the call is
// closed at the end of the text). Decisions depend only on the text, never on
// how it was chunked, so Parse and any feeding of a Parser agree.
package toolcall

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
)

const (
	openTag  = "<tool_call>"
	closeTag = "</tool_call>"
	bareTag  = "<function="
)

// Tool is what the parser needs to know about a tool offered in the request.
type Tool struct {
	Name       string
	Parameters json.RawMessage // JSON Schema of the arguments object; may be nil
}

// ToolsFromRequest extracts Tools from OpenAI tool objects
// ({"type":"function","function":{"name":…,"parameters":…}}).
func ToolsFromRequest(tools []json.RawMessage) []Tool {
	var out []Tool
	for _, raw := range tools {
		var t struct {
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &t) == nil && t.Function.Name != "" {
			out = append(out, Tool{Name: t.Function.Name, Parameters: t.Function.Parameters})
		}
	}
	return out
}

// Call is a complete tool call.
type Call struct {
	ID        string
	Name      string
	Arguments string // JSON text of the arguments object
}

// CallDelta is one streaming piece of a call. The first piece of call Index
// carries ID and Name; later ones carry Arguments fragments, which
// concatenate to the call's Arguments.
type CallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
}

// Delta is what one Add produced.
type Delta struct {
	Content string
	Calls   []CallDelta
}

// Options configure a Parser.
type Options struct {
	// NewID returns the id of the i-th call; nil gives "call_" + 24 random hex digits.
	NewID func(i int) string
	// BareXMLCalls also takes <function=…> outside <tool_call> as a call, as
	// vLLM's qwen3_coder parser does: Qwen3-Coder and Qwen3.5 sometimes omit
	// the wrapper. Leave it off for the JSON-format models.
	BareXMLCalls bool
}

type state int

const (
	stText      state = iota // content
	stOpen                   // after <tool_call>, deciding the format
	stJSONArgs               // streaming the raw "arguments" value of a JSON call
	stJSONWhole              // JSON call without the usual prefix: buffered whole
	stXMLBody                // inside <function=…>, between parameters
	stXMLParam               // inside <parameter=…>
	stXMLEnd                 // after </function>, expecting </tool_call>
)

// Parser parses one generation's content incrementally. Not safe for
// concurrent use.
type Parser struct {
	tools   map[string]*schema
	newID   func(int) string
	bareOK  bool // Options.BareXMLCalls
	bare    bool // the current call has no <tool_call> wrapper
	st      state
	pending string // text not yet resolved
	wsHeld  string // whitespace held back at the end of content (dropped if a call follows)
	wsCall  string // the whitespace dropped before the current <tool_call>, restored if it is abandoned
	ncalls  int    // calls started
	nparams int    // parameters emitted in the current XML call
	param   string // current XML parameter name
	fname   string // current call's function name
	done    bool   // a call just ended: drop whitespace that follows
}

// NewParser returns a Parser for a request offering tools (which may be
// empty: calls are parsed anyway, XML values then stay strings).
func NewParser(tools []Tool, opt Options) *Parser {
	p := &Parser{tools: map[string]*schema{}, newID: opt.NewID, bareOK: opt.BareXMLCalls}
	for _, t := range tools {
		p.tools[t.Name] = parseSchema(t.Parameters)
	}
	if p.newID == nil {
		p.newID = func(int) string {
			var b [12]byte
			_, _ = rand.Read(b[:])
			return "call_" + hex.EncodeToString(b[:])
		}
	}
	return p
}

// Parse is the one-shot form: content outside calls and the calls.
func Parse(text string, tools []Tool, opt Options) (content string, calls []Call) {
	p := NewParser(tools, opt)
	d := p.Add(text)
	f := p.Flush()
	return d.Content + f.Content, Merge(append(d.Calls, f.Calls...))
}

// Merge assembles streaming deltas into complete calls.
func Merge(deltas []CallDelta) []Call {
	var calls []Call
	for _, d := range deltas {
		for len(calls) <= d.Index {
			calls = append(calls, Call{})
		}
		c := &calls[d.Index]
		if d.ID != "" {
			c.ID = d.ID
		}
		if d.Name != "" {
			c.Name = d.Name
		}
		c.Arguments += d.Arguments
	}
	return calls
}

// Add consumes the next piece of content text.
func (p *Parser) Add(text string) Delta {
	p.pending += text
	var d Delta
	p.run(&d, false)
	return d
}

// Flush resolves held-back text at the end of the generation: an open call
// is closed, a partial tag becomes content.
func (p *Parser) Flush() Delta {
	var d Delta
	p.run(&d, true)
	return d
}

func (p *Parser) run(d *Delta, final bool) {
	for p.stepOnce(d, final) {
	}
}

// stepOnce advances the state machine; it returns false when it needs more text.
func (p *Parser) stepOnce(d *Delta, final bool) bool {
	switch p.st {
	case stText:
		if p.done {
			s := strings.TrimLeft(p.pending, " \t\r\n")
			if s == "" && !final {
				p.pending = ""
				return false
			}
			p.pending = s
			p.done = false
		}
		i := strings.Index(p.pending, openTag)
		bare := false
		if p.bareOK {
			if j := strings.Index(p.pending, bareTag); j >= 0 && (i < 0 || j < i) {
				i, bare = j, true
			}
		}
		if i >= 0 {
			p.content(d, p.pending[:i], true)
			p.wsCall, p.wsHeld = p.wsHeld, "" // whitespace before a call is dropped
			p.bare = bare
			if bare {
				p.pending = p.pending[i:] // stOpen reads the <function= itself
			} else {
				p.pending = p.pending[i+len(openTag):]
			}
			p.st = stOpen
			return true
		}
		if final {
			p.content(d, p.pending, false)
			d.Content += p.wsHeld
			p.wsHeld, p.pending = "", ""
			return false
		}
		keep := partialSuffix(p.pending, openTag)
		if p.bareOK {
			keep = max(keep, partialSuffix(p.pending, bareTag))
		}
		p.content(d, p.pending[:len(p.pending)-keep], true)
		p.pending = p.pending[len(p.pending)-keep:]
		return false

	case stOpen:
		s := strings.TrimLeft(p.pending, " \t\r\n")
		if s == "" {
			if final {
				p.abandon(d)
				return true
			}
			return false
		}
		switch {
		case s[0] == '{':
			name, rest, ok, need := jsonHeader(s)
			if need && !final {
				return false
			}
			if ok {
				p.startCall(d, name)
				p.pending = rest
				p.st = stJSONArgs
				return true
			}
			p.st = stJSONWhole
			return true
		case strings.HasPrefix(s, bareTag):
			j := strings.IndexAny(s, ">\n")
			if j < 0 {
				if final {
					p.abandon(d)
					return true
				}
				return false
			}
			name := strings.TrimSpace(s[len(bareTag):j])
			if s[j] != '>' || name == "" {
				p.abandon(d)
				return true
			}
			p.startCall(d, name)
			p.pending = s[j+1:]
			p.st = stXMLBody
			return true
		case strings.HasPrefix(bareTag, s) && !final:
			return false
		}
		p.abandon(d)
		return true

	case stJSONArgs:
		// The arguments value runs up to "}" (closing the outer object),
		// optional whitespace and </tool_call>.
		if i := strings.Index(p.pending, closeTag); i >= 0 || final {
			body := p.pending
			rest := ""
			if i >= 0 {
				body, rest = p.pending[:i], p.pending[i+len(closeTag):]
			}
			body = strings.TrimRight(body, " \t\r\n")
			body = strings.TrimSuffix(body, "}")
			body = strings.TrimRight(body, " \t\r\n")
			p.args(d, body)
			p.pending = rest
			p.endCall()
			return true
		}
		n := p.jsonArgsSafe()
		p.args(d, p.pending[:n])
		p.pending = p.pending[n:]
		return false

	case stJSONWhole:
		i := strings.Index(p.pending, closeTag)
		if i < 0 && !final {
			return false
		}
		body, rest := p.pending, ""
		if i >= 0 {
			body, rest = p.pending[:i], p.pending[i+len(closeTag):]
		}
		var call struct {
			Name       string          `json:"name"`
			Arguments  json.RawMessage `json:"arguments"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(body)), &call) != nil || call.Name == "" {
			p.abandon(d)
			return true
		}
		args := call.Arguments
		if args == nil {
			args = call.Parameters
		}
		if args == nil || string(args) == "null" {
			args = json.RawMessage("{}")
		}
		// Arguments given as a JSON string holding JSON are unwrapped.
		var s string
		if json.Unmarshal(args, &s) == nil && json.Valid([]byte(s)) {
			args = json.RawMessage(s)
		}
		p.startCall(d, call.Name)
		p.args(d, string(args))
		p.pending = rest
		p.endCall()
		return true

	case stXMLBody:
		s := strings.TrimLeft(p.pending, " \t\r\n")
		switch {
		case strings.HasPrefix(s, "<parameter="):
			j := strings.IndexByte(s, '>')
			if j >= 0 {
				p.param = strings.TrimSpace(s[len("<parameter="):j])
				p.pending = s[j+1:]
				p.st = stXMLParam
				return true
			}
			if !final {
				p.pending = s
				return false
			}
			p.closeArgs(d)
			p.pending = ""
			p.endCall()
			return true
		case strings.HasPrefix(s, "</function>"):
			p.closeArgs(d)
			p.pending = s[len("</function>"):]
			p.st = stXMLEnd
			return true
		case strings.HasPrefix(s, closeTag):
			p.closeArgs(d)
			p.pending = s[len(closeTag):]
			p.endCall()
			return true
		case !final && (strings.HasPrefix("<parameter=", s) || strings.HasPrefix("</function>", s) || strings.HasPrefix(closeTag, s)):
			p.pending = s
			return false
		}
		// Anything else inside a function is damage: skip to the end of
		// the call (or of the text).
		i := strings.Index(s, closeTag)
		if i < 0 && !final {
			p.pending = s
			return false
		}
		p.closeArgs(d)
		p.pending = ""
		if i >= 0 {
			p.pending = s[i+len(closeTag):]
		}
		p.endCall()
		return true

	case stXMLParam:
		// The value ends at the earliest of </parameter> or, when that is
		// missing, the next parameter, </function> or </tool_call>. Taking
		// the earliest keeps the result independent of chunking.
		i, end := -1, 0
		for _, e := range []struct {
			tag  string
			skip bool
		}{{"</parameter>", true}, {"\n<parameter=", false}, {"\n</function>", false}, {closeTag, false}} {
			if k := strings.Index(p.pending, e.tag); k >= 0 && (i < 0 || k < i) {
				i, end = k, 0
				if e.skip {
					end = len(e.tag)
				}
			}
		}
		if i < 0 && !final {
			return false
		}
		val, rest := p.pending, ""
		if i >= 0 {
			val, rest = p.pending[:i], p.pending[i+end:]
		}
		val = strings.TrimPrefix(val, "\n")
		val = strings.TrimSuffix(val, "\n")
		p.xmlParam(d, p.param, val)
		p.pending = rest
		p.st = stXMLBody
		return true

	case stXMLEnd:
		s := strings.TrimLeft(p.pending, " \t\r\n")
		if strings.HasPrefix(s, closeTag) {
			p.pending = s[len(closeTag):]
			p.endCall()
			return true
		}
		if !final && strings.HasPrefix(closeTag, s) {
			p.pending = s
			return false
		}
		// Missing </tool_call>: the call is over anyway.
		p.pending = s
		p.endCall()
		return true
	}
	return false
}

// content emits text as content. When hold, trailing whitespace is kept back
// (a following call drops it; other text releases it).
func (p *Parser) content(d *Delta, s string, hold bool) {
	if s == "" {
		return
	}
	body := s
	if hold {
		body = strings.TrimRight(s, " \t\r\n")
	}
	if body != "" {
		d.Content += p.wsHeld + body
		p.wsHeld = ""
	}
	p.wsHeld += s[len(body):]
}

// abandon turns an unrecognised <tool_call> opening back into content; what
// followed the tag is still pending and is read as content (it may hold
// another <tool_call>).
func (p *Parser) abandon(d *Delta) {
	p.wsHeld = p.wsCall
	if p.bare {
		p.content(d, bareTag, true)
		p.pending = p.pending[len(bareTag):]
	} else {
		p.content(d, openTag, true)
	}
	p.st = stText
}

func (p *Parser) startCall(d *Delta, name string) {
	p.fname = name
	p.nparams = 0
	d.Calls = append(d.Calls, CallDelta{Index: p.ncalls, ID: p.newID(p.ncalls), Name: name})
	p.ncalls++
}

func (p *Parser) args(d *Delta, s string) {
	if s == "" {
		return
	}
	i := p.ncalls - 1
	if n := len(d.Calls); n > 0 && d.Calls[n-1].Index == i {
		d.Calls[n-1].Arguments += s
		return
	}
	d.Calls = append(d.Calls, CallDelta{Index: i, Arguments: s})
}

func (p *Parser) endCall() {
	p.st = stText
	p.done = true
}

// closeArgs ends the arguments object of an XML call.
func (p *Parser) closeArgs(d *Delta) {
	if p.nparams == 0 {
		p.args(d, "{}")
	} else {
		p.args(d, "}")
	}
}

func (p *Parser) xmlParam(d *Delta, name, val string) {
	var buf bytes.Buffer
	if p.nparams == 0 {
		buf.WriteByte('{')
	} else {
		buf.WriteString(", ")
	}
	buf.Write(marshal(name))
	buf.WriteString(": ")
	buf.Write(p.tools[p.fname].coerce(name, val))
	p.args(d, buf.String())
	p.nparams++
}

// jsonArgsSafe returns how much of pending can be emitted as arguments:
// everything but a tail that may be the outer "}", whitespace and part of
// </tool_call>.
func (p *Parser) jsonArgsSafe() int {
	s := p.pending
	for k := strings.LastIndexByte(s, '}'); k >= 0; k = strings.LastIndexByte(s[:k], '}') {
		if tailOK(s[k+1:]) {
			// Also keep whitespace before that brace: it is trimmed at the end.
			return len(strings.TrimRight(s[:k], " \t\r\n"))
		}
		if strings.TrimSpace(s[k+1:]) != "" {
			break
		}
	}
	n := len(s) - partialSuffix(s, closeTag)
	return len(strings.TrimRight(s[:n], " \t\r\n"))
}

// tailOK: s is whitespace followed by a prefix of </tool_call>.
func tailOK(s string) bool {
	t := strings.TrimLeft(s, " \t\r\n")
	return strings.HasPrefix(closeTag, t)
}

// jsonHeader recognises `{"name": "NAME", "arguments": ` at the start of s.
// need reports that s is a prefix of such a header (more text may decide).
func jsonHeader(s string) (name, rest string, ok, need bool) {
	i := 1
	ws := func() {
		for i < len(s) && strings.IndexByte(" \t\r\n", s[i]) >= 0 {
			i++
		}
	}
	lit := func(l string) (bool, bool) { // matched, needMore
		if strings.HasPrefix(s[i:], l) {
			i += len(l)
			return true, false
		}
		return false, strings.HasPrefix(l, s[i:])
	}
	ws()
	if m, n := lit(`"name"`); !m {
		return "", "", false, n
	}
	ws()
	if m, n := lit(`:`); !m {
		return "", "", false, n
	}
	ws()
	if i >= len(s) {
		return "", "", false, true
	}
	if s[i] != '"' {
		return "", "", false, false
	}
	// A JSON string without escapes (tool names are identifiers).
	j := strings.IndexByte(s[i+1:], '"')
	if j < 0 {
		return "", "", false, !strings.ContainsAny(s[i+1:], "\\\n")
	}
	name = s[i+1 : i+1+j]
	if strings.ContainsRune(name, '\\') || name == "" {
		return "", "", false, false
	}
	i += j + 2
	ws()
	if m, n := lit(`,`); !m {
		return "", "", false, n
	}
	ws()
	if m, n := lit(`"arguments"`); !m {
		return "", "", false, n
	}
	ws()
	if m, n := lit(`:`); !m {
		return "", "", false, n
	}
	ws()
	if i >= len(s) {
		return "", "", false, true
	}
	if s[i] != '{' {
		return "", "", false, false
	}
	return name, s[i:], true, false
}

func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// partialSuffix returns the length of the longest proper suffix of s that is
// a prefix of tag.
func partialSuffix(s, tag string) int {
	for n := min(len(s), len(tag)-1); n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			return n
		}
	}
	return 0
}
