package runner

import (
	"strings"
	"testing"
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
		got, err := ParseBytes(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseBytes(%q): error %v, want one containing %q", c.in, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	if s := FormatBytes(3 << 30); s != "3GiB" {
		t.Errorf("FormatBytes(3GiB) = %q", s)
	}
}
