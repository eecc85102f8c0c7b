package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

var (
	exportKey = regexp.MustCompile(`(?m)^export OPENAI_API_KEY=(\S+)$`)
	keyFile   = regexp.MustCompile(`admin key "admin", written to (\S+) \(mode 0600`)
)

// TestProcessesAPIKeyRequired: a coordinator whose API listens beyond
// loopback (here forced on loopback with --require-api-key, as tests stay
// on 127.0.0.1) needs an API key even while none is stored: its first start
// creates an admin key and prints `export OPENAI_API_KEY=…` (to a terminal;
// a pipe, like a service's log, gets the path of a 0600 file holding that
// line instead); callers without
// it get 401 on the API and the admin endpoints; a restart creates no
// second key and the printed one still works. (Before, such a coordinator
// served anyone on the network until someone created a key.)
func TestProcessesAPIKeyRequired(t *testing.T) {
	dir := t.TempDir()
	args := []string{"up", "--name", "solo", "--http", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(dir, "up"), "--model", model, "--backend", "test", "--fast-timeouts", "--no-discovery", "--require-api-key"}
	up := start(t, "coordinator", args...)
	base := "http://" + up.fields["http"]
	var key string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("up stdout:\n%s", up.stdout())
		}
	})
	waitFor(t, 15*time.Second, "the admin key's file", func() bool {
		m := keyFile.FindStringSubmatch(up.stdout())
		if m == nil {
			return false
		}
		fi, err := os.Stat(m[1])
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("admin key file %s: %v %v, want mode 0600", m[1], fi, err)
		}
		b, _ := os.ReadFile(m[1])
		if k := exportKey.FindStringSubmatch(string(b)); k != nil {
			key = k[1]
		}
		return key != ""
	})
	if strings.Contains(up.stdout(), key) {
		t.Fatalf("the admin key was printed to a pipe (a service log):\n%s", up.stdout())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	anon := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithMaxRetries(0))
	var apiErr *oai.Error
	if _, err := anon.Models.List(ctx); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Fatalf("API without a key: got %v, want 401", err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/admin/keys", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("admin endpoint without a key: %v %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}
	waitStatusKey(t, base, key, func(s string) bool { return strings.Contains(s, `"ready":true`) })
	client := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	c, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
		Model: model, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("keyed")},
	})
	if err != nil || c.Choices[0].Message.Content != "keyed" {
		t.Fatalf("chat with the printed key: %+v %v", c, err)
	}
	// The refused requests (401s before the service saw them, a 400 for bad
	// JSON) are counted in /metrics like any other.
	if resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":`)); err == nil {
		resp.Body.Close()
	}
	mreq, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	mreq.Header.Set("Authorization", "Bearer "+key)
	mresp, err := http.DefaultClient.Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{`status="401"`, `macpool_errors_total{kind="invalid_api_key"}`} {
		if !strings.Contains(string(mb), want) {
			t.Errorf("/metrics lacks %s for the refused requests:\n%s", want, grepLines(string(mb), "macpool_requests_total", "macpool_errors_total"))
		}
	}
	cmd := exec.Command(binary, "keys", "list", "--coordinator", up.fields["http"], "--admin-key", key)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "admin") {
		t.Fatalf("keys list with the printed admin key: %v\n%s", err, out)
	}

	up.stop(t)
	up = start(t, "coordinator", args...)
	base = "http://" + up.fields["http"]
	waitStatusKey(t, base, key, func(s string) bool { return strings.Contains(s, `"ready":true`) })
	if strings.Contains(up.stdout(), "admin-key") {
		t.Errorf("a restart with a stored key printed a new one:\n%s", up.stdout())
	}
}

// waitStatusKey is waitStatus with an API key.
func waitStatusKey(t *testing.T, base, key string, cond func(string) bool) {
	t.Helper()
	waitFor(t, 15*time.Second, "status condition", func() bool {
		st, err := getStatusKey(base, key)
		return err == nil && cond(st)
	})
}

// getStatusKey fetches the raw status JSON with an API key.
func getStatusKey(base, key string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, base+"/v1/cluster/status", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), err
}

// grepLines returns the lines of s that contain any of words.
func grepLines(s string, words ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
