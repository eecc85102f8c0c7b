package main

import (
	"context"
	"strings"
	"testing"
)

// Bad use of keys and drain is a usage error (exit 2) with a clear
// message, before anything is sent.
func TestKeysDrainUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"keys"}, "subcommand is required"},
		{[]string{"keys", "frob"}, `unknown keys subcommand "frob"`},
		{[]string{"keys", "revoke"}, "needs the key id"},
		{[]string{"keys", "list", "extra"}, `unexpected argument "extra"`},
		{[]string{"keys", "create", "--bogus"}, "flag provided but not defined"},
		{[]string{"drain"}, "needs the node name"},
		{[]string{"drain", "w1", "--timeout", "-1s"}, "-timeout must not be negative"},
		{[]string{"drain", "w1", "w2"}, `unexpected argument "w2"`},
		{[]string{"drain", "--timeout", "1s", "w1", "w2"}, `unexpected argument "w2"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := runMain(context.Background(), tc.args, &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}

// TestClientCommandHelp: keys -h and models -h describe every subcommand
// and the flags they share, not one line.
func TestClientCommandHelp(t *testing.T) {
	for cmd, words := range map[string][]string{
		"keys":   {"keys create", "keys list", "keys revoke", "-admin key", "-coordinator", "MACPOOL_COORDINATOR", "-admin-key"},
		"models": {"models add", "models rm", "models ls", "-coordinator", "MACPOOL_COORDINATOR", "-admin-key"},
	} {
		var stdout, stderr strings.Builder
		if code := runMain(context.Background(), []string{cmd, "-h"}, &stdout, &stderr); code != 0 {
			t.Errorf("%s -h: exit %d", cmd, code)
		}
		for _, w := range words {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%s -h lacks %q:\n%s", cmd, w, stderr.String())
			}
		}
	}
}

func TestSplitVerb(t *testing.T) {
	for _, args := range [][]string{{"w1", "--timeout", "2s"}, {"--timeout", "2s", "w1"}} {
		fs := newFlagSet("drain", &strings.Builder{})
		timeout := fs.Duration("timeout", 0, "")
		node, err := splitVerb(fs, args)
		if err != nil || node != "w1" || timeout.String() != "2s" {
			t.Fatalf("splitVerb(%q): node %q timeout %v err %v", args, node, *timeout, err)
		}
	}
}
