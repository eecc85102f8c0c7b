package toolcall

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// schema is the part of a tool's parameter schema that XML value coercion
// needs: each property's accepted types, in the order given.
type schema struct {
	props map[string][]string
}

func parseSchema(raw json.RawMessage) *schema {
	s := &schema{props: map[string][]string{}}
	var obj struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &obj) != nil {
		return s
	}
	for name, p := range obj.Properties {
		s.props[name] = schemaTypes(p)
	}
	return s
}

// schemaTypes lists the JSON types a property schema allows: "type" (a
// string or a list), else the types of anyOf/oneOf alternatives, else
// inferred from enum or const values.
func schemaTypes(raw json.RawMessage) []string {
	var p struct {
		Type  json.RawMessage   `json:"type"`
		AnyOf []json.RawMessage `json:"anyOf"`
		OneOf []json.RawMessage `json:"oneOf"`
		Enum  []any             `json:"enum"`
		Const any               `json:"const"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return nil
	}
	var t string
	if json.Unmarshal(p.Type, &t) == nil {
		return []string{strings.ToLower(t)}
	}
	var ts []string
	if json.Unmarshal(p.Type, &ts) == nil {
		for i := range ts {
			ts[i] = strings.ToLower(ts[i])
		}
		return ts
	}
	var out []string
	for _, alt := range append(p.AnyOf, p.OneOf...) {
		out = append(out, schemaTypes(alt)...)
	}
	if len(out) > 0 {
		return out
	}
	for _, v := range append(p.Enum, p.Const) {
		switch v.(type) {
		case string:
			return []string{"string"}
		case float64:
			return []string{"number"}
		case bool:
			return []string{"boolean"}
		}
	}
	return nil
}

// coerce returns the JSON for XML parameter value v of param name. Values
// that do not fit the declared type stay strings (the caller's schema
// validation, if any, reports them); a parameter the schema does not declare
// is a string, as in vLLM's qwen3_coder parser.
func (s *schema) coerce(name, v string) []byte {
	var types []string
	if s != nil {
		types = s.props[name]
	}
	if strings.ToLower(strings.TrimSpace(v)) == "null" {
		return []byte("null")
	}
	for _, t := range types {
		if t == "null" {
			continue
		}
		if out, ok := coerceAs(t, v); ok {
			return out
		}
	}
	return marshal(v)
}

func coerceAs(t, v string) ([]byte, bool) {
	tv := strings.TrimSpace(v)
	switch t {
	case "string", "str", "text", "varchar", "char", "enum":
		return marshal(v), true
	case "integer", "int", "uint", "long", "short", "unsigned":
		if _, err := strconv.ParseInt(tv, 10, 64); err == nil {
			return []byte(tv), true
		}
		// "3.0" is an integer to JSON Schema.
		if f, err := strconv.ParseFloat(tv, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return []byte(strconv.FormatInt(int64(f), 10)), true
		}
	case "number", "num", "float", "double":
		if f, err := strconv.ParseFloat(tv, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			if json.Valid([]byte(tv)) {
				return []byte(tv), true // keep the model's spelling when it is JSON
			}
			return []byte(strconv.FormatFloat(f, 'g', -1, 64)), true
		}
	case "boolean", "bool", "binary":
		switch strings.ToLower(tv) {
		case "true":
			return []byte("true"), true
		case "false":
			return []byte("false"), true
		}
	case "object", "dict", "array", "list":
		if json.Valid([]byte(tv)) {
			var probe any
			_ = json.Unmarshal([]byte(tv), &probe)
			_, isObj := probe.(map[string]any)
			_, isArr := probe.([]any)
			if (t == "object" || t == "dict") && isObj || (t == "array" || t == "list") && isArr {
				return marshalOrdered(tv), true
			}
		}
	}
	return nil, false
}

// marshalOrdered re-encodes JSON text with ", " and ": " separators, keeping
// key order and number spelling.
func marshalOrdered(s string) []byte {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var b strings.Builder
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case json.Delim:
			closer := byte(']')
			if t == '{' {
				closer = '}'
			}
			b.WriteByte(byte(t))
			first := true
			for dec.More() {
				if !first {
					b.WriteString(", ")
				}
				first = false
				if t == '{' {
					k, err := dec.Token()
					if err != nil {
						return err
					}
					b.Write(marshal(k))
					b.WriteString(": ")
				}
				if err := walk(); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return err
			}
			b.WriteByte(closer)
		case json.Number:
			b.WriteString(t.String())
		default:
			b.Write(marshal(t))
		}
		return nil
	}
	if walk() != nil {
		return []byte(s)
	}
	return []byte(b.String())
}
