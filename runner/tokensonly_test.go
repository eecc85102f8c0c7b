package runner

import (
	"context"
	"errors"
	"testing"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// A checkpoint folder without tokenizer.json is refused unless TokensOnly;
// then token-id prompts generate, every token with its own event, and a
// text prompt is a bad request. The fixture's EOS ids lie outside its tiny
// vocabulary, which only AllowNoEOS accepts.
func TestTokensOnly(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ModelDir, cfg.Threads, cfg.MaxSeqs = "../testdata/hf/qwen3", 1, 1
	if _, err := New(cfg, nil); !errors.Is(err, ErrNoTokenizer) {
		t.Fatalf("New without a tokenizer: got %v, want ErrNoTokenizer", err)
	}
	cfg.TokensOnly = true
	if _, err := New(cfg, nil); err == nil {
		t.Fatal("New of a model without an EOS id in its vocabulary: got no error")
	}
	cfg.AllowNoEOS = true
	r, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	maxTokens, zero := 4, 0.0
	j := &job.Job{Kind: job.KindCompletion, Completion: &openai.CompletionRequest{
		Prompt: openai.Prompt{Tokens: [][]int{{1, 2, 3}}}, MaxTokens: &maxTokens, Temperature: &zero}}
	var perEvent []int
	err = r.GenerateResume(context.Background(), j, nil, func(ev *job.Event, toks []int) error {
		if ev.Text != "" {
			t.Errorf("event with text %q from a model without a tokenizer", ev.Text)
		}
		if len(toks) > 0 {
			perEvent = append(perEvent, len(toks))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(perEvent) != maxTokens {
		t.Errorf("tokens per event %v, want %d events of one token", perEvent, maxTokens)
	}
	j.Completion.Prompt = openai.TextPrompt("hi")
	if err := r.Generate(context.Background(), j, func(*job.Event) error { return nil }); err == nil {
		t.Error("text prompt without a tokenizer: got no error")
	}
}
