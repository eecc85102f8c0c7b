package runner

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// Completion is the job of macpool run: a completion of prompt ids. Every sampling parameter is set,
// so that the checkpoint's generation_config defaults, which a server
// applies to what a request leaves out, do not change run's sampling.
func Completion(ids []int, maxTokens int, temperature, topP float64, seed uint64) *job.Job {
	zero, topK, s := 0.0, 0, int64(seed)
	return &job.Job{ID: "run", Kind: job.KindCompletion, Completion: &openai.CompletionRequest{
		Prompt: openai.Prompt{Tokens: [][]int{ids}}, MaxTokens: &maxTokens, Temperature: &temperature, TopP: &topP,
		TopK: &topK, MinP: &zero, RepetitionPenalty: &zero, Seed: &s}}
}

// Print runs j (a completion job), streaming the text of the events (asText) or the
// ids reported with them (space-separated) to stdout, then a newline; the
// timing line goes to stderr. The runner reports the end-of-sequence id
// with the last event and never its text, so ids include it and text
// does not.
func (r *Runner) Print(ctx context.Context, j *job.Job, asText bool, stdout, stderr io.Writer) error {
	start := time.Now()
	var firstAt time.Time
	generated, first := 0, true
	genErr := r.GenerateResume(ctx, j, nil, func(ev *job.Event, toks []int) error {
		if len(toks) > 0 && firstAt.IsZero() {
			firstAt = time.Now()
		}
		generated += len(toks)
		if asText {
			_, err := io.WriteString(stdout, ev.Text)
			return err
		}
		for _, id := range toks {
			sep := " "
			if first {
				sep, first = "", false
			}
			if _, err := fmt.Fprintf(stdout, "%s%d", sep, id); err != nil {
				return err
			}
		}
		return nil
	})
	if _, err := io.WriteString(stdout, "\n"); err != nil && genErr == nil {
		genErr = err
	}
	if generated > 0 {
		n := len(j.Completion.Prompt.Tokens[0])
		pre, dec := firstAt.Sub(start).Seconds(), time.Since(firstAt).Seconds()
		fmt.Fprintf(stderr, "prompt: %d tokens in %.2fs (%.1f tok/s); generated: %d tokens, %.1f tok/s after the first\n",
			n, pre, float64(n)/pre, generated, float64(generated-1)/max(dec, 1e-9))
	}
	return genErr
}
