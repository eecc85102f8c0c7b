package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
)

// obj is a JSON object that keeps its keys in document order, so that
// properties are generated in the order the schema lists them.
type obj struct {
	keys []string
	m    map[string]any
}

func (o *obj) get(k string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.m[k]
	return v, ok
}

func (o *obj) set(k string, v any) {
	if _, ok := o.m[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.m[k] = v
}

func (o *obj) del(k string) {
	if _, ok := o.m[k]; !ok {
		return
	}
	delete(o.m, k)
	for i, x := range o.keys {
		if x == k {
			o.keys = append(o.keys[:i:i], o.keys[i+1:]...)
			break
		}
	}
}

func (o *obj) clone() *obj {
	c := &obj{keys: append([]string(nil), o.keys...), m: make(map[string]any, len(o.m))}
	for k, v := range o.m {
		c.m[k] = v
	}
	return c
}

func newObj() *obj { return &obj{m: map[string]any{}} }

// decodeOrdered parses JSON into *obj, []any, string, json.Number, bool
// and nil.
func decodeOrdered(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := decodeValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(d *json.Decoder) (any, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := newObj()
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(d)
				if err != nil {
					return nil, err
				}
				o.set(k, v)
			}
			_, err := d.Token()
			return o, err
		case '[':
			a := []any{}
			for d.More() {
				v, err := decodeValue(d)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := d.Token()
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	}
	return t, nil
}

// encodeCompact writes v as compact JSON (keys in document order, no HTML
// escaping), the form the grammar generates.
func encodeCompact(v any) string {
	var b strings.Builder
	writeCompact(&b, v)
	return b.String()
}

func writeCompact(b *strings.Builder, v any) {
	switch v := v.(type) {
	case *obj:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			writeCompact(b, v.m[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCompact(b, x)
		}
		b.WriteByte(']')
	case string:
		writeString(b, v)
	case json.Number:
		b.WriteString(v.String())
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case nil:
		b.WriteString("null")
	default:
		raw, _ := json.Marshal(v)
		b.Write(raw)
	}
}

func writeString(b *strings.Builder, s string) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	b.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// EncodeCompact re-serialises a JSON document compactly, keeping key order
// and number spelling (tests compare it with what the matcher accepts).
func EncodeCompact(doc []byte) (string, error) {
	v, err := decodeOrdered(doc)
	if err != nil {
		return "", err
	}
	return encodeCompact(v), nil
}

// jsonEqual compares two decoded values as JSON Schema does (numbers by
// value, objects regardless of key order).
func jsonEqual(a, b any) bool {
	switch a := a.(type) {
	case *obj:
		bo, ok := b.(*obj)
		if !ok || len(a.keys) != len(bo.keys) {
			return false
		}
		for _, k := range a.keys {
			bv, ok := bo.m[k]
			if !ok || !jsonEqual(a.m[k], bv) {
				return false
			}
		}
		return true
	case []any:
		ba, ok := b.([]any)
		if !ok || len(a) != len(ba) {
			return false
		}
		for i := range a {
			if !jsonEqual(a[i], ba[i]) {
				return false
			}
		}
		return true
	case json.Number:
		bn, ok := b.(json.Number)
		if !ok {
			return false
		}
		x, ok1 := new(big.Rat).SetString(a.String())
		y, ok2 := new(big.Rat).SetString(bn.String())
		return ok1 && ok2 && x.Cmp(y) == 0
	}
	return a == b
}

// numRat returns a JSON number as an exact rational.
func numRat(v any) (*big.Rat, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	return new(big.Rat).SetString(n.String())
}
