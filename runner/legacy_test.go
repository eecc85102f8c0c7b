package runner

import (
	"errors"
	"slices"
	"testing"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine/tokenizer"
)

// wantBadRequest checks that err is a 400 naming param.
func wantBadRequest(t *testing.T, err error, param string) {
	t.Helper()
	var oe *openai.Error
	if !errors.As(err, &oe) {
		t.Fatalf("got %v, want a 400 naming %s", err, param)
	}
	if oe.Status != 400 || oe.Param != param {
		t.Fatalf("got %d %v (%s), want a 400 naming %s", oe.Status, oe.Param, oe.Message, param)
	}
}

// suffix lays out Qwen coder's fill-in-the-middle prompt: the test
// tokenizer is Qwen3's, which has the three markers.
func TestCompletionSuffixFIM(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	prompt, suffix := "def add(a, b):\n    ", "\n    return c\n"
	j := completionJob(prompt, func(r *openai.CompletionRequest) {
		r.Suffix, r.MaxTokens, r.Temperature = suffix, ptr(3), ptr(0.0)
	})
	p, oe := e.plan(j)
	if oe != nil {
		t.Fatal(oe)
	}
	id := func(s string) int {
		t.Helper()
		v, ok := e.tok.TokenID(s)
		if !ok {
			t.Fatalf("test tokenizer has no %s", s)
		}
		return v
	}
	want := slices.Concat([]int{id("<|fim_prefix|>")}, e.tok.Encode(prompt), []int{id("<|fim_suffix|>")}, e.tok.Encode(suffix), []int{id("<|fim_middle|>")})
	if !slices.Equal(p.prompts[0].ids, want) {
		t.Fatalf("prompt tokens:\ngot  %v\nwant %v", p.prompts[0].ids, want)
	}
	r := mustRun(t, e, j)
	if r.usage.PromptTokens != len(want) {
		t.Errorf("usage.prompt_tokens: got %d, want %d", r.usage.PromptTokens, len(want))
	}
	// Token-id prompts take the same layout.
	ids := e.tok.Encode(prompt)
	jt := completionJob("", func(r *openai.CompletionRequest) {
		r.Prompt, r.Suffix = openai.Prompt{Tokens: [][]int{ids}}, suffix
	})
	if p, oe := e.plan(jt); oe != nil || !slices.Equal(p.prompts[0].ids, want) {
		t.Fatalf("token-id prompt: got %v, %v; want %v", p, oe, want)
	}
}

