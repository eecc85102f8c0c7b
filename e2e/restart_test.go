package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcessesFullRestart kill -9s all three coordinators of a cluster
// whose two workers serve a placed model, and restarts them with their
// original flags (coord-1 without -join, as it was started) after an outage
// of a few seconds. The workers
// must be back and serving within 30 s of the first coordinator's start,
// without unloading the placed model, and the Raft state (the model
// registry, the placement) must be intact. Before coordinators remembered
// their gossip peers, coord-1 came back seeing nobody, status showed no
// workers for more than 90 s, and the leader withdrew the placement so the
// workers unloaded and reloaded the model.
func TestProcessesFullRestart(t *testing.T) {
	dir := t.TempDir()
	const placed = "placed-echo"
	src := filepath.Join(dir, "src", placed)
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"architectures":["Qwen3ForCausalLM"]}`), 0o644); err != nil {
		t.Fatal(err)
	}

	coordArgs := make([][]string, 3)
	var join string
	for i := range coordArgs {
		gossip := freeAddr(t)
		coordArgs[i] = []string{"coordinator", "--name", fmt.Sprintf("coord-%d", i+1), "--http", freeAddr(t),
			"--gossip", gossip, "--nats-listen", freeAddr(t), "--nats-cluster", freeAddr(t), "--raft", freeAddr(t),
			"--data-dir", filepath.Join(dir, fmt.Sprint(i+1)), "--fast-timeouts", "--no-discovery"}
		if i == 0 {
			join = gossip
		} else {
			coordArgs[i] = append(coordArgs[i], "--join", join)
		}
	}
	startAll := func() []*proc {
		var cs []*proc
		for _, a := range coordArgs {
			cs = append(cs, start(t, "coordinator", a...))
		}
		return cs
	}
	coords := startAll()
	var workers []*proc
	for i := 1; i <= 2; i++ {
		workers = append(workers, start(t, "worker", "worker", "--name", fmt.Sprintf("worker-%d", i), "--join", join,
			"--gossip", freeAddr(t), "--backend", "test", "--slots", "2", "--model-store", "127.0.0.1:0",
			"--data-dir", filepath.Join(dir, fmt.Sprintf("w%d", i)), "--fast-timeouts", "--no-discovery"))
	}
	base := "http://" + coords[0].fields["http"]
	waitStatus(t, base, func(s string) bool {
		return strings.Count(s, `"role":"worker"`) == 2 && strings.Contains(s, `"raft":"leader"`) && strings.Count(s, `"raft":"voter"`) == 2
	})
	out, err := exec.Command(binary, "models", "add", src, "--size", "1000", "--coordinator", coords[0].fields["http"]).CombinedOutput()
	if err != nil {
		t.Fatalf("models add: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	servedBy := func(base string) bool {
		st, err := getStatus(base)
		if err != nil {
			return false
		}
		n := 0
		for _, x := range st.Nodes {
			if x.Role == "worker" && x.Ready && strings.Contains(fmt.Sprint(x.Models), placed) {
				n++
			}
		}
		return n == 2
	}
	waitFor(t, 30*time.Second, "both workers serving the placed model", func() bool { return servedBy(base) })
	chatModel(ctx, t, base, placed, "before the restart")

	for _, c := range coords {
		c.cmd.Process.Signal(syscall.SIGKILL)
	}
	for _, c := range coords {
		<-c.done
	}
	// The outage outlasts the time memberlist keeps gossiping to failed
	// nodes (2 s with fast timings, 30 s on a LAN), as a power cut or an
	// upgrade would: coordinators that came back sooner were found by the
	// workers' gossip even without remembered peers.
	outage := time.NewTimer(4 * time.Second)
	<-outage.C
	restarted := time.Now()
	coords = startAll()
	base = "http://" + coords[0].fields["http"]
	waitFor(t, 30*time.Second, "workers serving through the restarted coordinators", func() bool {
		if !servedBy(base) {
			return false
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		return tryChat(rctx, base, placed, "after the restart") == nil
	})
	t.Logf("serving again %v after the first coordinator was restarted", time.Since(restarted).Round(10*time.Millisecond))
	for _, c := range coords {
		chatModel(ctx, t, "http://"+c.fields["http"], placed, "through "+c.fields["name"])
	}
	out, err = exec.Command(binary, "models", "ls", "--json", "--coordinator", coords[1].fields["http"]).CombinedOutput()
	if err != nil || !strings.Contains(string(out), placed) || !strings.Contains(string(out), "worker-1") || !strings.Contains(string(out), "worker-2") {
		t.Fatalf("models ls after the restart (registry and placement from Raft): %v\n%s", err, out)
	}
	for i, w := range workers {
		if s := w.stderr(); strings.Contains(s, "no longer placed here") {
			t.Errorf("worker-%d unloaded the placed model:\n%s", i+1, lastLines(s, 20))
		}
	}
}

// waitFor polls cond every 50 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}
