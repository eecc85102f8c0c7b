package worker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/job"
)

func chat(text string, max int) *job.Job {
	return &job.Job{Kind: job.KindChat, Model: "m", Chat: &openai.ChatCompletionRequest{
		Model: "m", Messages: []openai.ChatMessage{{Role: "user", Content: openai.TextContent(text)}}, MaxTokens: &max,
	}}
}

func run(t *testing.T, e Engine, ctx context.Context, j *job.Job) ([]*job.Event, error) {
	t.Helper()
	var evs []*job.Event
	err := e.Generate(ctx, j, func(ev *job.Event) error { evs = append(evs, ev); return nil })
	return evs, err
}

func TestTestEngine(t *testing.T) {
	for _, tc := range []struct {
		name       string
		j          *job.Job
		text, stop string
		completion int
	}{
		{"echo", chat("one two three", 10), "one two three", "stop", 3},
		{"length", chat("one two three", 2), "one two", "length", 2},
		{"completion", &job.Job{Kind: job.KindCompletion, Model: "m", Completion: &openai.CompletionRequest{
			Model: "m", Prompt: openai.Prompt{Texts: []string{"a b"}}}}, "a b", "stop", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := run(t, &TestEngine{}, context.Background(), tc.j)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, ev := range evs {
				b.WriteString(ev.Text)
			}
			last := evs[len(evs)-1]
			if b.String() != tc.text || last.FinishReason != tc.stop || last.Usage == nil || last.Usage.CompletionTokens != tc.completion {
				t.Fatalf("got %q finish %q usage %+v, want %q %q %d", b.String(), last.FinishReason, last.Usage, tc.text, tc.stop, tc.completion)
			}
		})
	}
}

func TestTestEngineCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	e := &TestEngine{TokenDelay: time.Hour}
	done := make(chan error, 1)
	go func() { _, err := run(t, e, ctx, chat("a b c", 10)); done <- err }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Generate ignored cancellation")
	}
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	c.Gossip = cluster.FastConfig()
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) {}, "name must be set"},
		{func(c *Config) { c.Name = "w" }, "at least one model"},
		{func(c *Config) { c.Name, c.Models = "w", []string{"m"} }, "engine must be set"},
		{func(c *Config) { c.Name, c.Models, c.Engine, c.Slots = "w", []string{"m"}, &TestEngine{}, 0 }, "slots 0 must be at least 1"},
	} {
		cc := c
		tc.mut(&cc)
		if err := cc.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want error containing %q", err, tc.want)
		}
	}
}
