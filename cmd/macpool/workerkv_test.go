package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/macpool/macpool/runner"
)

func TestKVFlags(t *testing.T) {
	parse := func(args ...string) (runner.Settings, error) {
		fs := flag.NewFlagSet("worker", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f workerFlags
		f.register(fs)
		if err := fs.Parse(args); err != nil {
			return runner.Settings{}, err
		}
		return f.settings(), nil
	}
	s, err := parse("--kv-bytes", "512MiB", "--no-prefix-cache", "--kv-f32", "--backend", "cpu", "--slots", "3", "--threads", "2")
	want := runner.Settings{Backend: "cpu", Threads: 2, Slots: 3, KVBytes: 512 << 20, NoPrefixCache: true, KVF32: true}
	if err != nil || s != want {
		t.Errorf("settings %+v (err %v), want %+v", s, err, want)
	}
	if s, err = parse(); err != nil || s.KVBytes != 0 || s.NoPrefixCache || s.KVF32 || s.Backend != "auto" {
		t.Errorf("defaults: %+v (err %v)", s, err)
	}
	if _, err := parse("--kv-bytes", "lots"); err == nil || !strings.Contains(err.Error(), `size "lots"`) {
		t.Errorf("--kv-bytes lots: error %v, want a size error", err)
	}
}
