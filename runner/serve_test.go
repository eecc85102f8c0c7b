package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine/chat/template"
	"github.com/macpool/macpool/job"
)

func TestChatBasic(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	job := chatJob("Hello there, how are you?", func(r *openai.ChatCompletionRequest) {
		r.MaxTokens = ptr(12)
		r.Temperature = ptr(0.0)
	})
	r := mustRun(t, e, job)
	if len(r.choices) != 1 {
		t.Fatalf("got %d choices, want 1", len(r.choices))
	}
	c := r.choices[0]
	if c.role != "assistant" {
		t.Errorf("first event role %q, want assistant", c.role)
	}
	if c.text+c.reasoning == "" {
		t.Error("no text generated")
	}
	if c.finish != "length" && c.finish != "stop" {
		t.Errorf("finish %q", c.finish)
	}
	// prompt_tokens is the rendered template's length.
	tmpl, err := template.Load(modelDir(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := tmpl.Render(template.Input{Messages: []json.RawMessage{json.RawMessage(`{"role":"user","content":"Hello there, how are you?"}`)}, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(e.tok.Encode(text)); r.usage.PromptTokens != want {
		t.Errorf("prompt_tokens %d, want %d", r.usage.PromptTokens, want)
	}
	if r.usage.CompletionTokens < 1 || r.usage.CompletionTokens > 12 || r.usage.TotalTokens != r.usage.PromptTokens+r.usage.CompletionTokens {
		t.Errorf("usage %+v", r.usage)
	}
	if r.usage.PromptTokensDetails == nil || r.usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("prompt_tokens_details %+v, want cached 0", r.usage.PromptTokensDetails)
	}
	t.Logf("text %q reasoning %q finish %s usage %+v", short(c.text), short(c.reasoning), c.finish, *r.usage)
}

func TestCompletionLength(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	r := mustRun(t, e, completionJob("The quick brown fox", func(r *openai.CompletionRequest) {
		r.MaxTokens = ptr(10)
		r.Temperature = ptr(0.0)
		r.IgnoreEOS = true
	}))
	if r.usage.CompletionTokens != 10 || r.choices[0].finish != "length" {
		t.Errorf("completion tokens %d finish %q, want 10 length", r.usage.CompletionTokens, r.choices[0].finish)
	}
	if r.choices[0].role != "" {
		t.Errorf("completion event has role %q", r.choices[0].role)
	}
}

func TestGreedyDeterministic(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	j := func() *job.Job {
		return chatJob("Tell me a story", func(r *openai.ChatCompletionRequest) {
			r.MaxTokens = ptr(16)
			r.Temperature = ptr(0.0)
		})
	}
	a, b := mustRun(t, e, j()), mustRun(t, e, j())
	if a.choices[0].text != b.choices[0].text || a.choices[0].reasoning != b.choices[0].reasoning {
		t.Errorf("greedy runs differ: %q vs %q", a.choices[0].text, b.choices[0].text)
	}
}

func TestSeededSampling(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	j := func(seed int64, n int) *job.Job {
		return completionJob("Once upon a time", func(r *openai.CompletionRequest) {
			r.MaxTokens = ptr(16)
			r.Temperature = ptr(1.0)
			r.Seed = ptr(seed)
			r.N = ptr(n)
			r.IgnoreEOS = true
		})
	}
	a, b, c := mustRun(t, e, j(42, 1)), mustRun(t, e, j(42, 1)), mustRun(t, e, j(43, 1))
	if a.choices[0].text != b.choices[0].text {
		t.Errorf("same seed, different text: %q vs %q", a.choices[0].text, b.choices[0].text)
	}
	if a.choices[0].text == c.choices[0].text {
		t.Errorf("seeds 42 and 43 gave the same text %q", a.choices[0].text)
	}
	// n=2: choice i uses seed+i, so choice 1 of seed 42 is choice 0 of seed 43.
	two := mustRun(t, e, j(42, 2))
	if len(two.choices) != 2 {
		t.Fatalf("n=2 gave %d choices", len(two.choices))
	}
	if two.choices[0].text != a.choices[0].text || two.choices[1].text != c.choices[0].text {
		t.Errorf("n=2 choices %q, %q; want %q, %q", two.choices[0].text, two.choices[1].text, a.choices[0].text, c.choices[0].text)
	}
	if two.usage.CompletionTokens != 32 {
		t.Errorf("n=2 completion tokens %d, want 32", two.usage.CompletionTokens)
	}
}

func TestStopStringAcrossTokens(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	base := func(stop []string) *job.Job {
		return completionJob("The weather today is", func(r *openai.CompletionRequest) {
			r.MaxTokens = ptr(24)
			r.Temperature = ptr(0.0)
			r.IgnoreEOS = true
			r.Logprobs = ptr(0)
			r.Stop = stop
		})
	}
	full := mustRun(t, e, base(nil)).choices[0]
	// Find a boundary between two tokens (from the logprobs) with text on
	// both sides, and make a stop string straddling it.
	var stopStr string
	var at int
	off := 0
	for i := 0; i+1 < len(full.logprobs); i++ {
		a, b := full.logprobs[i].Token, full.logprobs[i+1].Token
		off += len(a)
		ra, rb := []rune(a), []rune(b)
		if i >= 3 && len(ra) >= 2 && len(rb) >= 2 && utf8.ValidString(a+b) && strings.HasPrefix(full.text[off:], b) {
			stopStr = string(ra[len(ra)-2:]) + string(rb[:2])
			at = strings.Index(full.text, stopStr)
			break
		}
	}
	if stopStr == "" || at < 0 {
		t.Skipf("no suitable token boundary in %q", full.text)
	}
	r := mustRun(t, e, base([]string{stopStr})).choices[0]
	if r.text != full.text[:at] {
		t.Errorf("with stop %q: text %q, want %q", stopStr, r.text, full.text[:at])
	}
	if strings.Contains(r.text, stopStr) || r.finish != "stop" {
		t.Errorf("stop string emitted or finish %q", r.finish)
	}
	var matched []string
	for _, ev := range mustRun(t, e, base([]string{"never-in-this-text", stopStr})).events {
		if ev.StopSequence != "" {
			matched = append(matched, ev.StopSequence)
		}
	}
	if len(matched) != 1 || matched[0] != stopStr {
		t.Errorf("stop sequences reported %q, want [%q] on the last event", matched, stopStr)
	}
	for _, ev := range mustRun(t, e, base(nil)).events {
		if ev.StopSequence != "" {
			t.Errorf("no stop string, yet stop sequence %q reported", ev.StopSequence)
		}
	}
}

func TestLogprobs(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	for _, temp := range []float64{0, 1} {
		r := mustRun(t, e, chatJob("Count to ten", func(r *openai.ChatCompletionRequest) {
			r.MaxTokens = ptr(10)
			r.Temperature = ptr(temp)
			r.Seed = ptr(int64(7))
			r.Logprobs = true
			r.TopLogprobs = ptr(5)
		}))
		c := r.choices[0]
		if len(c.logprobs) != r.usage.CompletionTokens {
			t.Fatalf("temperature %v: %d logprobs for %d tokens", temp, len(c.logprobs), r.usage.CompletionTokens)
		}
		for i, lp := range c.logprobs {
			if len(lp.TopLogprobs) != 5 {
				t.Fatalf("token %d: %d top logprobs, want 5", i, len(lp.TopLogprobs))
			}
			if lp.Logprob > 0 || math.IsNaN(lp.Logprob) {
				t.Errorf("token %d: logprob %v", i, lp.Logprob)
			}
			for k := 1; k < len(lp.TopLogprobs); k++ {
				if lp.TopLogprobs[k].Logprob > lp.TopLogprobs[k-1].Logprob {
					t.Errorf("token %d: top logprobs not sorted: %+v", i, lp.TopLogprobs)
				}
			}
			if lp.Logprob > lp.TopLogprobs[0].Logprob+1e-6 {
				t.Errorf("token %d: logprob %v above the best alternative %v", i, lp.Logprob, lp.TopLogprobs[0].Logprob)
			}
			for _, a := range lp.TopLogprobs {
				if a.Token == lp.Token && string(intsToBytes(a.Bytes)) == string(intsToBytes(lp.Bytes)) && math.Abs(a.Logprob-lp.Logprob) > 1e-6 {
					t.Errorf("token %d %q: logprob %v but %v among the alternatives", i, lp.Token, lp.Logprob, a.Logprob)
				}
			}
			if temp == 0 && (lp.Token != lp.TopLogprobs[0].Token || lp.Logprob != lp.TopLogprobs[0].Logprob) {
				t.Errorf("greedy token %d %q (%v) is not the top alternative %+v", i, lp.Token, lp.Logprob, lp.TopLogprobs[0])
			}
			if string(intsToBytes(lp.Bytes)) != lp.Token && strings.ToValidUTF8(string(intsToBytes(lp.Bytes)), "\uFFFD") != lp.Token {
				t.Errorf("token %d: bytes %v do not spell %q", i, lp.Bytes, lp.Token)
			}
		}
	}
}

func intsToBytes(v []int) []byte {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return b
}

func TestContextLength(t *testing.T) {
	e := newEngine(t, "qwen3", func(c *Config) { c.MaxContext = 64 })
	_, err := run(t, e, chatJob("hi", func(r *openai.ChatCompletionRequest) { r.MaxTokens = ptr(100) }))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.Status != 400 || oe.Param != "messages" {
		t.Fatalf("got %v, want a 400 naming messages", err)
	}
	_, err = run(t, e, completionJob(strings.Repeat("word ", 80), nil))
	if !errors.As(err, &oe) || oe.Status != 400 || oe.Param != "prompt" {
		t.Fatalf("got %v, want a 400 naming prompt", err)
	}
	// Without max_tokens the completion fills the remaining context.
	r := mustRun(t, e, chatJob("hi", func(r *openai.ChatCompletionRequest) { r.IgnoreEOS = true; r.Temperature = ptr(0.0) }))
	if r.usage.TotalTokens != 64 || r.choices[0].finish != "length" {
		t.Errorf("usage %+v finish %q, want 64 tokens in all and length", r.usage, r.choices[0].finish)
	}
}

func TestBadParams(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	for _, tc := range []struct {
		param string
		j     *job.Job
	}{
		{"logit_bias", chatJob("x", func(r *openai.ChatCompletionRequest) { r.LogitBias = map[string]float64{"999999": 1} })},
		{"response_format.json_schema.schema", chatJob("x", func(r *openai.ChatCompletionRequest) {
			// strict: a lookahead cannot be enforced
			r.ResponseFormat = &openai.ResponseFormat{Type: "json_schema", JSONSchema: &openai.JSONSchema{Name: "s", Strict: ptr(true), Schema: []byte(`{"type":"string","pattern":"a(?=b)"}`)}}
		})},
		{"response_format.json_schema.schema", chatJob("x", func(r *openai.ChatCompletionRequest) {
			r.ResponseFormat = &openai.ResponseFormat{Type: "json_schema", JSONSchema: &openai.JSONSchema{Name: "s", Schema: []byte(`{"type":5}`)}}
		})},
		{"tools[0].function.parameters", chatJob("x", func(r *openai.ChatCompletionRequest) {
			r.Tools = []openai.Tool{{Type: "function", Function: openai.FunctionDefinition{Name: "f", Parameters: []byte(`{"type":5}`)}}}
		})},
		{"echo", completionJob("x", func(r *openai.CompletionRequest) { r.Echo = true })},
	} {
		_, err := run(t, e, tc.j)
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.Status != 400 || oe.Param != tc.param {
			t.Errorf("got %v, want a 400 naming %s", err, tc.param)
		}
	}
}

func TestConcurrentMatchesSerial(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	prompts := []string{"alpha", "beta gamma", "delta epsilon zeta", "eta"}
	j := func(p string) *job.Job {
		return completionJob(p, func(r *openai.CompletionRequest) {
			r.MaxTokens = ptr(12)
			r.Temperature = ptr(0.0)
			r.IgnoreEOS = true
		})
	}
	want := make([]string, len(prompts))
	for i, p := range prompts {
		want[i] = mustRun(t, e, j(p)).choices[0].text
	}
	got := make([]string, len(prompts))
	passes := e.passes.Load()
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := run(t, e, j(p))
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = r.choices[0].text
		}()
	}
	wg.Wait()
	// 4 sequences × 12 steps each; batched, far fewer passes than 48.
	if n := e.passes.Load() - passes; n > 36 {
		t.Errorf("%d forward passes for 4 concurrent sequences of 12 steps: not batched", n)
	} else {
		t.Logf("%d forward passes for 48 sequence steps", n)
	}
	for i := range prompts {
		if got[i] != want[i] {
			t.Errorf("prompt %q: concurrent %q, serial %q", prompts[i], got[i], want[i])
		}
	}
}

func TestCancelFreesSlot(t *testing.T) {
	e := newEngine(t, "qwen3", func(c *Config) { c.MaxSeqs = 1 })
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var once sync.Once
		err := e.Generate(ctx, completionJob("go on forever", func(r *openai.CompletionRequest) {
			r.MaxTokens = ptr(1500)
			r.IgnoreEOS = true
		}), func(ev *job.Event) error {
			once.Do(func() { close(started) })
			return nil
		})
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("generation did not start")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled generation returned %v, want context.Canceled", err)
		}
	case <-time.After(time.Second):
		t.Fatal("cancelled generation did not return within a second")
	}
	// The only slot is free again.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if _, err := runCtx(ctx2, t, e, completionJob("next", func(r *openai.CompletionRequest) { r.MaxTokens = ptr(2) })); err != nil {
		t.Fatalf("next request: %v", err)
	}
}

