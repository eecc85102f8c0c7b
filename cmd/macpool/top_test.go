package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// topBuffer is a bytes.Buffer safe for a writer and a poller.
type topBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *topBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *topBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestTopOnce runs `macpool up --backend test` in-process, keeps requests
// flowing, and checks one frame of `macpool top --once` against it.
func TestTopOnce(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr topBuffer
	done := make(chan error, 1)
	go func() {
		done <- runUp(ctx, []string{"--model", filepath.Join(dir, "tiny"), "--model-name", "tiny", "--backend", "test",
			"--slots", "2", "--test-token-delay", "2ms", "--name", "topc",
			"--http", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
			"--data-dir", filepath.Join(dir, "data"), "--fast-timeouts", "--log-level", "warn", "--no-discovery"}, &stdout, &stderr)
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("up: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("up did not stop within 30 s")
		}
	}()
	httpRE := regexp.MustCompile(`role=coordinator .*http=(\S+)`)
	var base string
	deadline := time.Now().Add(30 * time.Second)
	for base == "" || !strings.Contains(stdout.String(), "role=worker") {
		if m := httpRE.FindStringSubmatch(stdout.String()); m != nil {
			base = "http://" + m[1]
		}
		select {
		case err := <-done:
			t.Fatalf("up exited: %v (stderr %q)", err, stderr.String())
		case <-time.After(20 * time.Millisecond): // polling interval
		}
		if time.Now().After(deadline) {
			t.Fatalf("not started within 30 s; stdout %q stderr %q", stdout.String(), stderr.String())
		}
	}
	client := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	ask := func(rctx context.Context) error {
		_, err := client.Chat.Completions.New(rctx, oai.ChatCompletionNewParams{
			Model:    "tiny",
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("one two three four five")},
		})
		return err
	}
	// The first request waits for the worker to be ready.
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		err := ask(rctx)
		rcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer within 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}

	// Requests flow while top measures one interval.
	lctx, lcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lctx.Err() == nil {
				ask(lctx)
			}
		}()
	}
	var out, errb bytes.Buffer
	code := runMain(ctx, []string{"top", "--coordinator", strings.TrimPrefix(base, "http://"), "--once", "--interval", "500ms"}, &out, &errb)
	lcancel()
	wg.Wait()
	if code != 0 {
		t.Fatalf("top exited %d: %s", code, errb.String())
	}
	frame := out.String()
	t.Logf("frame:\n%s", frame)
	if strings.Contains(frame, "\x1b[") {
		t.Errorf("--once frame has ANSI escapes")
	}
	for _, re := range []string{
		`macpool top — coordinator topc, raft leader topc`,
		`(?m)^NODE\s+ROLE\s+CHIP\s+MEMORY\s+MODELS\s+SLOTS BUSY/FREE\s+KV FREE\s+TOKENS/S$`,
		`(?m)^topc\s+coordinator \(leader\)\s+.*\s+-\s+-\s+-\s+-$`,
		// the worker: 2 slots, busy+free = 2, tokens flowing
		`(?m)^topc-worker\s+worker\s+.*\s+tiny\s+([0-2])/([0-2])( \((not ready|leaving)\))?\s+-\s+[0-9.]*[1-9][0-9.]*$`, // the test engine has no KV pool
		`(?m)^MODEL\s+QUEUED\s+REQUESTS/S\s+TTFT P50\s+QUEUE WAIT P50\s+TOKENS/S$`,
		// the model: requests/s > 0, a TTFT and a queue wait in ms
		`(?m)^tiny\s+\d+\s+[0-9.]*[1-9][0-9.]*\s+[0-9.]+ms\s+[0-9.]+ms\s+[0-9.]*[1-9][0-9.]*$`,
		// identical prompts: after the first, each is offered to its holder
		`(?m)^prefix routing, last interval: [1-9]\d* offered to the prefix holder, \d+ taken, \d+ busy, 0 queued after a lost start$`,
	} {
		if !regexp.MustCompile(re).MatchString(frame) {
			t.Errorf("frame does not match %s", re)
		}
	}
	if m := regexp.MustCompile(`(?m)^topc-worker\s+worker\s+.*\s+tiny\s+([0-2])/([0-2])`).FindStringSubmatch(frame); m != nil {
		if m[1][0]-'0'+m[2][0]-'0' != 2 {
			t.Errorf("worker busy %s + free %s, want 2 slots", m[1], m[2])
		}
	}

	// Live mode redraws every interval until ctx ends (Ctrl-C), then exits 0.
	out.Reset()
	errb.Reset()
	lctx2, lcancel2 := context.WithTimeout(ctx, 700*time.Millisecond)
	code = runMain(lctx2, []string{"top", "--coordinator", base, "--interval", "150ms"}, &out, &errb)
	lcancel2()
	if n := strings.Count(out.String(), "\x1b[H\x1b[2J"); code != 0 || n < 2 {
		t.Errorf("live top: exit %d, %d redraws (want ≥ 2); stderr %q", code, n, errb.String())
	}

	// Usage errors.
	out.Reset()
	errb.Reset()
	if code := runMain(ctx, []string{"top", "--interval", "1ms", "--once"}, &out, &errb); code != 2 {
		t.Errorf("top --interval 1ms: exit %d, want 2 (usage); stderr %q", code, errb.String())
	}
}
