package pipeline

import (
	"path/filepath"
	"testing"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/runner"
)

// TestHeadLogprobsWithoutLogits: sampled requests that report logprobs
// (top 0 and 5, with penalties) or score best_of candidates are drawn on
// the last stage with their logprobs, so no logits row comes back, and
// the ids and every logprob equal the whole model's; with min_tokens the
// steps inside the window still get their row (the EOS mask is the
// head's), and only those.
func TestHeadLogprobsWithoutLogits(t *testing.T) {
	path := filepath.Join("..", "testdata", "hf", "qwen3")
	rc := fixtureRunner(path, engine.Options{})
	whole, err := runner.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	V := whole.Model().VocabSize()
	jobs := []*job.Job{
		completion(randomTokens(31, 17, V), 9, func(r *openai.CompletionRequest) {
			r.Temperature, r.Seed, r.Logprobs = ptrTo(0.8), ptrTo(int64(4)), ptrTo(5)
		}),
		completion(randomTokens(32, 12, V), 7, func(r *openai.CompletionRequest) {
			r.Temperature, r.Seed, r.Logprobs, r.RepetitionPenalty = ptrTo(1.0), ptrTo(int64(9)), ptrTo(0), ptrTo(1.3)
		}),
		completion(randomTokens(33, 10, V), 6, func(r *openai.CompletionRequest) {
			r.Temperature, r.Seed, r.N, r.BestOf = ptrTo(0.9), ptrTo(int64(2)), ptrTo(1), ptrTo(3)
		}),
	}
	minTok := completion(randomTokens(34, 8, V), 8, func(r *openai.CompletionRequest) {
		r.Temperature, r.Seed, r.Logprobs, r.MinTokens = ptrTo(0.7), ptrTo(int64(6)), ptrTo(2), ptrTo(3)
	})
	want := runAll(t, whole, append(jobs, minTok), false)
	secret := newSecret(t)
	for k, stages := range splits(whole.Model().Config().NumHiddenLayers) {
		tp := startPipeline(t, secret, path, engine.Options{}, stages, uint64(k+1), rc)
		sameGenerations(t, runAll(t, tp.head, jobs, false), want[:len(jobs)])
		if n := tp.head.logitRows.Load(); n != 0 {
			t.Errorf("%d stages: %d logits rows came back for sampled logprobs requests", len(stages), n)
		}
		sameGenerations(t, runAll(t, tp.head, []*job.Job{minTok}, false), want[len(jobs):])
		// The steps before min_tokens: the first token and the next two.
		if n := tp.head.logitRows.Load(); n != 3 {
			t.Errorf("%d stages: %d logits rows for min_tokens 3, want 3", len(stages), n)
		}
	}
}
