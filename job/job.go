// Package job defines the unit of work that crosses the cluster: a validated
// request (Job), the events of its generation (Event), and the stream that
// delivers them. The HTTP layer builds Jobs from the OpenAI wire types, the
// coordinator queues them, a worker's runner turns them into Events. It
// depends on nothing but the OpenAI wire types, so every layer can use it
// without pulling in another.
package job

import (
	"context"

	"github.com/macpool/macpool/api/openai"
)

// Job kinds.
const (
	KindChat       = "chat"
	KindCompletion = "completion"
	KindEmbedding  = "embedding" // Job.Embedding; answered with Event.Embeddings
)

// Job is one validated request.
type Job struct {
	ID         string // request id (also X-Request-Id)
	Kind       string // "chat" | "completion" | "embedding"
	Model      string
	APIKey     string // key id of the caller, for fairness ("" = anonymous)
	Chat       *openai.ChatCompletionRequest
	Completion *openai.CompletionRequest
	Embedding  *openai.EmbeddingRequest
	// Stream is set on a streamed request whose events can be resumed
	// (StreamInfo); nil otherwise.
	Stream *StreamInfo `json:",omitempty"`
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
	StopSequence string                 // with FinishReason "stop": the stop string that ended the choice, if one did
	Usage        *openai.Usage          // once, at the end
	Err          *openai.Error          // terminal error event
	// Unenforced, on a choice's first event, lists what a non-strict
	// schema constraint (response_format or tool parameters without
	// strict: true) could not enforce: "keyword at /json/pointer (why)".
	Unenforced []string `json:",omitempty"`
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

// Resume is a generation carried over from another worker (mid-stream
// failover): Tokens[i] are the tokens choice i already produced, as the
// runner reported them with its events (a negative value marks a token that
// a constraint substituted for a sampled end-of-sequence, which the replay
// of the constraint needs); the client already has their text.
type Resume struct {
	Tokens [][]int
}

// StreamInfo, set by the API on a streamed request, makes the stream
// resumable: the coordinator keeps its events in the cluster (JetStream)
// and a client that lost it sends the request again, to any coordinator,
// with Last-Event-ID set to the id of the last SSE event it received
// (docs/api.md, "Resuming a stream").
type StreamInfo struct {
	// Created is the request's time (unix seconds), the "created" of every
	// frame of the stream: a resumed stream renders the same frames.
	Created int64
}

// Resumable is a Stream that outlives its client. Every SSE event of its
// rendering carries the id EventID(ResumeToken(), n), n counting the
// events from 0.
type Resumable interface {
	Stream
	// ResumeToken identifies the stream: StreamToken.String.
	ResumeToken() string
	// Detach is called instead of Close when the client went away
	// mid-stream: the generation goes on (its events are kept) for a
	// grace period, so that the client can resume it, and is cancelled
	// then if nobody did.
	Detach()
}
