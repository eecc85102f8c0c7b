package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestServiceInstallDryRun(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("HF_HOME", "/srv/hf")
	var out, errOut bytes.Buffer
	err := runService(context.Background(), []string{"install", "-dry-run", "-env", "HF_TOKEN=t", "--", "worker", "-join", "a:7946"}, &out, &errOut)
	if err != nil {
		t.Fatalf("%v (stderr %q)", err, errOut.String())
	}
	for _, want := range []string{"worker", "-join", "a:7946", "HF_HOME", "/srv/hf", "HF_TOKEN"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry-run output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(out.String(), home) {
		t.Errorf("dry-run output does not name a path under HOME %s:\n%s", home, out.String())
	}
	if strings.Contains(out.String(), filepath.Join(home, "Library")) == strings.Contains(out.String(), ".config/systemd/user") {
		t.Errorf("want exactly one of the launchd and systemd paths:\n%s", out.String())
	}
}

func TestServiceUsageErrors(t *testing.T) {
	tests := [][]string{
		{},
		{"frob"},
		{"install"},
		{"install", "--", "api"},
		{"install", "-env", "novalue", "--", "up"},
		{"uninstall"},
	}
	for _, args := range tests {
		var out, errOut bytes.Buffer
		if err := runService(context.Background(), args, &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("service %q: got %v, want a usage error", args, err)
		}
	}
}
