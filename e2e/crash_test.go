package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestProcessesWorkerFailover SIGKILLs the worker serving a seeded streamed
// answer in the middle: the coordinator requeues the job with the tokens
// already sent, the other worker continues from them, and the client's
// stream carries on without an error, a duplicated or a missing token — the
// full text equals an uninterrupted run.
func TestProcessesWorkerFailover(t *testing.T) {
	dir := t.TempDir()
	coord := start(t, "coordinator", "coordinator", "--name", "coord-1", "--http", "127.0.0.1:0",
		"--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "coord"),
		"--fast-timeouts")
	workers := map[string]*proc{}
	for _, name := range []string{"worker-a", "worker-b"} {
		workers[name] = start(t, "worker", "worker", "--name", name, "--join", coord.fields["gossip"],
			"--gossip", "127.0.0.1:0", "--model", model, "--backend", "test", "--slots", "1",
			"--test-token-delay", "50ms", "--fast-timeouts")
	}
	base := "http://" + coord.fields["http"]
	waitStatus(t, base, func(s string) bool { return strings.Count(s, `"ready":true`) == 2 })

	client := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var words []string
	for i := 0; i < 60; i++ {
		words = append(words, fmt.Sprintf("w%02d", i))
	}
	params := oai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []oai.ChatCompletionMessageParamUnion{oai.UserMessage(strings.Join(words, " "))},
		Seed:      oai.Int(42),
		MaxTokens: oai.Int(100),
	}
	// The uninterrupted run.
	want := streamText(t, client.Chat.Completions.NewStreaming(ctx, params), nil)
	if want != strings.Join(words, " ") {
		t.Fatalf("uninterrupted run: %q", want)
	}

	var killed time.Time
	var victim string
	got := streamText(t, client.Chat.Completions.NewStreaming(ctx, params), func(chunks int) {
		if chunks != 10 {
			return
		}
		st, err := getStatus(base)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range st.Nodes {
			if n.Role == "worker" && n.Running > 0 {
				victim = n.Name
			}
		}
		if victim == "" {
			t.Fatalf("no worker running the job: %+v", st)
		}
		killed = time.Now()
		workers[victim].cmd.Process.Signal(syscall.SIGKILL)
	})
	if victim == "" {
		t.Fatal("the stream ended before the kill")
	}
	t.Logf("killed %s mid-stream; the stream finished %v later", victim, time.Since(killed))
	if got != want {
		t.Fatalf("text after failover:\n got %q\nwant %q", got, want)
	}
}

// streamText reads a chat stream to the end and returns its text; onChunk
// (if set) is called after every chunk with the count so far.
func streamText(t *testing.T, s interface {
	Next() bool
	Current() oai.ChatCompletionChunk
	Err() error
}, onChunk func(int)) string {
	t.Helper()
	var b strings.Builder
	n := 0
	for s.Next() {
		c := s.Current()
		if len(c.Choices) > 0 {
			b.WriteString(c.Choices[0].Delta.Content)
		}
		n++
		if onChunk != nil {
			onChunk(n)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v (after %d chunks, text %q)", err, n, b.String())
	}
	return b.String()
}
