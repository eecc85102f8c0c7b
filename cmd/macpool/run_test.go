package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/macpool/macpool/internal/reftest"
)

const qwen3Dir = "../../testdata/hf/qwen3"

func joinIDs(ids []int, sep string) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, sep)
}

func TestRunGreedyIDs(t *testing.T) {
	testRunGreedyIDs(t, []string{"qwen2", "qwen3", "qwen3_tied"})
}

// testRunGreedyIDs checks that `macpool run` reproduces each fixture's greedy_out.
func testRunGreedyIDs(t *testing.T, names []string) {
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("../../testdata/hf", name)
			r := reftest.ReadRef(t, dir)
			var stdout, stderr bytes.Buffer
			err := runRun(context.Background(), []string{"--model", dir, "--tokens", joinIDs(r.GreedyPrompt, ","),
				"--max-tokens", strconv.Itoa(len(r.GreedyOut)), "--output", "ids", "--threads", "2"}, &stdout, &stderr)
			if err != nil {
				t.Fatalf("run: %v (stderr %q)", err, stderr.String())
			}
			if got, want := stdout.String(), joinIDs(r.GreedyOut, " ")+"\n"; got != want {
				t.Errorf("stdout %q, want %q", got, want)
			}
		})
	}
}

// A model folder with the fixture's weights and the real Qwen3 tokenizer:
// text in, text out (single-byte tokens keep ids inside the tiny vocabulary).
func TestRunText(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors"} {
		link(t, filepath.Join(qwen3Dir, f), filepath.Join(dir, f))
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		link(t, filepath.Join("../../testdata/tokenizers/qwen3", f), filepath.Join(dir, f))
	}
	var ids, text, stderr bytes.Buffer
	args := []string{"--model", dir, "--prompt", "a", "--max-tokens", "6", "--threads", "1"}
	if err := runRun(context.Background(), append(args, "--output", "ids"), &ids, &stderr); err != nil {
		t.Fatalf("run ids: %v", err)
	}
	if err := runRun(context.Background(), args, &text, &stderr); err != nil {
		t.Fatalf("run text: %v", err)
	}
	if n := len(strings.Fields(ids.String())); n != 6 {
		t.Errorf("--output ids: %d ids (%q), want 6", n, ids.String())
	}
	if text.Len() <= 1 {
		t.Errorf("--output text: %q", text.String())
	}
	// Seeded sampling is reproducible.
	var s1, s2 bytes.Buffer
	sargs := append(args, "--output", "ids", "--temperature", "0.9", "--top-p", "0.95", "--seed", "7")
	if err := runRun(context.Background(), sargs, &s1, &stderr); err != nil {
		t.Fatal(err)
	}
	if err := runRun(context.Background(), sargs, &s2, &stderr); err != nil {
		t.Fatal(err)
	}
	if s1.String() != s2.String() {
		t.Errorf("same seed, different output: %q vs %q", s1.String(), s2.String())
	}
}

// A GGUF file carries its tokenizer in its metadata: `macpool run --model
// X.gguf --prompt hi` reads it as `up` does (both go through the runner).
func TestRunGGUF(t *testing.T) {
	args := []string{"--model", "../../testdata/gguf/qwen3-q8_0.gguf", "--prompt", "hi", "--max-tokens", "4", "--threads", "1"}
	var text, ids, stderr bytes.Buffer
	if err := runRun(context.Background(), args, &text, &stderr); err != nil {
		t.Fatalf("run text: %v (stderr %q)", err, stderr.String())
	}
	if text.Len() <= 1 || !strings.HasSuffix(text.String(), "\n") {
		t.Errorf("--output text: %q, want text and a newline", text.String())
	}
	if !strings.HasPrefix(stderr.String(), "prompt: ") || !strings.Contains(stderr.String(), "tok/s after the first") {
		t.Errorf("timing line: %q", stderr.String())
	}
	if err := runRun(context.Background(), append(args, "--output", "ids"), &ids, &stderr); err != nil {
		t.Fatalf("run ids: %v", err)
	}
	if n := len(strings.Fields(ids.String())); n < 1 || n > 4 {
		t.Errorf("--output ids: %d ids (%q), want 1 to 4", n, ids.String())
	}
}

func link(t *testing.T, src, dst string) {
	t.Helper()
	abs, err := filepath.Abs(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, dst); err != nil {
		t.Fatal(err)
	}
}

func TestRunErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		want  string
		usage bool
	}{
		{"no model", []string{"--tokens", "1"}, "--model is required", true},
		{"no prompt", []string{"--model", qwen3Dir}, "exactly one of --prompt and --tokens", true},
		{"both", []string{"--model", qwen3Dir, "--tokens", "1", "--prompt", "hi"}, "exactly one of --prompt and --tokens", true},
		{"bad id", []string{"--model", qwen3Dir, "--tokens", "1,x", "--output", "ids"}, `--tokens: "x" is not a token id`, true},
		{"id beyond vocab", []string{"--model", qwen3Dir, "--tokens", "1,5000", "--output", "ids"}, "token id 5000 (position 1) is out of range: the model's vocabulary has 1024 ids", true},
		{"bad output", []string{"--model", qwen3Dir, "--tokens", "1", "--output", "json"}, `--output "json" must be text or ids`, true},
		{"max tokens", []string{"--model", qwen3Dir, "--tokens", "1", "--max-tokens", "0"}, "--max-tokens 0 must be at least 1", true},
		{"temperature", []string{"--model", qwen3Dir, "--tokens", "1", "--temperature", "-1"}, "temperature", true},
		{"prompt without tokenizer", []string{"--model", qwen3Dir, "--prompt", "hi"}, "--prompt needs a tokenizer: no tokenizer.json", false},
		{"text without tokenizer", []string{"--model", qwen3Dir, "--tokens", "1"}, "--output text needs a tokenizer (or use --output ids)", false},
		{"missing model", []string{"--model", "../../testdata/none", "--tokens", "1", "--output", "ids"}, "none", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := runRun(context.Background(), tc.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
			if errors.Is(err, errUsage) != tc.usage {
				t.Errorf("usage error: %v, want %v", errors.Is(err, errUsage), tc.usage)
			}
		})
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	err := runRun(ctx, []string{"--model", qwen3Dir, "--tokens", "1,2", "--output", "ids"}, &stdout, &stderr)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

func TestLogitsCommand(t *testing.T) {
	r := reftest.ReadRef(t, qwen3Dir)
	out := filepath.Join(t.TempDir(), "logits.f32")
	var stdout, stderr bytes.Buffer
	if err := runLogits(context.Background(), []string{"--model", qwen3Dir, "--tokens", joinIDs(r.InputIDs, ","), "--out", out, "--threads", "2"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	got := reftest.ReadF32(t, out)
	want := reftest.ReadF32(t, filepath.Join(qwen3Dir, "ref_logits.f32"))
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	vocab := r.LogitsShape[1]
	reftest.CheckPositions(t, got, want, vocab, len(want)/vocab, 1e-4)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", qwen3Dir, "--tokens", "1"}, "--out is required"},
		{[]string{"--model", qwen3Dir, "--out", out}, "--tokens is required"},
		{[]string{"--model", qwen3Dir, "--tokens", "3,1024", "--out", out}, "token id 1024 (position 1) is out of range"},
	} {
		if err := runLogits(context.Background(), tc.args, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}
