package agents

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The agent runs: Codex CLI and Claude Code each complete one turn against
// `macpool up` serving a random-weight model through the real engine. The
// text is gibberish; what is tested is that the agents accept every byte
// macpool sends (exit status 0, no protocol error on either side).

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// macpoolBinary builds cmd/macpool once per test binary.
func macpoolBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "macpool-agents-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "macpool")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/macpool/macpool/cmd/macpool").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// needAgent returns the path of an installed agent's executable
// (node_modules/.bin/NAME), skipping like needNode when it is missing.
func needAgent(t *testing.T, pkg, name string) string {
	t.Helper()
	needNode(t, pkg)
	p, err := filepath.Abs(filepath.Join("node_modules", ".bin", name))
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		msg := fmt.Sprintf("agents: %s is not installed (run `npm ci` in e2e/agents)", name)
		if os.Getenv("MACPOOL_REQUIRE_AGENTS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// pool is a running `macpool up`.
type pool struct {
	url string
	mu  sync.Mutex
	log strings.Builder // its stderr
}

func (p *pool) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startPool writes a random-weight model (macpool testmodel with
// testmodelArgs) and serves it with `macpool up` under the name qwen3-test and
// the alias claude-sonnet-4-5.
func startPool(t *testing.T, testmodelArgs ...string) *pool {
	t.Helper()
	bin := macpoolBinary(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "model")
	if out, err := exec.Command(bin, append([]string{"testmodel", "-out", model}, testmodelArgs...)...).CombinedOutput(); err != nil {
		t.Fatalf("macpool testmodel: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "up", "--model", model, "--model-name", "qwen3-test",
		"--model-alias", "claude-sonnet-4-5=qwen3-test", "--backend", "cpu",
		"--http", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(dir, "data"))
	// A developer's own cluster secret and keys stay out of the test.
	cmd.Env = append(os.Environ(), "MACPOOL_HOME="+filepath.Join(dir, "home"))
	p := &pool{}
	cmd.Stderr = writerFunc(func(b []byte) (int, error) { p.mu.Lock(); defer p.mu.Unlock(); return p.log.Write(b) })
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	httpRe := regexp.MustCompile(`listening role=coordinator .*http=(\S+)`)
	timeout := time.After(60 * time.Second)
	for p.url == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("macpool up exited:\n%s", p.logs())
			}
			if m := httpRe.FindStringSubmatch(l); m != nil {
				p.url = "http://" + m[1]
			}
		case <-timeout:
			t.Fatalf("macpool up did not listen within 60s:\n%s", p.logs())
		}
	}
	go func() {
		for range lines {
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(p.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("macpool up not ready within 60s:\n%s", p.logs())
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// checkServed fails on any API request the pool answered with an error
// status, and requires one that succeeded on path.
func checkServed(t *testing.T, p *pool, path string) {
	t.Helper()
	re := regexp.MustCompile(`msg=request .*path=(\S+) status=(\d+)`)
	ok := 0
	for _, l := range strings.Split(p.logs(), "\n") {
		m := re.FindStringSubmatch(l)
		if m == nil || !strings.HasPrefix(m[1], "/v1/") {
			continue
		}
		if m[2] != "200" {
			t.Errorf("pool answered %s with %s: %s", m[1], m[2], l)
		}
		if m[1] == path && m[2] == "200" {
			ok++
		}
	}
	if ok == 0 {
		t.Errorf("no successful %s request in the pool's log:\n%s", path, p.logs())
	}
}

// runAgent runs an agent in an empty work folder and returns its output.
func runAgent(t *testing.T, env []string, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s:\n%s", filepath.Base(bin), strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(bin), err)
	}
	return string(out)
}

// agentTemplates are the chat templates the agent runs are repeated with:
// the tokenizer's (Qwen3) and Qwen3.5's (also Qwen3.6's), which takes one
// system message, no developer role, and opens <think> in the prompt.
var agentTemplates = []struct{ name, file string }{
	{"qwen3", ""},
	{"qwen3.5", "Qwen3.5-4B.jinja"},
}

func agentPool(t *testing.T, template string) *pool {
	args := []string{"-max-positions", "32768", "-eos-bias", "3"}
	if template != "" {
		args = append(args, "-template", filepath.Join("..", "..", "testdata", "templates", template))
	}
	return startPool(t, args...)
}

// TestCodexExec: `codex exec` with a custom provider on the Responses wire
// completes a turn.
func TestCodexExec(t *testing.T) {
	codex := needAgent(t, "@openai/codex", "codex")
	for _, tmpl := range agentTemplates {
		t.Run(tmpl.name, func(t *testing.T) {
			p := agentPool(t, tmpl.file)
			home := t.TempDir()
			config := fmt.Sprintf(`model = "qwen3-test"
model_provider = "macpool"
web_search = "disabled"

[model_providers.macpool]
name = "macpool"
base_url = "%s/v1"
wire_api = "responses"
env_key = "MACPOOL_API_KEY"
`, p.url)
			if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o644); err != nil {
				t.Fatal(err)
			}
			out := runAgent(t, []string{"CODEX_HOME=" + home, "MACPOOL_API_KEY=sk-local"}, codex, "exec", "--skip-git-repo-check", "Say hi.")
			if strings.Contains(out, "ERROR:") {
				t.Errorf("codex reported an error")
			}
			checkServed(t, p, "/v1/responses")
		})
	}
}

// TestClaudeCodePrint: `claude -p` with ANTHROPIC_BASE_URL completes a
// turn, under the operator's alias for a Claude model name.
func TestClaudeCodePrint(t *testing.T) {
	claude := needAgent(t, "@anthropic-ai/claude-code", "claude")
	for _, tmpl := range agentTemplates {
		t.Run(tmpl.name, func(t *testing.T) {
			p := agentPool(t, tmpl.file)
			env := []string{
				"HOME=" + t.TempDir(), // no user settings, no login
				"ANTHROPIC_BASE_URL=" + p.url,
				"ANTHROPIC_API_KEY=sk-local",
				"ANTHROPIC_DEFAULT_HAIKU_MODEL=claude-sonnet-4-5", // its background calls
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
				"CLAUDE_CODE_MAX_OUTPUT_TOKENS=1024", // the request must fit the model's context
			}
			out := runAgent(t, env, claude, "-p", "--model", "claude-sonnet-4-5", "Say hi.")
			if strings.Contains(out, "API Error") {
				t.Errorf("claude reported an API error")
			}
			checkServed(t, p, "/v1/messages")
		})
	}
}

// TestThinkingBudgetRealEngine: on the real engine with Qwen3.5's template
// (its prompt opens <think>, so a random model thinks until it runs out),
// the thinking block of a Messages answer ends at budget_tokens and the
// answer uses the rest of max_tokens, streamed and not.
func TestThinkingBudgetRealEngine(t *testing.T) {
	p := startPool(t, "-template", filepath.Join("..", "..", "testdata", "templates", "Qwen3.5-4B.jinja"))
	body := `{"model":"qwen3-test","max_tokens":30,"thinking":{"type":"enabled","budget_tokens":8},"messages":[{"role":"user","content":"hi"}]}`
	resp, err := http.Post(p.url+"/v1/messages", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Content []struct {
			Type, Text, Thinking string
		}
		StopReason string `json:"stop_reason"`
		Usage      struct {
			OutputTokens int `json:"output_tokens"`
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if err != nil || len(m.Content) != 2 || m.Content[0].Type != "thinking" || m.Content[1].Type != "text" || m.Content[1].Text == "" {
		t.Fatalf("message = %+v (%v), want a thinking block then text", m, err)
	}
	if m.Usage.OutputTokens != 30 || m.StopReason != "max_tokens" {
		t.Errorf("usage %d, stop %s: want all 30 tokens used", m.Usage.OutputTokens, m.StopReason)
	}
	// Streamed: 8 thinking deltas (one per token) and a signature.
	resp, err = http.Post(p.url+"/v1/messages", "application/json", strings.NewReader(strings.Replace(body, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	thinking, text := 0, 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		switch l := sc.Text(); {
		case strings.Contains(l, `"type":"thinking_delta"`):
			thinking++
		case strings.Contains(l, `"type":"text_delta"`):
			text++
		}
	}
	if thinking == 0 || thinking > 8 || text == 0 {
		t.Errorf("streamed %d thinking and %d text deltas: want at most 8 (the budget) thinking, then text", thinking, text)
	}
}
