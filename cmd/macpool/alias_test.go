package main

import (
	"io"
	"testing"
)

func TestModelAliasFlag(t *testing.T) {
	var f coordinatorFlags
	fs := newFlagSet("coordinator", io.Discard)
	f.register(fs)
	if err := parseFlags(fs, []string{"-model-alias", "claude-sonnet-4-5=qwen3.6-35b-a3b", "-model-alias", " gpt-5 = qwen3-8b "}); err != nil {
		t.Fatal(err)
	}
	acfg := f.apiConfig("127.0.0.1:1")
	if got := acfg.ModelAliases; len(got) != 2 || got["claude-sonnet-4-5"] != "qwen3.6-35b-a3b" || got["gpt-5"] != "qwen3-8b" {
		t.Errorf("aliases = %v", got)
	}
	if err := acfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	for _, bad := range []string{"noequals", "=m", "a="} {
		var f coordinatorFlags
		fs := newFlagSet("coordinator", io.Discard)
		f.register(fs)
		if err := parseFlags(fs, []string{"-model-alias", bad}); err == nil {
			t.Errorf("-model-alias %q accepted", bad)
		}
	}
}
