package main

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/metrics"
	"github.com/macpool/macpool/worker"
)

// macpool models add/ls/rm against a coordinator and a worker taking
// placed models (-backend test engine).
func TestModelsCommand(t *testing.T) {
	ccfg := coordinator.DefaultConfig()
	ccfg.Name = "c1"
	ccfg.DataDir = t.TempDir()
	ccfg.NATSListen = "127.0.0.1:0"
	ccfg.Gossip = cluster.FastConfig()
	ccfg.Bootstrap = true
	ccfg.FastRaft()
	c, err := coordinator.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cdone := make(chan error, 1)
	go func() { cdone <- c.Run(ctx) }()
	hs, err := newHTTPServer(api.DefaultConfig(), c, metrics.New(), nil) // the product's router
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hs.Handler())

	wcfg := worker.DefaultConfig()
	wcfg.Name = "w1"
	wcfg.Gossip = cluster.FastConfig()
	wcfg.Gossip.Join = []string{c.GossipAddr()}
	wcfg.MetaInterval = 50 * time.Millisecond
	pc := worker.DefaultModelsConfig()
	pc.Dir = t.TempDir()
	pc.Listen = "127.0.0.1:0"
	pc.PollInterval = 100 * time.Millisecond
	pc.Load = func(context.Context, string, string) (worker.Engine, func() error, error) {
		return &worker.TestEngine{}, func() error { return nil }, nil
	}
	wcfg.Placed = &pc
	w, err := worker.New(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(ctx) }()
	defer func() {
		cancel()
		srv.Close()
		for _, ch := range []chan error{wdone, cdone} {
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Error("node did not stop")
			}
		}
	}()

	model := filepath.Join(t.TempDir(), "tiny")
	os.MkdirAll(model, 0o755)
	os.WriteFile(filepath.Join(model, "config.json"), []byte(`{"model_type":"qwen3"}`), 0o644)
	os.WriteFile(filepath.Join(model, "weights.bin"), make([]byte, 3000), 0o644)

	run := func(args ...string) (string, string, error) {
		var out, errb strings.Builder
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		defer rcancel()
		err := runModels(rctx, append(args, "-coordinator", srv.URL), &out, &errb)
		return out.String(), errb.String(), err
	}
	out, _, err := run("add", model, "-wait")
	if err != nil {
		t.Fatalf("models add: %v\n%s", err, out)
	}
	if !strings.Contains(out, "added model tiny") || !strings.Contains(out, "tiny is served by w1") || !strings.Contains(out, "w1: ready (local)") {
		t.Errorf("models add -wait output:\n%s", out)
	}
	out, _, err = run("ls")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "tiny") || !strings.Contains(out, "3.0 kB") || !strings.Contains(out, "w1: ready") {
		t.Errorf("models ls output:\n%s", out)
	}
	if out, _, err = run("rm", "tiny"); err != nil || !strings.Contains(out, "removed model tiny") {
		t.Fatalf("models rm: %v %s", err, out)
	}
	if _, _, err = run("rm", "tiny"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("second rm: got %v, want 404", err)
	}
	for _, args := range [][]string{
		{"add"},
		{"add", "/does/not/exist"},
		{"add", "not a ref"},
		{"frobnicate"},
	} {
		if _, _, err := run(args...); !errors.Is(err, errUsage) {
			t.Errorf("models %v: got %v, want a usage error", args, err)
		}
	}
}
