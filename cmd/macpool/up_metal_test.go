//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/macpool/macpool/internal/reftest"
	"github.com/macpool/macpool/metal/emu"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a poller.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// emulatedModelDir is the hf/qwen3 fixture (vocabulary 1024, cheap in the
// emulator) with the Qwen3 tokenizer and an EOS id inside its vocabulary.
func emulatedModelDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-qwen3")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(must(os.ReadFile(filepath.Join(qwen3Dir, "config.json"))), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["eos_token_id"] = 1023
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	link(t, filepath.Join(qwen3Dir, "model.safetensors"), filepath.Join(dir, "model.safetensors"))
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		link(t, filepath.Join("../../testdata/tokenizers/qwen3", f), filepath.Join(dir, f))
	}
	return dir
}

// TestUpMetalEmulated: `macpool up --backend metal-emulated` serves a
// completion end to end (coordinator, queue, local worker running the
// model on the Metal kernels in the emulator), in-process.
func TestUpMetalEmulated(t *testing.T) {
	if _, err := emu.FindCompiler(); err != nil {
		if os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	dir := t.TempDir()
	model := emulatedModelDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- runUp(ctx, []string{"--model", model, "--backend", "metal-emulated", "--slots", "2", "--threads", "2",
			"--http", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
			"--data-dir", filepath.Join(dir, "data"), "--fast-timeouts", "--log-level", "warn"}, &stdout, &stderr)
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
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := stdout.String()
		if m := httpRE.FindStringSubmatch(out); m != nil && strings.Contains(out, "role=worker") {
			if !strings.Contains(out, "backend=metal-emulated") {
				t.Fatalf("worker line without backend=metal-emulated: %q", out)
			}
			base = "http://" + m[1]
		}
		if base != "" {
			if resp, err := http.Get(base + "/v1/models"); err == nil {
				var body bytes.Buffer
				body.ReadFrom(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && strings.Contains(body.String(), "tiny-qwen3") {
					break
				}
			}
		}
		select {
		case err := <-done:
			t.Fatalf("up exited: %v (stderr %q)", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready worker within 60 s; stdout %q stderr %q", stdout.String(), stderr.String())
		}
	}
	client := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	defer rcancel()
	var resp *http.Response
	c, err := client.Completions.New(rctx, oai.CompletionNewParams{
		Model:       "tiny-qwen3",
		Prompt:      oai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{203, 802, 2, 239, 451, 327, 163, 54, 121, 360, 272, 784}},
		MaxTokens:   oai.Int(6),
		Temperature: oai.Float(0),
	}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatalf("completion: %v (stderr %q)", err, stderr.String())
	}
	if c.Usage.CompletionTokens != 6 || c.Choices[0].FinishReason != "length" || c.Choices[0].Text == "" {
		t.Fatalf("completion: got %+v", c)
	}
	if w := resp.Header.Get("X-Macpool-Worker"); !strings.HasSuffix(w, "-worker") {
		t.Errorf("X-Macpool-Worker = %q", w)
	}
}

// TestRunMetalEmulated: `macpool run --backend metal-emulated` reproduces
// the fixture's greedy continuation (HF's), as the CPU backend does.
func TestRunMetalEmulated(t *testing.T) {
	if _, err := emu.FindCompiler(); err != nil {
		if os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	r := reftest.ReadRef(t, qwen3Dir)
	var stdout, stderr bytes.Buffer
	err := runRun(context.Background(), []string{"--model", qwen3Dir, "--backend", "metal-emulated", "--tokens", joinIDs(r.GreedyPrompt, ","),
		"--max-tokens", strconv.Itoa(len(r.GreedyOut)), "--output", "ids", "--threads", "2"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v (stderr %q)", err, stderr.String())
	}
	if got, want := stdout.String(), joinIDs(r.GreedyOut, " ")+"\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
}
