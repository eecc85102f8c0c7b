package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/macpool/macpool/cluster"
)

// TestProcessesClusterSecret: `macpool init` makes a secret; a coordinator
// (-secret-file) and a worker (default file under $MACPOOL_HOME) use it; a
// stranger with another secret, and one without any, cannot join; NATS
// refuses plain connections; requests are served by the good worker only.
func TestProcessesClusterSecret(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	homeEnv := "MACPOOL_HOME=" + home

	// init writes $MACPOOL_HOME/cluster.secret, 0600, and refuses to overwrite it.
	initCmd := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(binary, append([]string{"init"}, args...)...)
		cmd.Env = append(append(os.Environ(), "MACPOOL_SECRET_FILE="), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := initCmd([]string{homeEnv})
	if err != nil || !strings.Contains(out, "wrote cluster secret") {
		t.Fatalf("macpool init: %v\n%s", err, out)
	}
	secretPath := filepath.Join(home, "cluster.secret")
	if fi, err := os.Stat(secretPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v, want mode 0600", fi, err)
	}
	if out, err := initCmd([]string{homeEnv}); err == nil || !strings.Contains(out, "already exists") {
		t.Fatalf("second macpool init: got %v\n%s, want a refusal", err, out)
	}
	otherPath := filepath.Join(dir, "other.secret")
	if out, err := initCmd(nil, "--out", otherPath); err != nil {
		t.Fatalf("macpool init --out: %v\n%s", err, out)
	}
	good, err := cluster.LoadSecret(secretPath)
	if err != nil {
		t.Fatal(err)
	}

	coord := start(t, "coordinator", "coordinator", "--name", "coord-1", "--http", "127.0.0.1:0",
		"--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "coord"),
		"--fast-timeouts", "--secret-file", secretPath)
	natsURL := coord.fields["nats"]
	if !strings.HasPrefix(natsURL, "tls://") {
		t.Fatalf("coordinator nats %q, want tls:// with a secret", natsURL)
	}
	startEnv(t, []string{homeEnv}, "worker", "worker", "--name", "good", "--join", coord.fields["gossip"],
		"--gossip", "127.0.0.1:0", "--model", model, "--backend", "test", "--fast-timeouts")
	base := "http://" + coord.fields["http"]
	waitStatus(t, base, func(s string) bool { return strings.Contains(s, `"ready":true`) })

	// Strangers: another secret, or none at all, fail to join and exit.
	for _, tc := range []struct{ name, file string }{{"stranger-other", otherPath}, {"stranger-none", "none"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, binary, "worker", "--name", tc.name, "--join", coord.fields["gossip"],
			"--gossip", "127.0.0.1:0", "--model", model, "--backend", "test", "--fast-timeouts", "--secret-file", tc.file)
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut || !strings.Contains(string(out), "failed to join") {
			t.Errorf("%s: got %v\n%s\nwant an exit with a join error", tc.name, err, lastLines(string(out), 10))
		} else {
			t.Logf("%s: %s", tc.name, lastLines(string(out), 1))
		}
	}

	// NATS: without the cluster TLS and credentials nothing connects.
	plain := "nats://" + strings.TrimPrefix(natsURL, "tls://")
	if nc, err := nats.Connect(plain, nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("plain NATS connection accepted, want a refusal")
	}
	opts, err := cluster.NATSOptions(good, "e2e", natsURL)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		t.Fatalf("NATS with the secret: %v", err)
	}
	nc.Close()

	// Requests are served, by the good worker only; status lists no stranger.
	client := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 4; i++ {
		var resp *http.Response
		c, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model: model, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("secret hello")},
		}, option.WithResponseInto(&resp))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := c.Choices[0].Message.Content; got != "secret hello" {
			t.Errorf("request %d: got %q, want the echo", i, got)
		}
		if w := resp.Header.Get("X-Macpool-Worker"); w != "good" {
			t.Errorf("request %d served by %q, want good", i, w)
		}
	}
	st, err := getStatus(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Name != "coord-1" && n.Name != "good" {
			t.Errorf("status lists %s, want only coord-1 and good", n.Name)
		}
	}
}
