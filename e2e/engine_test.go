package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/macpool/macpool/engine/testmodel"
)

// TestUpRealEngine runs `macpool up` on a tiny random-weight Qwen3 folder
// with the real CPU engine (template, tokenizer, generation) and asks it
// through the openai-go client, streaming and not. (Hub downloads are
// tested in package hub and cmd/macpool.)
func TestUpRealEngine(t *testing.T) {
	dir := t.TempDir()
	modelDir := filepath.Join(dir, "tiny-qwen3")
	if err := testmodel.Write(modelDir, testmodel.Options{}); err != nil {
		t.Fatalf("write test model: %v", err)
	}
	up := start(t, "coordinator", "up", "--model", modelDir, "--backend", "cpu", "--slots", "2",
		"--http", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(dir, "data"), "--fast-timeouts")
	base := "http://" + up.fields["http"]
	waitStatus(t, base, func(s string) bool {
		return strings.Contains(s, `"ready":true`) && strings.Contains(s, `"raft":"leader"`)
	})
	client := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	params := oai.ChatCompletionNewParams{
		Model:     "tiny-qwen3",
		Messages:  []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Hello!")},
		MaxTokens: oai.Int(8),
		Seed:      oai.Int(1),
	}
	var resp *http.Response
	c, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	if c.Usage.CompletionTokens == 0 || c.Choices[0].FinishReason == "" {
		t.Fatalf("chat: got %+v", c)
	}
	if w := resp.Header.Get("X-Macpool-Worker"); !strings.HasSuffix(w, "-worker") {
		t.Fatalf("X-Macpool-Worker = %q", w)
	}
	s := client.Chat.Completions.NewStreaming(ctx, params)
	chunks := 0
	for s.Next() {
		chunks++
	}
	if err := s.Err(); err != nil || chunks < 2 {
		t.Fatalf("stream: %d chunks, %v", chunks, err)
	}
}
