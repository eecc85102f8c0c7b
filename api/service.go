package api

import (
	"context"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// Service is what the HTTP layer needs; coordinator.Coordinator implements it.
type Service interface {
	Models(ctx context.Context) ([]openai.Model, error)
	// Ready returns nil when the service can take requests (/readyz).
	Ready(ctx context.Context) error
	// Submit queues a validated request. Errors: *openai.Error with Status set
	// (404 unknown model, 429 queue full with RetryAfter, 503 no workers).
	Submit(ctx context.Context, req *job.Job) (job.Stream, error)
}

// KeyChecker authenticates API keys. Check returns the key's id (used for
// fairness and logs, never the key itself) or an error: a *openai.Error is
// sent as is, anything else becomes a 401. A request without a Bearer key is
// checked with key "": return an error to require keys, or ("", nil) to let
// anonymous callers in.
type KeyChecker interface {
	Check(ctx context.Context, key string) (keyID string, err error)
}
