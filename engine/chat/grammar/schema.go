// Package grammar constrains decoding to JSON: a byte-level pushdown
// automaton for OpenAI response_format "json_object" (any JSON object) and
// "json_schema" (a subset of JSON Schema), and, given the tokenizer's
// vocabulary as bytes, the set of tokens allowed at each step.
//
// Whitespace between JSON tokens is allowed in runs of at most MaxWhitespace
// bytes and numbers are at most MaxNumberLen bytes long, so that a model
// cannot loop forever inside a value. Schema keywords outside the supported
// subset are an error naming them, never silently ignored.
package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Limits on unbounded JSON constructs.
const (
	MaxWhitespace = 16
	MaxNumberLen  = 40
)

type kind uint8

const (
	kAny kind = iota
	kObject
	kArray
	kString
	kNumber
	kInteger
	kLiteral // enum, const, true/false/null: one of a set of JSON texts
	kUnion
)

// node is one compiled schema.
type node struct {
	kind kind
	// object: fixed properties (free keys when props is empty and free != nil)
	props    []prop
	required []uint64 // bitset over props
	free     *node    // value schema of free keys (maps, json_object)
	// array
	items              *node
	minItems, maxItems int // maxItems < 0: none
	// literal
	lits []string
	// union: alternatives with disjoint first bytes
	alts []*node

	first     *byteSet // bytes a value of this node can start with (computed lazily)
	firstBusy bool
}

type prop struct {
	name string
	n    *node
}

type byteSet [4]uint64

func (s *byteSet) add(b byte)      { s[b>>6] |= 1 << (b & 63) }
func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }
func (s *byteSet) addString(str string) {
	for i := 0; i < len(str); i++ {
		s.add(str[i])
	}
}

var (
	anyNode    = &node{kind: kAny}
	anyObject  = &node{kind: kObject, free: anyNode}
	anyArray   = &node{kind: kArray, items: anyNode, maxItems: -1}
	stringNode = &node{kind: kString}
	numberNode = &node{kind: kNumber}
	boolNode   = &node{kind: kLiteral, lits: []string{"true", "false"}}
	nullNode   = &node{kind: kLiteral, lits: []string{"null"}}
)

func (n *node) firstBytes() *byteSet {
	if n.first != nil {
		return n.first
	}
	var s byteSet
	switch n.kind {
	case kAny:
		s.addString(`{["-0123456789tfn`)
	case kObject:
		s.add('{')
	case kArray:
		s.add('[')
	case kString:
		s.add('"')
	case kNumber, kInteger:
		s.addString("-0123456789")
	case kLiteral:
		for _, l := range n.lits {
			s.add(l[0])
		}
	case kUnion:
		if n.firstBusy {
			return &s // a union that contains itself directly starts with nothing new
		}
		n.firstBusy = true
		for _, a := range n.alts {
			f := a.firstBytes()
			for i := range s {
				s[i] |= f[i]
			}
		}
		n.firstBusy = false
	}
	n.first = &s
	return n.first
}

// Grammar is a compiled response format. It is immutable and safe for
// concurrent use; each generation gets its own Matcher.
type Grammar struct {
	root *node
}

// JSONObject returns the grammar of response_format {"type":"json_object"}:
// any JSON object.
func JSONObject() *Grammar { return &Grammar{root: anyObject} }

// Compile compiles a JSON Schema (response_format json_schema's "schema").
// Supported: type (string or list), properties, required,
// additionalProperties (false, or a schema when there are no properties),
// items, minItems, maxItems, enum, const, anyOf/oneOf (alternatives must
// start with different characters), allOf with one member, nullable, $ref to
// #, #/$defs/… or #/definitions/…; annotations (title, description, default,
// examples, $schema, $id, $comment, …) are ignored.
func Compile(schema json.RawMessage) (*Grammar, error) {
	c := &compiler{refs: map[string]*node{}}
	if err := json.Unmarshal(schema, &c.root); err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	n := c.compile(c.root, "#")
	if len(c.unsupported) > 0 {
		return nil, fmt.Errorf("json schema: unsupported: %s", strings.Join(c.unsupported, "; "))
	}
	if c.err != nil {
		return nil, fmt.Errorf("json schema: %w", c.err)
	}
	if err := checkUnions(n, map[*node]bool{}); err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	return &Grammar{root: n}, nil
}

