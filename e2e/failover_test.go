package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/macpool/macpool/cluster"
)

type statusDoc struct {
	Leader string `json:"leader"`
	Nodes  []struct {
		Name    string `json:"name"`
		Role    string `json:"role"`
		Raft    string `json:"raft"`
		Ready   bool   `json:"ready"`
		Running int    `json:"running"`
	} `json:"nodes"`
}

func getStatus(base string) (statusDoc, error) {
	var st statusDoc
	resp, err := http.Get(base + "/v1/cluster/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// TestProcessesLeaderKill runs three coordinator processes, each with an
// embedded NATS server clustered with the others (--nats-cluster; no
// external NATS), and two one-slot workers. It moves the queue's JetStream
// stream and consumer leaders onto the Raft leader (the worst case), queues
// a request behind two running ones, SIGKILLs the Raft leader and checks
// that the API keeps answering through a survivor within 10 s and that the
// queued request completes.
func TestProcessesLeaderKill(t *testing.T) {
	dir := t.TempDir()
	var coords []*proc
	join := ""
	for i := 1; i <= 3; i++ {
		args := []string{"coordinator", "--name", fmt.Sprintf("coord-%d", i), "--http", "127.0.0.1:0",
			"--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--nats-cluster", "127.0.0.1:0",
			"--data-dir", filepath.Join(dir, fmt.Sprint(i)), "--fast-timeouts"}
		if join != "" {
			args = append(args, "--join", join)
		}
		coords = append(coords, start(t, "coordinator", args...))
		join = coords[0].fields["gossip"]
	}
	for i := 1; i <= 2; i++ {
		start(t, "worker", "worker", "--name", fmt.Sprintf("worker-%d", i), "--join", join, "--gossip", "127.0.0.1:0",
			"--model", model, "--backend", "test", "--slots", "1", "--test-token-delay", "50ms", "--fast-timeouts")
	}

	// Wait until one coordinator leads a 3-voter configuration and sees the workers.
	var leader int
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := getStatus("http://" + coords[0].fields["http"])
		voters, workers := 0, 0
		for _, n := range st.Nodes {
			if n.Raft != "" {
				voters++
			}
			if n.Role == "worker" && n.Ready {
				workers++
			}
		}
		if err == nil && st.Leader != "" && voters == 3 && workers == 2 {
			fmt.Sscanf(st.Leader, "coord-%d", &leader)
			leader--
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 3-voter raft with a leader and the workers: %+v %v", st, err)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	victim := fmt.Sprintf("coord-%d", leader+1)
	nc, err := nats.Connect(coords[(leader+1)%3].fields["nats"])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	queueOn(t, nc, victim)

	survivor := coords[(leader+1)%3]
	client := oai.NewClient(option.WithBaseURL("http://"+survivor.fields["http"]+"/v1/"), option.WithAPIKey("sk"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Occupy both workers (2 s each), then queue a third request.
	var wg sync.WaitGroup
	started := make(chan struct{}, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := client.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{
				Model: model, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(strings.Repeat("busy ", 40))},
			})
			first := true
			for s.Next() {
				if first {
					started <- struct{}{}
					first = false
				}
			}
			if s.Err() != nil {
				t.Errorf("busy request %d: %v", i, s.Err())
			}
		}()
	}
	<-started
	<-started
	queuedDone := make(chan error, 1)
	go func() {
		c, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model: model, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("queued before the kill")},
		})
		if err == nil && c.Choices[0].Message.Content != "queued before the kill" {
			err = fmt.Errorf("got %q", c.Choices[0].Message.Content)
		}
		queuedDone <- err
	}()
	js, _ := jetstream.New(nc)
	for {
		st, err := js.Stream(ctx, cluster.StreamName(model))
		if err == nil && st.CachedInfo().State.Msgs == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the third request never waited in the queue")
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}

	killed := time.Now()
	coords[leader].cmd.Process.Signal(syscall.SIGKILL)
	<-coords[leader].done
	for {
		rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
		c, err := client.Chat.Completions.New(rctx, oai.ChatCompletionNewParams{
			Model: model, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("still answering")},
		})
		rcancel()
		if err == nil && c.Choices[0].Message.Content == "still answering" {
			break
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("API not answering 10 s after the leader was killed: %v", err)
		}
		t.Logf("after %v: %v", time.Since(killed), err)
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	t.Logf("answered %v after the leader was killed", time.Since(killed))
	if err := <-queuedDone; err != nil {
		t.Fatalf("request queued before the kill: %v", err)
	}
	t.Logf("queued request done %v after the kill", time.Since(killed))
	wg.Wait()
	// And a new leader is elected among the survivors.
	for {
		st, err := getStatus("http://" + survivor.fields["http"])
		if err == nil && st.Leader != "" && st.Leader != victim {
			t.Logf("new leader %s after %v", st.Leader, time.Since(killed))
			break
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("no new leader 10 s after the kill: %+v %v", st, err)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

// queueOn waits for the model's queue to have three current replicas and
// moves its stream and consumer leaders to server name.
func queueOn(t *testing.T, nc *nats.Conn, name string) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := cluster.StreamName(model)
	deadline := time.Now().Add(30 * time.Second)
	move := []byte(fmt.Sprintf(`{"placement":{"preferred":%q}}`, name))
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ok := false
		st, err := js.Stream(ctx, stream)
		var cons jetstream.Consumer
		if err == nil {
			cons, err = st.Consumer(ctx, cluster.ConsumerName)
		}
		if err == nil {
			si, ci := st.CachedInfo(), cons.CachedInfo()
			ok = si.Config.Replicas == 3 && allCurrent(si.Cluster) && allCurrent(ci.Cluster) &&
				si.Cluster.Leader == name && ci.Cluster.Leader == name
			if !ok && si.Config.Replicas == 3 && allCurrent(si.Cluster) && allCurrent(ci.Cluster) {
				if si.Cluster.Leader != name {
					nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, move)
				} else {
					nc.RequestWithContext(ctx, "$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+"."+cluster.ConsumerName, move)
				}
			}
		}
		cancel()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue leaders not on %s: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

func allCurrent(ci *jetstream.ClusterInfo) bool {
	if ci == nil || ci.Leader == "" || len(ci.Replicas) != 2 {
		return false
	}
	for _, r := range ci.Replicas {
		if !r.Current {
			return false
		}
	}
	return true
}
