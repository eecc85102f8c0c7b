package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var tokenFile = regexp.MustCompile(`join token for another Mac written to (\S+) \(mode 0600`)

// TestProcessesSecureByDefault: `macpool up` on a machine without a cluster
// secret creates one (0600) and gives a join token; NATS is TLS; a worker
// on "another machine" (its own empty MACPOOL_HOME) without the token
// refuses to start, with `--join TOKEN` joins and serves, and with
// -insecure cannot join. (Before, everything ran in plaintext unless each
// machine had been given the secret file.)
func TestProcessesSecureByDefault(t *testing.T) {
	dir := t.TempDir()
	homeA, homeB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	up := startEnv(t, []string{"MACPOOL_HOME=" + homeA}, "coordinator", "up", "--name", "mac-a", "--http", "127.0.0.1:0",
		"--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "up"),
		"--model", model, "--backend", "test", "--fast-timeouts", "--no-discovery")
	if !strings.HasPrefix(up.fields["nats"], "tls://") {
		t.Fatalf("up's NATS %q, want tls:// (secured by default)", up.fields["nats"])
	}
	if fi, err := os.Stat(filepath.Join(homeA, "cluster.secret")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("created secret: %v %v, want mode 0600", fi, err)
	}
	var join string
	waitFor(t, 10*time.Second, "the join token file", func() bool {
		m := tokenFile.FindStringSubmatch(up.stdout())
		if m == nil {
			return false
		}
		fi, err := os.Stat(m[1])
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("join token file %s: %v %v, want mode 0600", m[1], fi, err)
		}
		b, _ := os.ReadFile(m[1])
		f := strings.Fields(string(b)) // macpool worker --join TOKEN --model MODEL
		if len(f) < 4 || f[2] != "--join" {
			t.Fatalf("join token file holds %q, want a worker command", b)
		}
		join = f[3]
		return true
	})
	workerArgs := []string{"worker", "--gossip", "127.0.0.1:0", "--model", model, "--backend", "test", "--fast-timeouts", "--no-discovery"}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, args...)
		cmd.Env = append(os.Environ(), "MACPOOL_HOME="+homeB)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(append(workerArgs, "--name", "no-secret", "--join", up.fields["gossip"])...); err == nil || !strings.Contains(out, "no cluster secret") {
		t.Fatalf("worker without the secret: %v\n%s, want a refusal naming the secret", err, lastLines(out, 5))
	}
	if out, err := run(append(workerArgs, "--name", "plain", "--join", up.fields["gossip"], "--insecure")...); err == nil || !strings.Contains(out, "failed to join") {
		t.Fatalf("-insecure worker against the secured cluster: %v\n%s, want a join failure", err, lastLines(out, 5))
	}
	startEnv(t, []string{"MACPOOL_HOME=" + homeB}, "worker", append(workerArgs, "--name", "mac-b", "--join", join)...)
	base := "http://" + up.fields["http"]
	waitStatus(t, base, func(s string) bool { return strings.Count(s, `"ready":true`) == 2 && strings.Contains(s, `"mac-b"`) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 4 {
		chatOnce(ctx, t, base, "secured")
	}
	if _, err := os.Stat(filepath.Join(homeB, "cluster.secret")); !os.IsNotExist(err) {
		t.Errorf("the token's worker wrote a secret file: %v", err)
	}
}