type compiler struct {
	root        any
	refs        map[string]*node
	unsupported []string
	err         error
}

var ignored = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true,
	"$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$defs": true, "definitions": true,
}

var handled = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "minItems": true, "maxItems": true, "enum": true, "const": true,
	"anyOf": true, "oneOf": true, "allOf": true, "$ref": true, "nullable": true,
}

func (c *compiler) fail(format string, args ...any) *node {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
	return anyNode
}

func (c *compiler) compile(s any, path string) *node {
	switch v := s.(type) {
	case bool:
		if v {
			return anyNode
		}
		return c.fail("%s: schema false accepts nothing", path)
	case map[string]any:
		return c.compileObject(v, path)
	}
	return c.fail("%s: a schema must be an object or a boolean", path)
}

func (c *compiler) compileObject(s map[string]any, path string) *node {
	var bad []string
	for k := range s {
		if !handled[k] && !ignored[k] {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		c.unsupported = append(c.unsupported, fmt.Sprintf("%s at %s", strings.Join(bad, ", "), path))
	}

	if ref, ok := s["$ref"].(string); ok {
		return c.ref(ref, path)
	}
	if all, ok := s["allOf"].([]any); ok {
		if len(all) != 1 {
			c.unsupported = append(c.unsupported, "allOf with more than one schema at "+path)
			return anyNode
		}
		return c.compile(all[0], path+"/allOf/0")
	}
	var n *node
	switch {
	case s["const"] != nil || hasKey(s, "const"):
		n = &node{kind: kLiteral, lits: []string{encode(s["const"])}}
	case s["enum"] != nil:
		vals, ok := s["enum"].([]any)
		if !ok || len(vals) == 0 {
			return c.fail("%s: enum must be a non-empty array", path)
		}
		n = &node{kind: kLiteral}
		for _, v := range vals {
			n.lits = append(n.lits, encode(v))
		}
	case s["anyOf"] != nil || s["oneOf"] != nil:
		key := "anyOf"
		if s["anyOf"] == nil {
			key = "oneOf"
		}
		alts, ok := s[key].([]any)
		if !ok || len(alts) == 0 {
			return c.fail("%s: %s must be a non-empty array", path, key)
		}
		n = &node{kind: kUnion}
		for i, a := range alts {
			n.alts = append(n.alts, c.compile(a, fmt.Sprintf("%s/%s/%d", path, key, i)))
		}
	default:
		n = c.typed(s, path)
	}
	if nb, _ := s["nullable"].(bool); nb {
		n = &node{kind: kUnion, alts: []*node{n, nullNode}}
	}
	return n
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

func (c *compiler) typed(s map[string]any, path string) *node {
	var types []string
	switch t := s["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			if str, ok := x.(string); ok {
				types = append(types, str)
			}
		}
	case nil:
		switch {
		case s["properties"] != nil || s["additionalProperties"] != nil || s["required"] != nil:
			types = []string{"object"}
		case s["items"] != nil:
			types = []string{"array"}
		default:
			return anyNode
		}
	}
	if len(types) == 0 {
		return c.fail("%s: bad type", path)
	}
	var alts []*node
	for _, t := range types {
		switch t {
		case "object":
			alts = append(alts, c.object(s, path))
		case "array":
			alts = append(alts, c.array(s, path))
		case "string":
			alts = append(alts, stringNode)
		case "number":
			alts = append(alts, numberNode)
		case "integer":
			alts = append(alts, &node{kind: kInteger})
		case "boolean":
			alts = append(alts, boolNode)
		case "null":
			alts = append(alts, nullNode)
		default:
			return c.fail("%s: unknown type %q", path, t)
		}
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return &node{kind: kUnion, alts: alts}
}

func (c *compiler) object(s map[string]any, path string) *node {
	n := &node{kind: kObject}
	props, _ := s["properties"].(map[string]any)
	// Properties in the schema's order would need an ordered decode; any
	// order is accepted by the automaton, so sorting keeps it deterministic.
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	index := map[string]int{}
	for i, k := range names {
		n.props = append(n.props, prop{name: k, n: c.compile(props[k], path+"/properties/"+k)})
		index[k] = i
	}
	n.required = make([]uint64, (len(names)+63)/64)
	if req, ok := s["required"].([]any); ok {
		for _, r := range req {
			name, _ := r.(string)
			i, ok := index[name]
			if !ok {
				return c.fail("%s: required property %q is not in properties", path, name)
			}
			n.required[i/64] |= 1 << (i % 64)
		}
	}
	for _, p := range n.props {
		if strings.ContainsAny(p.name, "\"\\") || hasControl(p.name) {
			c.unsupported = append(c.unsupported, fmt.Sprintf("property name %q needing escapes at %s", p.name, path))
		}
	}
	ap, hasAP := s["additionalProperties"]
	switch {
	case len(props) > 0 && (!hasAP || ap == false):
		// Only the listed properties (OpenAI strict mode requires false).
	case len(props) > 0:
		c.unsupported = append(c.unsupported, "additionalProperties other than false together with properties at "+path)
	case !hasAP || ap == true:
		n.free = anyNode
	case ap == false:
		// The empty object only.
	default:
		n.free = c.compile(ap, path+"/additionalProperties")
	}
	return n
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 {
			return true
		}
	}
	return false
}

