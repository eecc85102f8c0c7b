package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/macpool/macpool/cluster"
)

func TestDrainConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name, cfg.Models, cfg.Engine = "w", []string{"m"}, &TestEngine{}
	if cfg.DrainTimeout != 60*time.Second {
		t.Fatalf("default drain timeout: got %v, want 60s", cfg.DrainTimeout)
	}
	cfg.DrainTimeout = -time.Second
	if err := cfg.Validate(); err == nil {
		t.Fatal("negative drain timeout accepted")
	}
}

// Drain of a worker whose Run never started leaves gossip at once.
func TestDrainBeforeRun(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name, cfg.Models, cfg.Engine = "w", []string{"m"}, &TestEngine{}
	cfg.Gossip = cluster.FastConfig()
	cfg.Gossip.BindAddr = "127.0.0.1:0"
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Drain(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("drain before run did not return")
	}
	if !w.Draining() {
		t.Fatal("not draining after Drain")
	}
	// Close after a drain is a no-op.
	if err := w.Close(); err != nil {
		t.Fatalf("close after drain: %v", err)
	}
}

// The power assertion is held from the first running job to the last.
func TestPowerBracketsJobs(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var p power
	if p.held() {
		t.Fatal("held before any job")
	}
	p.jobStarted(log)
	p.jobStarted(log)
	p.jobEnded()
	if !p.held() {
		t.Fatal("released while a job still runs")
	}
	p.jobEnded()
	if p.held() {
		t.Fatal("held after the last job ended")
	}
}

// A worker drained while Run still looks for a coordinator (none exists)
// returns nil from Run, and Drain returns.
func TestDrainWhileLookingForNATS(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name, cfg.Models, cfg.Engine = "w", []string{"m"}, &TestEngine{}
	cfg.Gossip = cluster.FastConfig()
	cfg.Gossip.BindAddr = "127.0.0.1:0"
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	deadline := time.Now().Add(5 * time.Second)
	for !w.drain.runStarted.Load() {
		if time.Now().After(deadline) {
			t.Fatal("Run did not start")
		}
		time.Sleep(time.Millisecond) // polling interval
	}
	if err := w.Drain(context.Background()); err != nil {
		t.Fatalf("drain: %v", err)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("run after drain: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the drain")
	}
}
