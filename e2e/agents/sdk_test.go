package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/worker"
)

const sdkModel = "qwen3-agents"

// needNode returns the node binary, skipping the test when node or the
// installed packages are missing (failing instead under
// MACPOOL_REQUIRE_AGENTS=1, as CI runs after npm ci).
func needNode(t *testing.T, pkgs ...string) string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		msg := "agents: " + strings.TrimSpace(fmt.Sprintf(format, args...)) + " (run `npm ci` in e2e/agents)"
		if os.Getenv("MACPOOL_REQUIRE_AGENTS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join("node_modules", p, "package.json")); err != nil {
			missing("npm package %s is not installed", p)
		}
	}
	return node
}

// scriptedEngine answers like a model that uses tools, deterministically,
// so that the SDKs' tool round trips can be checked on the real job path:
// with thinking on it first reasons; asked about the weather with tools
// offered it calls the first tool for Paris; given a tool result it reports
// it; otherwise it echoes the last message.
type scriptedEngine struct{}

func (scriptedEngine) Generate(ctx context.Context, j *job.Job, emit func(*job.Event) error) error {
	chat := j.Chat
	if chat == nil {
		return openai.InvalidRequest("", "scripted engine: chat jobs only")
	}
	prompt := 0
	for _, m := range chat.Messages {
		prompt += len(strings.Fields(m.Content.String())) + 1
	}
	last := chat.Messages[len(chat.Messages)-1]
	text := last.Content.String()
	n := 0
	send := func(ev *job.Event) error {
		if n == 0 {
			ev.Role = "assistant"
		}
		n++
		return emit(ev)
	}
	if string(chat.ChatTemplateKwargs["enable_thinking"]) == "true" && last.Role != openai.RoleAssistant {
		if err := send(&job.Event{Reasoning: "The user asks something;"}); err != nil {
			return err
		}
		if err := send(&job.Event{Reasoning: " answer it."}); err != nil {
			return err
		}
	}
	finish := "stop"
	switch {
	case last.Role == openai.RoleUser && len(chat.Tools) > 0 && strings.Contains(text, "weather") && (chat.ToolChoice == nil || chat.ToolChoice.Mode != openai.ToolChoiceNone):
		name := chat.Tools[0].Function.Name
		if err := send(&job.Event{ToolCalls: []openai.ToolCallDelta{{Index: 0, ID: "call_w1", Type: "function", Function: &openai.FunctionCallDelta{Name: name}}}}); err != nil {
			return err
		}
		if err := send(&job.Event{ToolCalls: []openai.ToolCallDelta{{Index: 0, Function: &openai.FunctionCallDelta{Arguments: `{"city":`}}}}); err != nil {
			return err
		}
		if err := send(&job.Event{ToolCalls: []openai.ToolCallDelta{{Index: 0, Function: &openai.FunctionCallDelta{Arguments: `"Paris"}`}}}}); err != nil {
			return err
		}
		finish = "tool_calls"
	case last.Role == openai.RoleTool:
		if err := send(&job.Event{Text: "The tool said: " + text}); err != nil {
			return err
		}
	default:
		limit := chat.MaxNewTokens()
		for i, w := range strings.Fields(text) {
			if limit > 0 && i >= limit {
				finish = "length"
				break
			}
			if i > 0 {
				w = " " + w
			}
			if err := send(&job.Event{Text: w}); err != nil {
				return err
			}
		}
	}
	return emit(&job.Event{FinishReason: finish, Usage: &openai.Usage{PromptTokens: prompt, CompletionTokens: n, TotalTokens: prompt + n,
		PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: prompt / 2}}})
}

