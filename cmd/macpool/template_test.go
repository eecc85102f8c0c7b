package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestTemplateCommand(t *testing.T) {
	req := filepath.Join(t.TempDir(), "req.json")
	body := `{"model":"qwen3","messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"enable_thinking":false}}`
	if err := os.WriteFile(req, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := runTemplate(context.Background(), []string{"--model", "../../testdata/tokenizers/qwen3", "--request", req}, &stdout, &stderr); err != nil {
		t.Fatalf("runTemplate: %v (stderr %q)", err, stderr.String())
	}
	want := "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	if got := stdout.String(); got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}

	err := runTemplate(context.Background(), []string{"--request", req}, &stdout, &stderr)
	if !errors.Is(err, errUsage) {
		t.Errorf("without --model: error %v, want a usage error", err)
	}
	err = runTemplate(context.Background(), []string{"--model", t.TempDir(), "--request", req}, &stdout, &stderr)
	if err == nil {
		t.Error("folder without a chat template: no error")
	}
}
