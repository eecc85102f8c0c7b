package testmodel

import (
	"context"
	"testing"

	"github.com/macpool/macpool/engine"
	_ "github.com/macpool/macpool/engine/cpu"
	_ "github.com/macpool/macpool/engine/qwen"
	"github.com/macpool/macpool/engine/tokenizer"
)

func TestWriteLoadGenerate(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(dir, engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.VocabSize() != VocabSize {
		t.Fatalf("vocab %d, want %d", m.VocabSize(), VocabSize)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode("Hello, world")
	out, err := m.Generate(context.Background(), prompt, 8, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 8 {
		t.Fatalf("generated %d tokens, want 8", len(out))
	}
	text := tok.Decode(out)
	t.Logf("tokens %v text %q", out, text)
	out2, _ := m.Generate(context.Background(), tok.Encode("Something else entirely"), 8, nil, nil, nil)
	if equal(out, out2) {
		t.Errorf("different prompts gave the same greedy output %v", out)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
