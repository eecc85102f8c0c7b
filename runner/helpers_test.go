package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine/testmodel"
	"github.com/macpool/macpool/job"
)

// Model folders shared by the package's tests, written once.
var (
	modelsOnce sync.Once
	modelsErr  error
	modelDirs  = map[string]string{} // "qwen3" (JSON tools), "qwen3.5" and "coder" (XML tools)
	modelsRoot string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if modelsRoot != "" {
		os.RemoveAll(modelsRoot)
	}
	os.Exit(code)
}

func modelDir(t testing.TB, name string) string {
	t.Helper()
	modelsOnce.Do(func() {
		modelsRoot, modelsErr = os.MkdirTemp("", "serve-test-")
		if modelsErr != nil {
			return
		}
		for name, tmpl := range map[string]string{"qwen3": "", "qwen3.5": "Qwen3.5-4B.jinja", "coder": "Qwen3-Coder.jinja"} {
			opts := testmodel.Options{}
			if tmpl != "" {
				src, err := testmodel.Template(tmpl)
				if err != nil {
					modelsErr = err
					return
				}
				opts.ChatTemplate = src
			}
			dir := filepath.Join(modelsRoot, name)
			if modelsErr = testmodel.Write(dir, opts); modelsErr != nil {
				return
			}
			modelDirs[name] = dir
		}
	})
	if modelsErr != nil {
		t.Fatal(modelsErr)
	}
	return modelDirs[name]
}

// newEngine starts an Engine on a test model; closed at the end of the test.
func newEngine(t testing.TB, name string, edit func(*Config)) *Runner {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ModelDir = modelDir(t, name)
	cfg.Threads = 2
	cfg.MaxContext = 2048
	if edit != nil {
		edit(&cfg)
	}
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// result is a generation's events folded per choice.
type result struct {
	events  []*job.Event
	choices []choiceOut
	usage   *openai.Usage
}

type choiceOut struct {
	role      string
	text      string
	reasoning string
	calls     []openai.ToolCall
	logprobs  []openai.TokenLogprob
	finish    string
	events    int
}

// run generates with a deadline, so a scheduler bug fails the test
// instead of hanging it.
func run(t testing.TB, e *Runner, job *job.Job) (*result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return runCtx(ctx, t, e, job)
}

func runCtx(ctx context.Context, t testing.TB, e *Runner, jb *job.Job) (*result, error) {
	t.Helper()
	// The job travels as JSON in the cluster: do the same here.
	b, err := json.Marshal(jb)
	if err != nil {
		t.Fatal(err)
	}
	var j job.Job
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	r := &result{}
	var mu sync.Mutex
	err = e.Generate(ctx, &j, func(ev *job.Event) error {
		mu.Lock()
		defer mu.Unlock()
		r.events = append(r.events, ev)
		if ev.Usage != nil {
			if r.usage != nil {
				return fmt.Errorf("second usage event")
			}
			r.usage = ev.Usage
			return nil
		}
		for len(r.choices) <= ev.Choice {
			r.choices = append(r.choices, choiceOut{})
		}
		c := &r.choices[ev.Choice]
		if c.finish != "" {
			return fmt.Errorf("event after the final event of choice %d: %+v", ev.Choice, ev)
		}
		if c.events == 0 {
			c.role = ev.Role
		}
		c.events++
		c.text += ev.Text
		c.reasoning += ev.Reasoning
		for _, d := range ev.ToolCalls {
			if d.Index == len(c.calls) {
				c.calls = append(c.calls, openai.ToolCall{})
			}
			tc := &c.calls[d.Index]
			tc.ID += d.ID
			tc.Type += d.Type
			if d.Function != nil {
				tc.Function.Name += d.Function.Name
				tc.Function.Arguments += d.Function.Arguments
			}
		}
		if ev.Logprobs != nil {
			c.logprobs = append(c.logprobs, ev.Logprobs.Content...)
		}
		c.finish = ev.FinishReason
		return nil
	})
	return r, err
}

func ptr[T any](v T) *T { return &v }

func chatJob(content string, edit func(*openai.ChatCompletionRequest)) *job.Job {
	req := &openai.ChatCompletionRequest{
		Model:    "test",
		Messages: []openai.ChatMessage{{Role: "user", Content: openai.TextContent(content)}},
	}
	if edit != nil {
		edit(req)
	}
	return &job.Job{ID: "t", Kind: job.KindChat, Model: "test", Chat: req}
}

func completionJob(prompt string, edit func(*openai.CompletionRequest)) *job.Job {
	req := &openai.CompletionRequest{Model: "test", Prompt: openai.TextPrompt(prompt)}
	if edit != nil {
		edit(req)
	}
	return &job.Job{ID: "t", Kind: job.KindCompletion, Model: "test", Completion: req}
}

func mustRun(t testing.TB, e *Runner, job *job.Job) *result {
	t.Helper()
	r, err := run(t, e, job)
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	if r.usage == nil {
		t.Fatal("no usage event")
	}
	if last := r.events[len(r.events)-1]; last.Usage == nil {
		t.Fatal("usage is not the last event")
	}
	for i, c := range r.choices {
		if c.finish == "" {
			t.Fatalf("choice %d has no final event", i)
		}
	}
	return r
}

func short(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return strings.ReplaceAll(s, "\n", `\n`)
}
