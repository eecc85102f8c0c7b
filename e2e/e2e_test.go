package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "macpool-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "macpool")
	// Processes inherit the environment: keep a developer's own cluster
	// secret and keys (~/.config/macpool) out of the tests.
	os.Setenv("MACPOOL_HOME", filepath.Join(dir, "home"))
	for _, v := range []string{"MACPOOL_SECRET_FILE", "MACPOOL_CLUSTER_SECRET", "MACPOOL_API_KEY", "MACPOOL_ADMIN_KEY"} {
		os.Unsetenv(v)
	}
	build := exec.Command("go", "build", "-o", binary, "github.com/macpool/macpool/cmd/macpool")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building macpool:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running macpool process.
type proc struct {
	cmd    *exec.Cmd
	fields map[string]string // from its "listening ..." line
	done   chan struct{}
	stderr func() string // what it logged so far
}

// start runs macpool with args, waits for its "listening role=ROLE" line and
// registers a cleanup that interrupts it (then kills it after 10s).
func start(t *testing.T, role string, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, role, args...)
}

// startEnv is start with extra environment variables.
func startEnv(t *testing.T, env []string, role string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	var mu sync.Mutex
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return stderr.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	p.stderr = func() string { mu.Lock(); defer mu.Unlock(); return stderr.String() }
	lines := make(chan map[string]string, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f, ok := parseListening(sc.Text()); ok {
				lines <- f
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			mu.Lock()
			t.Logf("%s stderr:\n%s", args[0], lastLines(stderr.String(), 30))
			mu.Unlock()
		}
	})
	deadline := time.After(15 * time.Second)
	for {
		select {
		case f := <-lines:
			if f["role"] == role {
				p.fields = f
				return p
			}
		case <-p.done:
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("macpool %v exited before listening:\n%s", args, stderr.String())
		case <-deadline:
			t.Fatalf("macpool %v printed no listening line for role %s within 15s", args, role)
		}
	}
}

func (p *proc) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("%s exited with status %d after SIGINT, want 0", p.cmd.Args[1], code)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("pid %d did not exit 10s after SIGINT; killing", p.cmd.Process.Pid)
		p.cmd.Process.Kill()
		<-p.done
	}
}

func parseListening(line string) (map[string]string, bool) {
	if !strings.HasPrefix(line, "listening ") {
		return nil, false
	}
	f := map[string]string{}
	for _, kv := range strings.Fields(line)[1:] {
		if k, v, ok := strings.Cut(kv, "="); ok {
			f[k] = v
		}
	}
	return f, true
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

const model = "qwen3-echo"

func TestProcessesOpenAIClient(t *testing.T) {
	dir := t.TempDir()
	coord := start(t, "coordinator", "coordinator", "--name", "coord-1", "--http", "127.0.0.1:0",
		"--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "coord"),
		"--fast-timeouts", "--log-level", "debug", "--api-key", "team-a:sk-a")
	workers := map[string]*proc{}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("worker-%d", i)
		workers[name] = start(t, "worker", "worker", "--name", name, "--join", coord.fields["gossip"],
			"--gossip", "127.0.0.1:0", "--model", model, "--backend", "test", "--slots", "2",
			"--test-token-delay", "2ms", "--fast-timeouts", "--log-level", "debug")
	}
	base := "http://" + coord.fields["http"]
	waitStatus(t, base, func(s string) bool {
		return strings.Count(s, `"ready":true`) == 3 && strings.Contains(s, `"raft":"leader"`)
	})

	client := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk-a"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The key given with -api-key is stored through Raft; other keys get 401.
	wrong := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk-wrong"), option.WithMaxRetries(0))
	var keyErr *oai.Error
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := wrong.Models.List(ctx)
		if errors.As(err, &keyErr) && keyErr.StatusCode == 401 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("wrong key: got %v, want 401 once the key is stored", err)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}

	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != model {
		t.Fatalf("models: %+v %v", models, err)
	}

	// Non-streaming and streaming requests, concurrently.
	var mu sync.Mutex
	served := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			params := oai.ChatCompletionNewParams{
				Model:    model,
				Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(fmt.Sprintf("hello number %d", i))},
			}
			want := fmt.Sprintf("hello number %d", i)
			var worker, got string
			if i%2 == 0 {
				var resp *http.Response
				c, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp))
				if err != nil {
					t.Errorf("request %d: %v", i, err)
					return
				}
				got = c.Choices[0].Message.Content
				worker = resp.Header.Get("X-Macpool-Worker")
				if c.Choices[0].FinishReason != "stop" {
					t.Errorf("request %d: finish %q", i, c.Choices[0].FinishReason)
				}
			} else {
				var resp *http.Response
				s := client.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&resp))
				var b strings.Builder
				for s.Next() {
					ch := s.Current()
					if len(ch.Choices) > 0 {
						b.WriteString(ch.Choices[0].Delta.Content)
					}
				}
				if err := s.Err(); err != nil {
					t.Errorf("stream %d: %v", i, err)
					return
				}
				got = b.String()
				worker = resp.Header.Get("X-Macpool-Worker")
			}
			if got != want {
				t.Errorf("request %d: got %q, want %q", i, got, want)
			}
			mu.Lock()
			served[worker]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("served: %v", served)
	for name := range workers {
		if served[name] == 0 {
			t.Errorf("%s served nothing: %v", name, served)
		}
	}

	// A worker that leaves disappears from status.
	workers["worker-3"].stop(t)
	waitStatus(t, base, func(s string) bool {
		return strings.Count(s, `"role":"worker"`) == 2 && !strings.Contains(s, `"worker-3"`)
	})
	if out, err := exec.Command(binary, "status", "--http", coord.fields["http"]).CombinedOutput(); err == nil || !strings.Contains(string(out), "401") {
		t.Fatalf("macpool status without the key: got %v\n%s, want a 401 error", err, out)
	}
	out, err := exec.Command(binary, "status", "--http", coord.fields["http"], "--api-key", "sk-a").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "worker-1") || strings.Contains(string(out), "worker-3") {
		t.Fatalf("macpool status: %v\n%s", err, out)
	}
	t.Logf("macpool status:\n%s", out)

	// Unknown model: an OpenAI-shaped 404.
	_, err = client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
		Model: "nope", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("x")},
	})
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("unknown model: got %v, want a 404", err)
	}
}

func waitStatus(t *testing.T, base string, cond func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/cluster/status", nil)
		req.Header.Set("Authorization", "Bearer sk-a") // the key TestProcessesOpenAIClient stores
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = string(b)
			if cond(last) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	t.Fatalf("status condition not met within 15s; last status: %s", last)
}