// A vocabulary without the markers refuses suffix (the lookup is what the
// runner consults).
func TestFIMTokensMissing(t *testing.T) {
	tok, err := tokenizer.New(tokenizer.Spec{Tokens: []string{"a", "b", "<|fim_prefix|>", "<|fim_suffix|>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fimTokens(tok); ok {
		t.Fatal("fimTokens: got ok for a vocabulary without <|fim_middle|>")
	}
	full, err := tokenizer.New(tokenizer.Spec{Tokens: []string{"<|fim_middle|>", "<|fim_prefix|>", "<|fim_suffix|>"}})
	if err != nil {
		t.Fatal(err)
	}
	if ids, ok := fimTokens(full); !ok || ids != (fimIDs{prefix: 1, suffix: 2, middle: 0}) {
		t.Fatalf("fimTokens: got %+v %v, want {1 2 0} true", ids, ok)
	}
	// The runner refuses with a 400 naming suffix when its vocabulary lacks them.
	e := newEngine(t, "qwen3", nil)
	e.tok = tok
	_, oe := e.plan(completionJob("a", func(r *openai.CompletionRequest) { r.Suffix = "b" }))
	if oe == nil {
		t.Fatal("suffix on a vocabulary without FIM tokens: got no error")
	}
	wantBadRequest(t, oe, "suffix")
}

// echo puts the prompt text before each choice's output, in an event of its
// own ahead of the generation (a stream's first chunk), and a stop string
// found in the prompt does not cut it.
func TestCompletionEcho(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	prompt := "The capital of France is"
	for _, tc := range []struct {
		name   string
		prompt openai.Prompt
	}{
		{"text", openai.TextPrompt(prompt)},
		{"token ids", openai.Prompt{Tokens: [][]int{e.tok.Encode(prompt)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			edit := func(echo bool) func(*openai.CompletionRequest) {
				return func(r *openai.CompletionRequest) {
					r.Prompt, r.Echo = tc.prompt, echo
					r.MaxTokens, r.Temperature, r.N, r.Stop = ptr(5), ptr(0.0), ptr(2), openai.Stop{"capital"}
				}
			}
			plain := mustRun(t, e, completionJob("", edit(false)))
			echoed := mustRun(t, e, completionJob("", edit(true)))
			if len(echoed.choices) != 2 {
				t.Fatalf("got %d choices, want 2", len(echoed.choices))
			}
			for i, c := range echoed.choices {
				if want := prompt + plain.choices[i].text; c.text != want {
					t.Errorf("choice %d: got %q, want %q", i, c.text, want)
				}
			}
			for i := range 2 {
				for _, ev := range echoed.events {
					if ev.Usage == nil && ev.Choice == i {
						if ev.Text != prompt {
							t.Errorf("choice %d: first event text %q, want the prompt %q", i, ev.Text, prompt)
						}
						break
					}
				}
			}
			if echoed.usage.CompletionTokens != plain.usage.CompletionTokens {
				t.Errorf("completion tokens: got %d with echo, want %d", echoed.usage.CompletionTokens, plain.usage.CompletionTokens)
			}
		})
	}
	_, err := run(t, e, completionJob(prompt, func(r *openai.CompletionRequest) { r.Echo, r.Logprobs = true, ptr(1) }))
	wantBadRequest(t, err, "echo")
}

// A list of prompts: prompt k's choices are k*n..k*n+n-1, each what a
// request with that prompt alone (same seed) answers; usage sums the prompts.
func TestCompletionPromptList(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	texts := []string{"Once upon a time", "The quick brown fox jumps", "1, 2, 3,"}
	tokens := make([][]int, len(texts))
	for k, s := range texts {
		tokens[k] = e.tok.Encode(s)
	}
	const n = 2
	sampled := func(r *openai.CompletionRequest) {
		r.N, r.MaxTokens, r.Temperature, r.Seed = ptr(n), ptr(6), ptr(1.0), ptr(int64(42))
	}
	alone := make([]*result, len(texts))
	for k, s := range texts {
		alone[k] = mustRun(t, e, completionJob(s, sampled))
	}
	for _, tc := range []struct {
		name   string
		prompt openai.Prompt
	}{
		{"texts", openai.Prompt{Texts: texts}},
		{"token ids", openai.Prompt{Tokens: tokens}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRun(t, e, completionJob("", func(r *openai.CompletionRequest) { sampled(r); r.Prompt = tc.prompt }))
			if len(r.choices) != len(texts)*n {
				t.Fatalf("got %d choices, want %d", len(r.choices), len(texts)*n)
			}
			var promptTokens, completionTokens int
			for k := range texts {
				for j := range n {
					got, want := r.choices[k*n+j], alone[k].choices[j]
					if got.text != want.text || got.finish != want.finish {
						t.Errorf("prompt %d choice %d: got %q (%s), want %q (%s) as alone", k, j, got.text, got.finish, want.text, want.finish)
					}
				}
				promptTokens += alone[k].usage.PromptTokens
				completionTokens += alone[k].usage.CompletionTokens
			}
			if r.usage.PromptTokens != promptTokens || r.usage.CompletionTokens != completionTokens || r.usage.TotalTokens != promptTokens+completionTokens {
				t.Errorf("usage: got %+v, want prompt %d completion %d", r.usage, promptTokens, completionTokens)
			}
		})
	}
	// The runner bounds the choices itself (a job need not come through the API).
	many := make([]string, 9)
	for k := range many {
		many[k] = "x"
	}
	_, err := run(t, e, completionJob("", func(r *openai.CompletionRequest) { r.Prompt, r.N = openai.Prompt{Texts: many}, ptr(16) }))
	wantBadRequest(t, err, "prompt")
}

// best_of generates best_of candidates per prompt (candidate j draws as
// choice j of a request with n=best_of) and returns the n with the highest
// mean token logprob, best first; usage counts every candidate.
func TestCompletionBestOf(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	texts := []string{"Once upon a time", "The quick brown fox jumps"}
	const bestOf, n = 4, 2
	base := func(r *openai.CompletionRequest) {
		r.Prompt, r.MaxTokens, r.Temperature, r.Seed = openai.Prompt{Texts: texts}, ptr(6), ptr(1.5), ptr(int64(7))
	}
	// The candidates, with their logprobs, as plain choices.
	all := mustRun(t, e, completionJob("", func(r *openai.CompletionRequest) { base(r); r.N, r.Logprobs = ptr(bestOf), ptr(0) }))
	mean := func(c choiceOut) float64 {
		var s float64
		for _, lp := range c.logprobs {
			s += lp.Logprob
		}
		return s / float64(len(c.logprobs))
	}
	got := mustRun(t, e, completionJob("", func(r *openai.CompletionRequest) { base(r); r.N, r.BestOf = ptr(n), ptr(bestOf) }))
	if len(got.choices) != len(texts)*n {
		t.Fatalf("got %d choices, want %d", len(got.choices), len(texts)*n)
	}
	distinct := false
	for k := range texts {
		cands := slices.Clone(all.choices[k*bestOf : (k+1)*bestOf])
		slices.SortStableFunc(cands, func(a, b choiceOut) int {
			switch ma, mb := mean(a), mean(b); {
			case ma > mb:
				return -1
			case ma < mb:
				return 1
			}
			return 0
		})
		for r := range n {
			if g, w := got.choices[k*n+r], cands[r]; g.text != w.text || g.finish != w.finish {
				t.Errorf("prompt %d rank %d: got %q, want %q (mean logprob %.4f)", k, r, g.text, w.text, mean(w))
			}
			if all.choices[k*bestOf+r].text != cands[r].text {
				distinct = true // the selection is not just the first n
			}
		}
	}
	if !distinct {
		t.Error("the best candidates are the first ones for every prompt: the test does not tell selection from truncation")
	}
	if got.usage.CompletionTokens != all.usage.CompletionTokens || got.usage.PromptTokens != all.usage.PromptTokens {
		t.Errorf("usage: got %+v, want that of all %d candidates %+v", got.usage, bestOf, all.usage)
	}
	_, err := run(t, e, completionJob("x", func(r *openai.CompletionRequest) { r.N, r.BestOf = ptr(3), ptr(2) }))
	wantBadRequest(t, err, "best_of")
}
