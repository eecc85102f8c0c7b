package api

import (
	"context"

	"github.com/macpool/macpool/api/openai"
)

// Service is what the HTTP layer needs; coordinator.Coordinator implements it.
type Service interface {
	Models(ctx context.Context) ([]openai.Model, error)
	// Ready returns nil when the service can take requests (/readyz).
	Ready(ctx context.Context) error
	// Submit queues a validated request. Errors: *openai.Error with Status set
	// (404 unknown model, 429 queue full with RetryAfter, 503 no workers).
	Submit(ctx context.Context, req *Job) (Stream, error)
}

// Job kinds.
const (
	KindChat       = "chat"
	KindCompletion = "completion"
	KindEmbedding  = "embedding" // Job.Embedding; answered with Event.Embeddings
)

// Job is one validated request handed to the Service.
type Job struct {
	ID         string // request id (also X-Request-Id)
	Kind       string // "chat" | "completion" | "embedding"
	Model      string
	APIKey     string // key id of the caller, for fairness ("" = anonymous)
	Chat       *openai.ChatCompletionRequest
	Completion *openai.CompletionRequest
	Embedding  *openai.EmbeddingRequest
}

// Stream delivers the events of one submitted job.
//
// The HTTP layer calls Recv from the request goroutine only, and Close
// exactly once, after its last Recv (also when the client went away: Recv
// must return promptly when ctx is cancelled).
type Stream interface {
	Recv(ctx context.Context) (*Event, error) // io.EOF after the final event
	Close() error                             // cancels the generation if still running
}

// Event is one step of a generation.
type Event struct {
	Worker       string // node name that produced it
	Choice       int    // index for n > 1
	Role         string // "assistant" on the first event of a choice
	Text         string // content delta
	Reasoning    string // reasoning_content delta
	ToolCalls    []openai.ToolCallDelta
	Logprobs     *openai.ChoiceLogprobs // for the tokens of this delta
	FinishReason string                 // "stop" | "length" | "tool_calls" on the last event of a choice
	Usage        *openai.Usage          // once, at the end
	Err          *openai.Error          // terminal error event
	// Embeddings (KindEmbedding) are finished vectors of some inputs, in any
	// order over any number of events; every input comes at least once (a
	// job rerun after a worker failover may repeat one: the last one counts).
	// Usage.PromptTokens counts the tokens of all inputs.
	Embeddings []EmbeddingVector
}

// EmbeddingVector is the embedding of input Index: already pooled,
// truncated to the request's dimensions and L2-normalised by the engine.
type EmbeddingVector struct {
	Index  int
	Vector []float32
}

// KeyChecker authenticates API keys. Check returns the key's id (used for
// fairness and logs, never the key itself) or an error: a *openai.Error is
// sent as is, anything else becomes a 401. A request without a Bearer key is
// checked with key "": return an error to require keys, or ("", nil) to let
// anonymous callers in.
type KeyChecker interface {
	Check(ctx context.Context, key string) (keyID string, err error)
}
