package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// freeAddr returns 127.0.0.1:PORT with a port that was free for TCP and UDP
// a moment ago (gossip binds both; the other listeners only TCP).
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("no port free for both TCP and UDP")
	return ""
}

// TestProcessesFixedPorts runs every role with fixed ports, as an office
// that opens known ports in its firewall would: two coordinators (HTTP,
// gossip, NATS client and route, Raft all fixed), a worker with a fixed
// gossip port, and a one-machine `up`. Every node must advertise the
// address it bound (a fixed gossip port used to be gossiped as port 0, so
// nodes flapped in and out and `up` exited with "join [127.0.0.1:0]").
func TestProcessesFixedPorts(t *testing.T) {
	dir := t.TempDir()
	type addrs struct{ http, gossip, nats, route, raft string }
	var ca [2]addrs
	var coords [2]*proc
	for i := range ca {
		ca[i] = addrs{freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)}
		args := []string{"coordinator", "--name", fmt.Sprintf("coord-%d", i+1), "--http", ca[i].http,
			"--gossip", ca[i].gossip, "--nats-listen", ca[i].nats, "--nats-cluster", ca[i].route, "--raft", ca[i].raft,
			"--data-dir", filepath.Join(dir, fmt.Sprint(i)), "--fast-timeouts", "--no-discovery"}
		if i > 0 {
			args = append(args, "--join", ca[0].gossip)
		}
		coords[i] = start(t, "coordinator", args...)
		f := coords[i].fields
		if f["http"] != ca[i].http || f["gossip"] != ca[i].gossip || f["raft"] != ca[i].raft || !strings.HasSuffix(f["nats"], ca[i].nats) {
			t.Fatalf("coord-%d listening line %v, want http=%s gossip=%s nats=…%s raft=%s", i+1, f, ca[i].http, ca[i].gossip, ca[i].nats, ca[i].raft)
		}
	}
	wg := freeAddr(t)
	w := start(t, "worker", "worker", "--name", "worker-1", "--join", ca[1].gossip, "--gossip", wg,
		"--model", model, "--backend", "test", "--slots", "2", "--fast-timeouts", "--no-discovery")
	if w.fields["gossip"] != wg {
		t.Fatalf("worker listening line %v, want gossip=%s", w.fields, wg)
	}
	for _, c := range ca {
		waitStatus(t, "http://"+c.http, func(s string) bool {
			return strings.Count(s, `"ready":true`) == 1 && strings.Count(s, `"role":"coordinator"`) == 2 &&
				strings.Contains(s, `"raft":"leader"`) && strings.Contains(s, `"raft":"voter"`)
		})
	}
	// Stable over several probe rounds (a node gossiped at the wrong port was
	// suspected and dropped within about a second with fast timings).
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		for _, c := range ca {
			st, err := getStatus("http://" + c.http)
			if err != nil || len(st.Nodes) != 3 {
				t.Fatalf("membership at %s flapped: %+v %v", c.http, st, err)
			}
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range ca {
		chatOnce(ctx, t, "http://"+c.http, "fixed ports")
	}

	// macpool up: coordinator and its local worker, every port fixed.
	u := addrs{freeAddr(t), freeAddr(t), freeAddr(t), "", freeAddr(t)}
	up := start(t, "coordinator", "up", "--name", "solo", "--http", u.http, "--gossip", u.gossip, "--nats-listen", u.nats,
		"--raft", u.raft, "--data-dir", filepath.Join(dir, "up"), "--model", model, "--backend", "test",
		"--fast-timeouts", "--no-discovery")
	if up.fields["gossip"] != u.gossip {
		t.Fatalf("up listening line %v, want gossip=%s", up.fields, u.gossip)
	}
	waitStatus(t, "http://"+u.http, func(s string) bool { return strings.Count(s, `"ready":true`) == 1 })
	chatOnce(ctx, t, "http://"+u.http, "up with fixed ports")
}

// chatOnce sends one chat request to the echo model and checks its answer.
func chatOnce(ctx context.Context, t *testing.T, base, text string) {
	t.Helper()
	chatModel(ctx, t, base, model, text)
}

// chatModel sends one chat request to an echo engine serving name.
func chatModel(ctx context.Context, t *testing.T, base, name, text string) {
	t.Helper()
	if err := tryChat(ctx, base, name, text); err != nil {
		t.Fatal(err)
	}
}

func tryChat(ctx context.Context, base, name, text string) error {
	client := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk"), option.WithMaxRetries(0))
	c, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
		Model: name, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(text)},
	})
	if err != nil {
		return fmt.Errorf("chat via %s: %w", base, err)
	}
	if got := c.Choices[0].Message.Content; got != text {
		return fmt.Errorf("chat via %s: got %q, want %q", base, got, text)
	}
	return nil
}
