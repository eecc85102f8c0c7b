package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// decode unmarshals a request body into v and turns every failure into a 400
// that says what was wrong and, where it can, which parameter. Unknown fields
// are ignored, as vLLM does: clients send vendor extras freely.
func decode(data []byte, v any) *Error {
	if len(bytes.TrimSpace(data)) == 0 {
		return InvalidRequest("", "request body is empty; expected a JSON object")
	}
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	return decodeError(err)
}

func decodeError(err error) *Error {
	var oe *Error
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &oe):
		return oe
	case errors.As(err, &se):
		return InvalidRequest("", "request body is not valid JSON: %s (at byte %d)", se.Error(), se.Offset)
	case errors.As(err, &te):
		if te.Field == "" {
			return InvalidRequest("", "request body must be a JSON object, got %s", jsonValueName(te.Value))
		}
		return InvalidRequest(te.Field, "invalid type for %s: expected %s, got %s", te.Field, jsonTypeName(te.Type), jsonValueName(te.Value))
	}
	return InvalidRequest("", "request body is not valid JSON: %v", err)
}

// typeErrorText describes a decoding failure inside a custom unmarshaler.
func typeErrorText(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("%s must be %s, got %s", te.Field, jsonTypeName(te.Type), jsonValueName(te.Value))
		}
		return fmt.Sprintf("expected %s, got %s", jsonTypeName(te.Type), jsonValueName(te.Value))
	}
	return err.Error()
}

func jsonTypeName(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a value"
	}
	switch t {
	case reflect.TypeFor[Stop]():
		return "a string or an array of strings"
	case reflect.TypeFor[Content]():
		return "a string or an array of content parts"
	case reflect.TypeFor[json.RawMessage]():
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

// jsonValueName turns encoding/json's Value ("string", "number 1.5") into text.
func jsonValueName(v string) string {
	switch {
	case v == "bool":
		return "a boolean"
	case v == "array" || v == "object":
		return "an " + v
	case v == "string":
		return "a string"
	}
	return v // "number", "number 1.5"
}
