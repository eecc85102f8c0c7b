package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestProcessesPipelineHeal: the link between two live stage worker
// processes of a 3-stage pipeline is reset mid-stream (the kernel destroys
// the TCP sockets on the middle stage's pipeline port, ss -K: a reset
// without any process dying or leaving gossip). The stream completes with
// the text one worker gives; the plan keeps its epoch and workers (the
// ring re-connected, nothing was re-placed); later requests answer the
// same. Needs root (SOCK_DESTROY) and ss; skips otherwise.
func TestProcessesPipelineHeal(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process real-engine pipeline")
	}
	if os.Geteuid() != 0 {
		t.Skip("ss -K needs root")
	}
	if _, err := exec.LookPath("ss"); err != nil {
		t.Skip("no ss (iproute2)")
	}
	pc := startPipelineCluster(t, 3)
	coord, workers, base := pc.coord, pc.workers, pc.base
	m := pipelineUp(t, base, "tiny", 0, 90*time.Second)
	t.Logf("placed: epoch %d, stages %+v", m.Epoch, m.Stages)

	client := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	params := pipelineParams
	want := map[bool]string{}
	for _, seeded := range []bool{false, true} {
		ref, err := client.Chat.Completions.New(ctx, params("whole", seeded))
		if err != nil {
			t.Fatal(err)
		}
		want[seeded] = ref.Choices[0].Message.Content
	}
	// The middle stage's pipeline port carries the link from stage 0.
	middle := m.Stages[1].Worker
	_, port, err := net.SplitHostPort(workers[middle].fields["pipeline"])
	if err != nil {
		t.Fatalf("middle stage %s's pipeline address %q: %v", middle, workers[middle].fields["pipeline"], err)
	}
	for round, seeded := range []bool{true, false} {
		failovers := strings.Count(coord.stderr(), "failing over")
		var cut time.Time
		got := streamText(t, client.Chat.Completions.NewStreaming(ctx, params("tiny", seeded)), func(chunks int) {
			if chunks != 8 {
				return
			}
			cut = time.Now()
			filter := fmt.Sprintf("( sport = :%s or dport = :%s )", port, port)
			out, err := exec.Command("ss", append([]string{"-K", "-t", "state", "established"}, strings.Fields(filter)...)...).CombinedOutput()
			if !strings.Contains(string(out), ":"+port) {
				t.Errorf("ss -K destroyed no socket on port %s: %v\n%s", port, err, out)
			}
		})
		if cut.IsZero() {
			t.Fatalf("round %d: the stream ended before the reset", round)
		}
		t.Logf("round %d (seeded %v): link to %s reset mid-stream; the stream finished %v later", round, seeded, middle, time.Since(cut).Round(time.Millisecond))
		if got != want[seeded] {
			t.Fatalf("round %d: text after the reset\n got %q\nwant %q", round, got, want[seeded])
		}
		if strings.Count(coord.stderr(), "failing over") == failovers {
			t.Errorf("round %d: the coordinator never resumed the job (did the reset reach the stream?)", round)
		}
		list, err := modelList(base)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range list {
			if x.Name == "tiny" && (x.Epoch != m.Epoch || fmt.Sprint(x.Stages) != fmt.Sprint(m.Stages)) {
				t.Errorf("round %d: re-placed after a reset between live workers: epoch %d stages %+v, was %d %+v", round, x.Epoch, x.Stages, m.Epoch, m.Stages)
			}
		}
		g, err := client.Chat.Completions.New(ctx, params("tiny", false))
		if err != nil || g.Choices[0].Message.Content != want[false] {
			t.Fatalf("round %d: a request after the reset: %v %q, want %q", round, err, g.Choices[0].Message.Content, want[false])
		}
	}
	if n := strings.Count(workers[m.Stages[0].Worker].stderr(), "pipeline re-connected"); n == 0 {
		t.Errorf("the head's worker never logged a re-connected ring")
	}
}