// sdkCluster is two coordinators (the second uses the first's NATS) with
// one worker running the scripted engine, each coordinator behind its own
// HTTP API as the CLI mounts it.
func sdkCluster(t *testing.T) (urls []string) {
	t.Helper()
	var coords []*coordinator.Coordinator
	for i, name := range []string{"coord-1", "coord-2"} {
		cfg := coordinator.DefaultConfig()
		cfg.Name = name
		cfg.DataDir = t.TempDir()
		cfg.NATSListen = "127.0.0.1:0"
		cfg.Gossip = cluster.FastConfig()
		if i > 0 {
			cfg.Gossip.Join = []string{coords[0].GossipAddr()}
		}
		cfg.Bootstrap = i == 0
		cfg.FastRaft()
		c, err := coordinator.New(cfg)
		if err != nil {
			t.Fatalf("coordinator.New: %v", err)
		}
		run(t, c)
		coords = append(coords, c)
	}
	wcfg := worker.DefaultConfig()
	wcfg.Name = "worker-1"
	wcfg.Models = []string{sdkModel}
	wcfg.Engine = scriptedEngine{}
	wcfg.Slots = 2
	wcfg.Gossip = cluster.FastConfig()
	wcfg.Gossip.Join = []string{coords[0].GossipAddr()}
	wcfg.MetaInterval = 50 * time.Millisecond
	w, err := worker.New(wcfg)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	run(t, w)
	for _, c := range coords {
		waitReady(t, c)
		acfg := api.DefaultConfig()
		acfg.Auth = api.NewStaticKeys(map[string]string{"sk-agents": "agents"})
		acfg.Responses = c.ResponseStore()
		acfg.ModelAliases = map[string]string{"claude-sonnet-4-5": sdkModel}
		srv, err := api.New(acfg, c, nil)
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv.Handler())
		t.Cleanup(hs.Close)
		urls = append(urls, hs.URL)
	}
	return urls
}

type runner interface{ Run(context.Context) error }

// run runs n until the test ends.
func run(t *testing.T, n runner) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("node did not stop within 10s")
		}
	})
}

// waitReady polls until c sees a ready worker serving sdkModel.
func waitReady(t *testing.T, c *coordinator.Coordinator) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, m := range c.Membership().Members() {
			if m.Meta.Role == cluster.RoleWorker && m.Meta.Serves(sdkModel) && m.Meta.Ready {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no ready worker after 30s")
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

// runScript runs a node script here with the cluster's URLs and returns
// its last stdout line, which the scripts print as JSON.
func runScript(t *testing.T, node, script string, urls []string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), "MACPOOL_URLS="+strings.Join(urls, ","), "MACPOOL_MODEL="+sdkModel, "NODE_NO_WARNINGS=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\nstdout:\n%s\nstderr:\n%s", script, err, out, stderr.String())
	}
	if stderr.Len() > 0 {
		// The SDKs warn on stderr (unknown events, deprecated shapes):
		// a protocol test must leave it empty.
		t.Errorf("node %s wrote to stderr:\n%s", script, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var res map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("node %s: last line %q: %v", script, lines[len(lines)-1], err)
	}
	for _, l := range lines {
		t.Log(l)
	}
	return res
}

// TestOpenAINodeResponses drives the Responses API with the official
// openai npm client: create (streamed and not), the responses.stream
// helper (its strict accumulator rejects unknown or out-of-order events),
// a tool round trip continued on the other coordinator with
// previous_response_id, a stateless round trip, retrieve, input items,
// delete, and the 400 for a hosted tool.
func TestOpenAINodeResponses(t *testing.T) {
	node := needNode(t, "openai")
	res := runScript(t, node, "openai_sdk.mjs", sdkCluster(t))
	if res["ok"] != true {
		t.Fatalf("script result %v", res)
	}
}

// TestAnthropicNodeMessages drives the Messages API with the official
// @anthropic-ai/sdk: create, stream (MessageStream's accumulator) with
// thinking and a tool call, the tool round trip, an error tool result,
// count_tokens, and the SDK's error classes for an unknown model and a bad
// request.
func TestAnthropicNodeMessages(t *testing.T) {
	node := needNode(t, "@anthropic-ai/sdk")
	res := runScript(t, node, "anthropic_sdk.mjs", sdkCluster(t))
	if res["ok"] != true {
		t.Fatalf("script result %v", res)
	}
}

// TestNodeClientsResume follows the retry path docs/api.md gives for the
// official Node clients: the last SSE id from .asResponse()'s raw body, the
// request sent again to another coordinator with Last-Event-ID through the
// SDK's own streaming, whose parser takes the resumed stream; the two
// parts make the whole text (openai chat completions, @anthropic-ai/sdk
// Messages).
func TestNodeClientsResume(t *testing.T) {
	node := needNode(t, "openai", "@anthropic-ai/sdk")
	res := runScript(t, node, "resume_sdk.mjs", sdkCluster(t))
	if res["ok"] != true {
		t.Fatalf("script result %v", res)
	}
}
