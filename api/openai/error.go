// Package openai holds the OpenAI wire types macpool speaks: requests and
// responses for chat completions, completions, models and embeddings, their
// streaming chunks, and the error body. Requests are parsed strictly
// (ParseChatCompletionRequest and friends) so that a client gets a 400 naming
// the offending parameter instead of a generation it did not ask for.
//
// Everything here is plain JSON-serialisable data: the coordinator forwards a
// validated request to a worker over NATS as JSON and the worker decodes it
// with encoding/json.
package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Error types, as OpenAI names them in error.type.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeRateLimit      = "rate_limit_exceeded"
	TypeServer         = "server_error"
	TypeUnavailable    = "service_unavailable_error"
)

// Error is an OpenAI error. It marshals to the inner object of the error body
// ({"message","type","param","code"}); ErrorResponse is the envelope.
//
// Status and RetryAfter are not part of the OpenAI body and are not
// serialised: a component that carries an Error across the network has to
// carry them itself.
type Error struct {
	Status     int           `json:"-"` // HTTP status; 0 means 500
	RetryAfter time.Duration `json:"-"` // sent as Retry-After (whole seconds, rounded up) when > 0
	Message    string        `json:"message"`
	Type       string        `json:"type"`
	Param      string        `json:"param"` // "" marshals as null
	Code       string        `json:"code"`  // "" marshals as null
}

// ErrorResponse is the body of every error answer: {"error":{...}}.
type ErrorResponse struct {
	Error *Error `json:"error"`
}

func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%s (param %s)", e.Message, e.Param)
	}
	return e.Message
}

// HTTPStatus is Status, or 500 when unset.
func (e *Error) HTTPStatus() int {
	if e.Status == 0 {
		return http.StatusInternalServerError
	}
	return e.Status
}

type errorWire struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// MarshalJSON writes empty Param and Code as null, as OpenAI does.
func (e *Error) MarshalJSON() ([]byte, error) {
	w := errorWire{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		w.Param = &e.Param
	}
	if e.Code != "" {
		w.Code = &e.Code
	}
	return json.Marshal(w)
}

// UnmarshalJSON accepts a string or integer code (vLLM sends the HTTP status
// as an integer code).
func (e *Error) UnmarshalJSON(data []byte) error {
	var w struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Param   *string         `json:"param"`
		Code    json.RawMessage `json:"code"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*e = Error{Message: w.Message, Type: w.Type}
	if w.Param != nil {
		e.Param = *w.Param
	}
	if len(w.Code) > 0 && string(w.Code) != "null" {
		var s string
		if json.Unmarshal(w.Code, &s) == nil {
			e.Code = s
		} else {
			e.Code = string(w.Code)
		}
	}
	return nil
}

// InvalidRequest is a 400 naming param ("" for none).
func InvalidRequest(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// ModelNotFound is the 404 for an unknown model.
func ModelNotFound(model string) *Error {
	return &Error{
		Status:  http.StatusNotFound,
		Type:    TypeInvalidRequest,
		Param:   "model",
		Code:    "model_not_found",
		Message: fmt.Sprintf("The model %q does not exist or is not served by this cluster.", model),
	}
}

// RateLimited is a 429 asking the client to come back after retryAfter.
func RateLimited(retryAfter time.Duration, format string, args ...any) *Error {
	return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "rate_limit_exceeded", RetryAfter: retryAfter, Message: fmt.Sprintf(format, args...)}
}

// Unavailable is a 503 (no workers, shutting down).
func Unavailable(format string, args ...any) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Message: fmt.Sprintf(format, args...)}
}

// ServerError is a 500.
func ServerError(format string, args ...any) *Error {
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Message: fmt.Sprintf(format, args...)}
}

// Unauthorized is a 401.
func Unauthorized(format string, args ...any) *Error {
	return &Error{Status: http.StatusUnauthorized, Type: TypeInvalidRequest, Code: "invalid_api_key", Message: fmt.Sprintf(format, args...)}
}
