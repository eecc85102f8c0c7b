package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const qwen3TokDir = "../../testdata/tokenizers/qwen3"

func TestTokenizeCommand(t *testing.T) {
	file := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(file, []byte("Hello, world"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"text", []string{"--model", qwen3TokDir, "--text", "Hello, world"}, "[9707,11,1879]\n"},
		{"file", []string{"--model", qwen3TokDir, "--file", file}, "[9707,11,1879]\n"},
		{"special", []string{"--model", qwen3TokDir, "--text", "<|im_end|>"}, "[151645]\n"},
		{"empty", []string{"--model", qwen3TokDir, "--text", ""}, "[]\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if err := runTokenize(context.Background(), c.args, &stdout, &stderr); err != nil {
				t.Fatalf("runTokenize: %v (stderr %q)", err, stderr.String())
			}
			if got := stdout.String(); got != c.want {
				t.Errorf("stdout = %q, want %q", got, c.want)
			}
		})
	}
}

func TestDetokenizeCommand(t *testing.T) {
	cases := []struct{ tokens, want string }{
		{"9707,11,1879", "Hello, world"},
		{"[9707, 11, 1879]", "Hello, world"},
		{"151644,872,198", "<|im_start|>user\n"},
		{"11162,99", " \uFFFD"},
		{"", ""},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		args := []string{"--model", qwen3TokDir, "--tokens", c.tokens}
		if err := runDetokenize(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("runDetokenize(%q): %v", c.tokens, err)
		}
		if got := stdout.String(); got != c.want {
			t.Errorf("runDetokenize(%q) = %q, want %q", c.tokens, got, c.want)
		}
	}
}

func TestTokenizeCommandErrors(t *testing.T) {
	missing := t.TempDir()
	cases := []struct {
		name  string
		run   func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) error
		args  []string
		want  string
		usage bool
	}{
		{"no model", tokenizeRun, []string{"--text", "x"}, "--model is required", true},
		{"no input", tokenizeRun, []string{"--model", qwen3TokDir}, "exactly one of --text and --file", true},
		{"both inputs", tokenizeRun, []string{"--model", qwen3TokDir, "--text", "x", "--file", "y"}, "exactly one of", true},
		{"missing tokenizer", tokenizeRun, []string{"--model", missing, "--text", "x"}, filepath.Join(missing, "tokenizer.json"), false},
		{"missing file", tokenizeRun, []string{"--model", qwen3TokDir, "--file", filepath.Join(missing, "nope.txt")}, "nope.txt", false},
		{"no tokens", detokenizeRun, []string{"--model", qwen3TokDir}, "--tokens is required", true},
		{"bad token", detokenizeRun, []string{"--model", qwen3TokDir, "--tokens", "1,x"}, `"x" is not an integer`, true},
		{"unknown id", detokenizeRun, []string{"--model", qwen3TokDir, "--tokens", "9707,999999"}, "token id 999999 (position 1)", false},
		{"negative id", detokenizeRun, []string{"--model", qwen3TokDir, "--tokens", "-3"}, "token id -3", false},
		{"detok missing tokenizer", detokenizeRun, []string{"--model", missing, "--tokens", "1"}, filepath.Join(missing, "tokenizer.json"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := c.run(context.Background(), c.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want it to contain %q", err, c.want)
			}
			if got := errors.Is(err, errUsage); got != c.usage {
				t.Errorf("errors.Is(err, errUsage) = %v, want %v", got, c.usage)
			}
		})
	}
}

func tokenizeRun(ctx context.Context, args []string, stdout, stderr *bytes.Buffer) error {
	return runTokenize(ctx, args, stdout, stderr)
}

func detokenizeRun(ctx context.Context, args []string, stdout, stderr *bytes.Buffer) error {
	return runDetokenize(ctx, args, stdout, stderr)
}

// TestTokenizeRegistered runs the commands through runMain.
func TestTokenizeRegistered(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runMain(context.Background(), []string{"tokenize", "--model", qwen3TokDir, "--text", "Hello"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if got := stdout.String(); got != "[9707]\n" {
		t.Errorf("stdout = %q", got)
	}
	stdout.Reset()
	if code := runMain(context.Background(), []string{"detokenize", "--model", qwen3TokDir, "--tokens", "9707"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if got := stdout.String(); got != "Hello" {
		t.Errorf("stdout = %q", got)
	}
}

// A GGUF file's tokenizer is read from its metadata, as run and up read it.
func TestTokenizeGGUF(t *testing.T) {
	const model = "../../testdata/gguf/qwen3-q8_0.gguf"
	var ids, text, stderr bytes.Buffer
	if err := runTokenize(context.Background(), []string{"--model", model, "--text", "hello world"}, &ids, &stderr); err != nil {
		t.Fatalf("tokenize: %v", err)
	}
	if err := runDetokenize(context.Background(), []string{"--model", model, "--tokens", strings.TrimSpace(ids.String())}, &text, &stderr); err != nil {
		t.Fatalf("detokenize %s: %v", ids.String(), err)
	}
	if text.String() != "hello world" {
		t.Errorf("round trip through %s: got %q, want %q", ids.String(), text.String(), "hello world")
	}
}
