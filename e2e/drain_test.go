package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// drainCluster starts a coordinator and two one-slot test workers (50 ms
// per token) with the given drain timeout, and returns the API base URL.
func drainCluster(t *testing.T, drainTimeout string) (base string, workers map[string]*proc) {
	t.Helper()
	dir := t.TempDir()
	coord := start(t, "coordinator", "coordinator", "--name", "coord-1", "--http", "127.0.0.1:0",
		"--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "coord"),
		"--fast-timeouts")
	workers = map[string]*proc{}
	for _, name := range []string{"worker-a", "worker-b"} {
		workers[name] = start(t, "worker", "worker", "--name", name, "--join", coord.fields["gossip"],
			"--gossip", "127.0.0.1:0", "--model", model, "--backend", "test", "--slots", "1",
			"--test-token-delay", "50ms", "--fast-timeouts", "--drain-timeout", drainTimeout)
	}
	base = "http://" + coord.fields["http"]
	waitStatus(t, base, func(s string) bool { return strings.Count(s, `"ready":true`) == 2 })
	return base, workers
}

func seededParams(n int) (oai.ChatCompletionNewParams, string) {
	var words []string
	for i := 0; i < n; i++ {
		words = append(words, fmt.Sprintf("w%02d", i))
	}
	return oai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []oai.ChatCompletionMessageParamUnion{oai.UserMessage(strings.Join(words, " "))},
		Seed:      oai.Int(7),
		MaxTokens: oai.Int(int64(n + 10)),
	}, strings.Join(words, " ")
}

