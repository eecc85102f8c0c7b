package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpool/macpool/cluster"
)

// Which secret file up/coordinator/worker use: -secret-file, else
// $MACPOOL_SECRET_FILE, else the default file if it exists; "none" runs
// open; a named file must exist. Without a secret, a warning when
// listening beyond loopback.
func TestClusterSecretResolution(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) (string, *cluster.Secret) {
		s, err := cluster.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := cluster.WriteSecret(p, s, false); err != nil {
			t.Fatal(err)
		}
		return p, s
	}
	flagPath, flagSecret := write("flag.secret")
	envPath, envSecret := write("env.secret")
	home := filepath.Join(dir, "home")
	defPath, defSecret := write("home/cluster.secret")
	if defPath != filepath.Join(home, "cluster.secret") {
		t.Fatal(defPath)
	}
	cases := []struct {
		name, flag, env, home string
		gossip                string
		want                  *cluster.Secret
		wantErr, wantWarn     string
	}{
		{name: "flag first", flag: flagPath, env: envPath, home: home, want: flagSecret},
		{name: "env next", env: envPath, home: home, want: envSecret},
		{name: "default file", home: home, want: defSecret},
		{name: "no default file, loopback", home: filepath.Join(dir, "empty"), gossip: "127.0.0.1:0"},
		{name: "no default file, LAN", home: filepath.Join(dir, "empty"), gossip: "0.0.0.0:7946", wantWarn: "no cluster secret"},
		{name: "none", flag: "none", home: home, gossip: "0.0.0.0:7946", wantWarn: "no cluster secret"},
		{name: "named file missing", flag: filepath.Join(dir, "missing"), home: home, wantErr: "no such file"},
		{name: "env file missing", env: filepath.Join(dir, "missing"), home: home, wantErr: "no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("MACPOOL_SECRET_FILE", tc.env)
			t.Setenv("MACPOOL_HOME", tc.home)
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			f := clusterFlags{secretFile: tc.flag, gossip: tc.gossip}
			got, err := f.clusterSecret(logger, tc.gossip)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tc.want) {
				t.Fatalf("got secret %v, want %v", id(got), id(tc.want))
			}
			if warned := strings.Contains(logs.String(), "no cluster secret"); warned != (tc.wantWarn != "") {
				t.Fatalf("warning logged: %v, want %v; logs:\n%s", warned, tc.wantWarn != "", logs.String())
			}
			// Loaded once: the cached answer stays even if the file goes.
			again, err := f.clusterSecret(logger)
			if err != nil || !again.Equal(got) {
				t.Fatalf("second call: %v %v", id(again), err)
			}
		})
	}
}

func id(s *cluster.Secret) string {
	if s == nil {
		return "none"
	}
	return s.ID()
}

func TestInitCommand(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("MACPOOL_SECRET_FILE", "")
	t.Setenv("MACPOOL_HOME", dir)
	var out bytes.Buffer
	if err := runInit(context.Background(), nil, &out, io.Discard); err != nil {
		t.Fatalf("init: %v", err)
	}
	path := filepath.Join(dir, "cluster.secret")
	s, err := cluster.LoadSecret(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), s.ID()) || !strings.Contains(out.String(), "scp") {
		t.Errorf("init output lacks the id or the copy hint:\n%s", out.String())
	}
	if err := runInit(context.Background(), nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-force") {
		t.Fatalf("second init: got %v, want a refusal naming -force", err)
	}
	if err := runInit(context.Background(), []string{"-force"}, io.Discard, io.Discard); err != nil {
		t.Fatalf("init -force: %v", err)
	}
	if s2, err := cluster.LoadSecret(path); err != nil || s2.Equal(s) {
		t.Fatalf("after -force: %v, same key %v; want a new key", err, s2.Equal(s))
	}
	other := filepath.Join(dir, "x", "other.secret")
	if err := runInit(context.Background(), []string{"-out", other}, io.Discard, io.Discard); err != nil {
		t.Fatalf("init -out: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatal(err)
	}
}
