package cluster

import (
	"encoding/json"
	"time"

	"github.com/macpool/macpool/api/openai"
)

// ErrorBody is the payload of a FrameError. openai.Error does not serialise
// its HTTP status or Retry-After, so they travel beside it.
type ErrorBody struct {
	Status       int           `json:"status"`
	RetryAfterMS int64         `json:"retry_after_ms,omitempty"`
	Error        *openai.Error `json:"error"`
}

// EncodeError is the FrameError payload for e.
func EncodeError(e *openai.Error) []byte {
	b, _ := json.Marshal(ErrorBody{Status: e.HTTPStatus(), RetryAfterMS: e.RetryAfter.Milliseconds(), Error: e})
	return b
}

// DecodeError parses a FrameError payload; a malformed one becomes a 500.
func DecodeError(p []byte) *openai.Error {
	var b ErrorBody
	if err := json.Unmarshal(p, &b); err != nil || b.Error == nil {
		return openai.ServerError("worker sent a malformed error frame")
	}
	e := b.Error
	e.Status = b.Status
	e.RetryAfter = time.Duration(b.RetryAfterMS) * time.Millisecond
	return e
}