// busyWorker returns the worker the status shows running a job.
func busyWorker(t *testing.T, base string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := getStatus(base)
		if err == nil {
			for _, n := range st.Nodes {
				if n.Role == "worker" && n.Running > 0 {
					return n.Name
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no worker shows a running job: %+v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// waitLeaving waits until the coordinator sees node gossip that it leaves.
func waitLeaving(t *testing.T, base, node string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(base + "/v1/admin/drain/" + node)
		if err == nil {
			var st struct{ Leaving bool }
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil && st.Leaving {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not gossip leaving 5 s after SIGTERM (%v)", node, err)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

// waitExit waits for p to exit and checks its status is 0.
func waitExit(t *testing.T, p *proc, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("worker did not exit within %v", within)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("worker exited with status %d, want 0", code)
	}
	return time.Since(start)
}

// SIGTERM to a worker in the middle of a stream: it takes no new job, the
// stream it serves completes (from it), then it exits 0.
func TestProcessesDrainOnSIGTERM(t *testing.T) {
	base, workers := drainCluster(t, "30s")
	client := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	params, want := seededParams(40) // 2 s at 50 ms per token

	var victim string
	var termAt time.Time
	got := streamText(t, client.Chat.Completions.NewStreaming(ctx, params), func(chunks int) {
		if chunks != 5 {
			return
		}
		victim = busyWorker(t, base)
		termAt = time.Now()
		workers[victim].cmd.Process.Signal(syscall.SIGTERM)
	})
	if victim == "" {
		t.Fatal("the stream ended before the SIGTERM")
	}
	if got != want {
		t.Fatalf("text:\n got %q\nwant %q", got, want)
	}
	select {
	case <-workers[victim].done:
		t.Fatalf("%s exited before the stream it served ended", victim)
	default:
	}
	took := waitExit(t, workers[victim], 15*time.Second)
	t.Logf("SIGTERM to %s after 5 chunks: stream complete, exit 0, %v after the stream ended (%v after the signal)",
		victim, took.Round(time.Millisecond), time.Since(termAt).Round(time.Millisecond))
	// The other worker still serves.
	c, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
		Model: model, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("after the drain")},
	})
	if err != nil || c.Choices[0].Message.Content != "after the drain" {
		t.Fatalf("request after the drain: %v", err)
	}
}

// A second SIGTERM hands the running job off at once: the stream still
// completes without an error (resumed on the other worker) and the text
// equals an uninterrupted run.
func TestProcessesDrainSecondSignalHandsOff(t *testing.T) {
	base, workers := drainCluster(t, "30s")
	client := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	params, want := seededParams(60) // 3 s at 50 ms per token
	var victim string
	var second time.Time
	exited := make(chan time.Time, 1)
	got := streamText(t, client.Chat.Completions.NewStreaming(ctx, params), func(chunks int) {
		switch chunks {
		case 5:
			victim = busyWorker(t, base)
			go func() { <-workers[victim].done; exited <- time.Now() }()
			workers[victim].cmd.Process.Signal(syscall.SIGTERM)
		case 8:
			// Signals sent back to back may merge into one: send the
			// second once the first took effect (the node gossips leaving).
			waitLeaving(t, base, victim)
			second = time.Now()
			workers[victim].cmd.Process.Signal(syscall.SIGTERM)
		}
	})
	ended := time.Now()
	if got != want {
		t.Fatalf("text after the handoff:\n got %q\nwant %q", got, want)
	}
	waitExit(t, workers[victim], 15*time.Second)
	exitAt := <-exited
	// The victim left long before the 50 tokens after the second signal
	// (2.5 s) were generated: the other worker finished the stream (had
	// the victim kept the job, it would exit after the stream's end).
	if !exitAt.Before(ended.Add(-500 * time.Millisecond)) {
		t.Fatalf("%s exited %v after the second signal, the stream ended %v after it: the job was not handed off",
			victim, exitAt.Sub(second), ended.Sub(second))
	}
	t.Logf("two SIGTERMs to %s: it exited (0) %v after the second, the stream completed on the other worker %v after it",
		victim, exitAt.Sub(second).Round(time.Millisecond), ended.Sub(second).Round(time.Millisecond))
}

// macpool drain NODE --timeout: the node hands its job off when the
// timeout passes, the client's stream completes elsewhere with the same
// text, the command reports the node left and the worker exits 0.
func TestProcessesDrainCommand(t *testing.T) {
	base, workers := drainCluster(t, "30s")
	client := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	params, want := seededParams(60)
	var victim string
	type cmdResult struct {
		out string
		err error
	}
	cmdDone := make(chan cmdResult, 1)
	got := streamText(t, client.Chat.Completions.NewStreaming(ctx, params), func(chunks int) {
		if chunks != 5 {
			return
		}
		victim = busyWorker(t, base)
		go func() {
			out, err := exec.CommandContext(ctx, binary, "drain", victim, "--coordinator", strings.TrimPrefix(base, "http://"),
				"--timeout", "300ms").CombinedOutput()
			cmdDone <- cmdResult{string(out), err}
		}()
	})
	if got != want {
		t.Fatalf("text after the drain:\n got %q\nwant %q", got, want)
	}
	r := <-cmdDone
	if r.err != nil || !strings.Contains(r.out, victim+": left the cluster") {
		t.Fatalf("macpool drain %s: %v\n%s", victim, r.err, r.out)
	}
	t.Logf("macpool drain output:\n%s", r.out)
	waitExit(t, workers[victim], 10*time.Second)

	// Errors are clear: an unknown node is a 404, a coordinator is no worker.
	out, err := exec.Command(binary, "drain", "nobody", "--coordinator", strings.TrimPrefix(base, "http://")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "404") {
		t.Fatalf("drain of an unknown node: %v\n%s", err, out)
	}
}

// macpool keys create/list/revoke against a coordinator process.
func TestProcessesKeysCLI(t *testing.T) {
	dir := t.TempDir()
	coord := start(t, "coordinator", "coordinator", "--name", "coord-1", "--http", "127.0.0.1:0",
		"--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "coord"),
		"--fast-timeouts")
	start(t, "worker", "worker", "--name", "worker-a", "--join", coord.fields["gossip"],
		"--gossip", "127.0.0.1:0", "--model", model, "--backend", "test", "--fast-timeouts")
	base := "http://" + coord.fields["http"]
	waitStatus(t, base, func(s string) bool { return strings.Count(s, `"ready":true`) == 1 })
	addr := coord.fields["http"]
	run := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(binary, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	secretRE := regexp.MustCompile(`secret: (mp-[0-9a-f]+)`)

	out, err := run(nil, "keys", "create", "--id", "ops", "--admin", "--coordinator", addr)
	m := secretRE.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("keys create --admin: %v\n%s", err, out)
	}
	admin := m[1]
	adminEnv := []string{"MACPOOL_ADMIN_KEY=" + admin}
	out, err = run(adminEnv, "keys", "create", "--id", "alice", "--coordinator", addr)
	m = secretRE.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("keys create alice: %v\n%s", err, out)
	}
	alice := m[1]
	if out, err := run(nil, "keys", "list", "--coordinator", addr); err == nil || !strings.Contains(out, "401") {
		t.Fatalf("keys list without the admin key: %v\n%s", err, out)
	}
	out, err = run(nil, "keys", "list", "--coordinator", addr, "--admin-key", admin)
	if err != nil || !strings.Contains(out, "alice") || !strings.Contains(out, "ops") || strings.Contains(out, alice) || strings.Contains(out, admin) {
		t.Fatalf("keys list: %v\n%s", err, out)
	}
	client := func(key string) oai.Client {
		return oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	}
	ask := func(key string) error {
		c := client(key)
		_, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
			Model: model, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")},
		})
		return err
	}
	if err := ask(alice); err != nil {
		t.Fatalf("request with alice's key: %v", err)
	}
	if out, err := run(adminEnv, "keys", "revoke", "alice", "--coordinator", addr); err != nil || !strings.Contains(out, "revoked key alice") {
		t.Fatalf("keys revoke: %v\n%s", err, out)
	}
	var apiErr *oai.Error
	if err := ask(alice); !asStatus(err, &apiErr, 401) {
		t.Fatalf("request with a revoked key: got %v, want 401", err)
	}
	if out, err := run(adminEnv, "keys", "revoke", "alice", "--coordinator", addr); err == nil || !strings.Contains(out, "404") {
		t.Fatalf("revoke twice: %v\n%s", err, out)
	}
}