func TestCloseIdempotent(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, e, completionJob("x", nil))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.Status != 503 {
		t.Errorf("after Close: %v, want 503", err)
	}
}

func TestGGUFCompletion(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ModelDir = "../testdata/gguf/qwen3-q8_0.gguf"
	cfg.Threads = 2
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r := mustRun(t, e, completionJob("Hello", func(r *openai.CompletionRequest) {
		r.MaxTokens = ptr(5)
		r.Temperature = ptr(0.0)
		r.IgnoreEOS = true
	}))
	if r.usage.CompletionTokens != 5 {
		t.Errorf("usage %+v", r.usage)
	}
	// The fixture has no chat template.
	if _, err := run(t, e, chatJob("hi", nil)); err == nil {
		t.Error("chat without a template succeeded")
	}
}

func TestResume(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	j := func() *job.Job {
		return completionJob("Resume me", func(r *openai.CompletionRequest) {
			r.MaxTokens = ptr(12)
			r.Temperature = ptr(1.0)
			r.Seed = ptr(int64(5))
			r.IgnoreEOS = true
			r.Logprobs = ptr(0)
		})
	}
	full := mustRun(t, e, j()).choices[0]
	var ids []int
	for _, lp := range full.logprobs {
		id, ok := e.tok.TokenID(lp.Token)
		if !ok {
			// Byte-level spelling differs from the text: look it up by bytes.
			id = -1
			for cand := range e.model.VocabSize() {
				if b, ok := e.tok.TokenBytes(cand); ok && string(b) == string(intsToBytes(lp.Bytes)) {
					id = cand
					break
				}
			}
		}
		ids = append(ids, id)
	}
	prefix := e.tok.Decode(ids[:5])
	if !strings.HasPrefix(full.text, prefix) {
		t.Fatalf("token ids %v do not spell the text %q", ids, full.text)
	}
	var got strings.Builder
	var usage *openai.Usage
	err := e.GenerateResume(context.Background(), j(), &job.Resume{Tokens: [][]int{ids[:5]}}, func(ev *job.Event, _ []int) error {
		got.WriteString(ev.Text)
		if ev.Usage != nil {
			usage = ev.Usage
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := full.text[len(prefix):]; got.String() != want {
		t.Errorf("resumed text %q, want %q", got.String(), want)
	}
	if usage == nil || usage.CompletionTokens != 12 {
		t.Errorf("usage %+v, want 12 completion tokens", usage)
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	modelDir(t, "qwen3")
	before := runtime.NumGoroutine()
	cfg := DefaultConfig()
	cfg.ModelDir = modelDir(t, "qwen3")
	cfg.Threads = 2
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, e, chatJob("hi", func(r *openai.ChatCompletionRequest) { r.MaxTokens = ptr(3); r.N = ptr(2) }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = runCtx(ctx, t, e, chatJob("hi", nil))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestReasoningPromptOpen(t *testing.T) {
	e := newEngine(t, "qwen3.5", nil)
	r := mustRun(t, e, chatJob("Think about it", func(r *openai.ChatCompletionRequest) {
		r.MaxTokens = ptr(8)
		r.Temperature = ptr(0.0)
		r.IgnoreEOS = true
	}))
	c := r.choices[0]
	if c.reasoning == "" || c.text != "" {
		t.Errorf("prompt opened <think>: reasoning %q content %q, want all reasoning", c.reasoning, c.text)
	}
	if d := r.usage.CompletionTokensDetails; d == nil || d.ReasoningTokens != 8 {
		t.Errorf("completion details %+v, want 8 reasoning tokens", d)
	}
	r = mustRun(t, e, chatJob("Think about it", func(r *openai.ChatCompletionRequest) {
		r.MaxTokens = ptr(8)
		r.Temperature = ptr(0.0)
		r.IgnoreEOS = true
		r.ChatTemplateKwargs = map[string]json.RawMessage{"enable_thinking": json.RawMessage("false")}
	}))
	c = r.choices[0]
	if c.reasoning != "" || c.text == "" {
		t.Errorf("enable_thinking false: reasoning %q content %q, want all content", c.reasoning, c.text)
	}
	// reasoning_effort maps onto the same switch.
	for effort, thinks := range map[string]bool{"none": false, "minimal": false, "low": true, "high": true} {
		r = mustRun(t, e, chatJob("Think about it", func(r *openai.ChatCompletionRequest) {
			r.MaxTokens = ptr(8)
			r.Temperature = ptr(0.0)
			r.IgnoreEOS = true
			r.ReasoningEffort = effort
		}))
		c = r.choices[0]
		if got := c.reasoning != "" && c.text == ""; got != thinks {
			t.Errorf("reasoning_effort %s: reasoning %q content %q, want thinking %v", effort, c.reasoning, c.text, thinks)
		}
	}
}

// TestResumeFromEventTokens resumes a seeded generation from the token ids
// its events reported, cut after each event: the continuation must be the
// uninterrupted run's remainder, and the ids must cover every generated
// token exactly once.
func TestResumeFromEventTokens(t *testing.T) {
	e := newEngine(t, "qwen3", nil)
	var stops []string
	j := func() *job.Job {
		return completionJob("Resume me", func(r *openai.CompletionRequest) {
			r.MaxTokens = ptr(16)
			r.Temperature = ptr(1.0)
			r.Seed = ptr(int64(7))
			r.IgnoreEOS = true
			r.Stop = stops
		})
	}
	first := resumeFromEventTokens(t, e, j)
	// Stop strings that never match but start with some tokens' text hold
	// that text back: its ids ride on a later event.
	for _, k := range []int{1, 4, 9} {
		stops = append(stops, first[k]+"\x00never")
	}
	if n := len(resumeFromEventTokens(t, e, j)); n >= 16 {
		t.Errorf("stop strings %q held nothing back (%d events with ids)", stops, n)
	}
}

// resumeFromEventTokens runs job, checks resuming after every event and
// returns the text of the events that carried ids.
func resumeFromEventTokens(t *testing.T, e *Runner, j func() *job.Job) []string {
	t.Helper()
	type cut struct {
		ids  int    // ids delivered through this event
		text string // text delivered through this event
	}
	var ids []int
	var text strings.Builder
	var cuts []cut
	err := e.GenerateResume(context.Background(), j(), nil, func(ev *job.Event, toks []int) error {
		if ev.Text != "" && len(toks) == 0 && ev.FinishReason == "" {
			t.Errorf("event with text %q and no token ids", ev.Text)
		}
		if ev.Usage != nil && len(toks) > 0 {
			t.Errorf("usage event with token ids %v", toks)
		}
		ids = append(ids, toks...)
		text.WriteString(ev.Text)
		if len(toks) > 0 {
			cuts = append(cuts, cut{len(ids), text.String()})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	full := text.String()
	t.Logf("%d ids over %d events: %q", len(ids), len(cuts), full)
	var texts []string
	prev := ""
	for _, c := range cuts {
		texts = append(texts, c.text[len(prev):])
		prev = c.text
	}
	if len(ids) != 16 {
		t.Fatalf("events reported %d token ids, want 16", len(ids))
	}
	if len(cuts) < 2 {
		t.Fatalf("only %d events carried ids", len(cuts))
	}
	if got := mustRun(t, e, j()).choices[0].text; got != full {
		t.Fatalf("GenerateResume text %q, Generate %q", full, got)
	}
	for _, c := range cuts[:len(cuts)-1] {
		var got strings.Builder
		var rest []int
		err := e.GenerateResume(context.Background(), j(), &job.Resume{Tokens: [][]int{ids[:c.ids]}}, func(ev *job.Event, toks []int) error {
			got.WriteString(ev.Text)
			rest = append(rest, toks...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := full[len(c.text):]; got.String() != want {
			t.Errorf("resumed after %d ids: text %q, want %q", c.ids, got.String(), want)
		}
		if !slices.Equal(rest, ids[c.ids:]) {
			t.Errorf("resumed after %d ids: ids %v, want %v", c.ids, rest, ids[c.ids:])
		}
	}
	return texts
}

// TestTruncationAuto: with truncation "auto" a conversation too long for
// the context loses its oldest turns after the system message (an
// assistant tool call together with its results) until prompt and
// completion fit; without it the request is refused.
func TestTruncationAuto(t *testing.T) {
	e := newEngine(t, "qwen3", func(c *Config) { c.MaxContext = 160 })
	long := strings.Repeat("word ", 30)
	conv := func(r *openai.ChatCompletionRequest) {
		r.MaxTokens = ptr(8)
		r.Temperature = ptr(0.0)
		r.Messages = []openai.ChatMessage{{Role: "system", Content: openai.TextContent("Be brief.")}}
		for i := 0; i < 4; i++ {
			r.Messages = append(r.Messages,
				openai.ChatMessage{Role: "user", Content: openai.TextContent(fmt.Sprintf("question %d: %s", i, long))},
				openai.ChatMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: fmt.Sprintf("c%d", i), Type: "function", Function: openai.FunctionCall{Name: "f", Arguments: "{}"}}}},
				openai.ChatMessage{Role: "tool", ToolCallID: fmt.Sprintf("c%d", i), Content: openai.TextContent("ok")})
		}
		r.Messages = append(r.Messages, openai.ChatMessage{Role: "user", Content: openai.TextContent("last question")})
	}
	_, err := run(t, e, chatJob("", conv))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.Status != 400 || !strings.Contains(oe.Message, "maximum context length") {
		t.Fatalf("without truncation: error %v, want the context-length 400", err)
	}
	j := chatJob("", func(r *openai.ChatCompletionRequest) { conv(r); r.Truncation = "auto" })
	before := len(j.Chat.Messages)
	r := mustRun(t, e, j)
	if r.usage.PromptTokens+8 > 160 || r.usage.PromptTokens < 20 {
		t.Errorf("truncated prompt has %d tokens, want it to fit 160 with 8 to spare", r.usage.PromptTokens)
	}
	if len(j.Chat.Messages) != before {
		t.Errorf("the request's messages changed: %d, want %d (truncate copies)", len(j.Chat.Messages), before)
	}
	kept := e.truncate(j.Chat).Messages
	if kept[0].Role != "system" || kept[len(kept)-1].Content.String() != "last question" || kept[1].Role != "user" {
		t.Errorf("kept messages %+v: want the system message, whole turns, the last question", kept)
	}
	if len(kept) >= before {
		t.Errorf("kept %d of %d messages", len(kept), before)
	}
}
