package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/macpool/macpool/runner"
)

func TestParseByteSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  string
	}{
		{"2GiB", 2 << 30, ""},
		{"512MiB", 512 << 20, ""},
		{"512mib", 512 << 20, ""},
		{"1.5GiB", 3 << 29, ""},
		{"2GB", 2e9, ""},
		{"64k", 64 << 10, ""},
		{"1048576", 1 << 20, ""},
		{" 3 GiB ", 3 << 30, ""},
		{"0", 0, ""},
		{"", 0, `size "": want a number`},
		{"GiB", 0, `size "GiB": want a number`},
		{"two GiB", 0, `size "two GiB": want a number`},
		{"-1GiB", 0, `size "-1GiB": out of range`},
		{"1e30", 0, `size "1e30": out of range`},
	} {
		got, err := parseByteSize(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("parseByteSize(%q): error %v, want one containing %q", c.in, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	if s := formatByteSize(3 << 30); s != "3GiB" {
		t.Errorf("formatByteSize(3GiB) = %q", s)
	}
}

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