func asStatus(err error, target **oai.Error, status int) bool {
	return errors.As(err, target) && (*target).StatusCode == status
}

// With a cluster secret the admin endpoints want its admin token (or an
// admin key): macpool keys sends the token derived from -secret-file.
func TestProcessesAdminWithSecret(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "cluster.secret")
	env := append(os.Environ(), "MACPOOL_SECRET_FILE=", "MACPOOL_HOME="+filepath.Join(dir, "home"), "MACPOOL_ADMIN_KEY=", "MACPOOL_API_KEY=")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(binary, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("init", "--out", secret); err != nil {
		t.Fatalf("macpool init: %v\n%s", err, out)
	}
	coord := start(t, "coordinator", "coordinator", "--name", "coord-1", "--http", "127.0.0.1:0",
		"--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "coord"),
		"--fast-timeouts", "--secret-file", secret)
	addr := coord.fields["http"]
	if out, err := run("keys", "list", "--coordinator", addr); err == nil || !strings.Contains(out, "401") {
		t.Fatalf("keys list without the secret: %v\n%s, want 401", err, out)
	}
	out, err := run("keys", "create", "--id", "bob", "--coordinator", addr, "--secret-file", secret)
	if err != nil || !strings.Contains(out, "created key bob") {
		t.Fatalf("keys create with the secret's admin token: %v\n%s", err, out)
	}
	if out, err := run("keys", "list", "--coordinator", addr, "--secret-file", secret); err != nil || !strings.Contains(out, "bob") {
		t.Fatalf("keys list with the secret's admin token: %v\n%s", err, out)
	}
}