func (c *compiler) array(s map[string]any, path string) *node {
	n := &node{kind: kArray, items: anyNode, maxItems: -1}
	if it, ok := s["items"]; ok {
		n.items = c.compile(it, path+"/items")
	}
	if v, ok := s["minItems"].(float64); ok {
		n.minItems = int(v)
	}
	if v, ok := s["maxItems"].(float64); ok {
		n.maxItems = int(v)
	}
	if n.maxItems >= 0 && n.maxItems < n.minItems {
		return c.fail("%s: maxItems %d is below minItems %d", path, n.maxItems, n.minItems)
	}
	return n
}

func (c *compiler) ref(ref, path string) *node {
	if n, ok := c.refs[ref]; ok {
		return n
	}
	var target any
	switch {
	case ref == "#":
		target = c.root
	case strings.HasPrefix(ref, "#/$defs/"), strings.HasPrefix(ref, "#/definitions/"):
		parts := strings.SplitN(strings.TrimPrefix(ref, "#/"), "/", 2)
		root, _ := c.root.(map[string]any)
		defs, _ := root[parts[0]].(map[string]any)
		var ok bool
		if target, ok = defs[strings.ReplaceAll(strings.ReplaceAll(parts[1], "~1", "/"), "~0", "~")]; !ok {
			return c.fail("%s: $ref %q not found", path, ref)
		}
	default:
		c.unsupported = append(c.unsupported, fmt.Sprintf("$ref %q at %s (only #, #/$defs/… and #/definitions/…)", ref, path))
		return anyNode
	}
	// A placeholder filled in after compiling, so recursive schemas work.
	n := &node{}
	c.refs[ref] = n
	*n = *c.compile(target, ref)
	return n
}

// checkUnions rejects unions whose alternatives can start with the same byte:
// the automaton picks an alternative by the value's first byte.
func checkUnions(n *node, seen map[*node]bool) error {
	if seen[n] {
		return nil
	}
	seen[n] = true
	if n.kind == kUnion {
		var acc byteSet
		for _, a := range n.alts {
			f := a.firstBytes()
			for i := range acc {
				if acc[i]&f[i] != 0 {
					return errors.New("anyOf/oneOf (or a type list) whose alternatives can start with the same character is not supported")
				}
				acc[i] |= f[i]
			}
		}
	}
	for _, p := range n.props {
		if err := checkUnions(p.n, seen); err != nil {
			return err
		}
	}
	for _, a := range append([]*node{n.free, n.items}, n.alts...) {
		if a != nil {
			if err := checkUnions(a, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// encode writes a JSON value canonically (no HTML escaping, no spaces).
func encode(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// FromResponseFormat compiles an OpenAI response_format object: "text" (or
// absent) gives nil, "json_object" any JSON object, "json_schema" its
// json_schema.schema (enforced whether or not "strict" is set, as vLLM does).
func FromResponseFormat(raw json.RawMessage) (*Grammar, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, fmt.Errorf("response_format: %w", err)
	}
	switch rf.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return JSONObject(), nil
	case "json_schema":
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
			return nil, errors.New("response_format: json_schema.schema is required")
		}
		g, err := Compile(rf.JSONSchema.Schema)
		if err != nil {
			return nil, fmt.Errorf("response_format: %w", err)
		}
		return g, nil
	}
	return nil, fmt.Errorf("response_format: unknown type %q (want text, json_object or json_schema)", rf.Type)
}
