package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/engine/testmodel"
	"github.com/macpool/macpool/loader"
	"github.com/macpool/macpool/modelstore"
	"github.com/macpool/macpool/pipeline"
)

// splitLimit is the largest --memory-limit (in whole MiB) at which the
// coordinator's placement splits the model at dir over exactly three
// workers: two are not enough, and no single one holds it whole.
func splitLimit(t *testing.T, dir string) int64 {
	t.Helper()
	l, err := loader.Layout(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			size += fi.Size()
		}
		return nil
	})
	pc := coordinator.DefaultPlacementConfig()
	stages := func(limit int64) int {
		ws := []pipeline.Worker{{Name: "a", Free: limit}, {Name: "b", Free: limit}, {Name: "c", Free: limit}, {Name: "d", Free: limit}}
		as, err := pc.PipelinePlace(l, ws)
		if err != nil {
			return 0
		}
		return len(as)
	}
	for limit := pc.Need(size) &^ (1<<20 - 1); limit > pc.KVBudget; limit -= 1 << 20 {
		if stages(limit) == 3 { // scanning down: the first limit two workers cannot hold it at
			t.Logf("model %d bytes (whole need %d); --memory-limit %d forces 3 stages", size, pc.Need(size), limit)
			return limit
		}
	}
	t.Fatal("no memory limit splits the model over three workers")
	return 0
}

// modelList is GET /v1/admin/models.
func modelList(base string) ([]admin.ModelStatus, error) {
	resp, err := http.Get(base + admin.ModelsPath)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var list struct {
		Data []admin.ModelStatus `json:"data"`
	}
	return list.Data, json.Unmarshal(b, &list)
}

// pipelineUp waits until model runs as a 3-stage pipeline newer than
// epoch whose first stage's worker gossips it ready, and returns it.
func pipelineUp(t *testing.T, base, model string, epoch uint64, within time.Duration) admin.ModelStatus {
	t.Helper()
	deadline := time.Now().Add(within)
	var last admin.ModelStatus
	for time.Now().Before(deadline) {
		list, err := modelList(base)
		st, serr := getStatus(base)
		if err == nil && serr == nil {
			for _, m := range list {
				if m.Name != model {
					continue
				}
				last = m
				if len(m.Stages) != 3 || m.Epoch <= epoch {
					continue
				}
				ready := 0
				for _, w := range m.Workers {
					if w.State == "ready" && w.Stage != "" {
						ready++
					}
				}
				for _, n := range st.Nodes {
					if n.Name == m.Stages[0].Worker && n.Ready && strings.Contains(strings.Join(n.Models, ","), model) && ready == 3 {
						return m
					}
				}
			}
		}
		time.Sleep(200 * time.Millisecond) // polling the admin API
	}
	t.Fatalf("no 3-stage pipeline of %s newer than epoch %d within %v; last: %+v", model, epoch, within, last)
	return last
}

// TestProcessesPipeline: a model too big for any one worker (--memory-limit)
// is split over three worker processes (three more are spares; the
// model's source worker has no room for a stage);
// the OpenAI API (openai-go) answers it greedy and seeded, streamed and
// not, with exactly the text of the same model served whole by one worker;
// kill -9 of the middle stage, then of the last, then of the first,
// mid-stream: each stream completes with the same text on the re-placed
// pipeline. The stages fetch only their part of the files.
func TestProcessesPipeline(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process real-engine pipeline")
	}
	// w1..w7 are three stages and four spares; the bandwidth is unknown, so
	// the plan is the memory rule's, as stages() computes it.
	pc := startPipelineCluster(t, 7, "--memory-bandwidth", "-1")
	coord, workers, base := pc.coord, pc.workers, pc.base
	m := pipelineUp(t, base, "tiny", 0, 90*time.Second)
	t.Logf("placed: epoch %d, stages %+v", m.Epoch, m.Stages)
	for _, s := range m.Stages {
		if s.Worker == "whole" || s.Worker == "src" {
			t.Fatalf("the reference or the source worker got a stage: %+v", m.Stages)
		}
	}
	// models ls and status show the stages.
	ls, err := exec.Command(binary, "models", "ls", "--coordinator", coord.fields["http"]).CombinedOutput()
	if err != nil || !strings.Contains(string(ls), fmt.Sprintf("pipeline epoch %d: %s [0,", m.Epoch, m.Stages[0].Worker)) {
		t.Errorf("models ls: %v\n%s", err, ls)
	}
	stOut, err := exec.Command(binary, "status", "--coordinator", coord.fields["http"]).CombinedOutput()
	if err != nil || !strings.Contains(string(stOut), "pipeline tiny: "+m.Stages[0].Worker+" [0,") {
		t.Errorf("status: %v\n%s", err, stOut)
	}
	// Only the source worker has the files whole: each stage holds
	// exactly the chunks that overlap its tensors' ranges (sparse files).
	if m.Layout == nil || m.Layout.Ranges == nil {
		t.Fatalf("no layout with ranges in the registry: %+v", m.ModelSpec)
	}
	for _, s := range m.Stages {
		f := filepath.Join(pc.dir, s.Worker, "models", "tiny.partial", "model.safetensors")
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil {
			t.Fatalf("stage %s: %v", s.Worker, err)
		}
		want := stageChunkBytes(m.Layout.Ranges, s.First, s.Last, "model.safetensors", st.Size, modelstore.DefaultChunkSize)
		used := st.Blocks * 512
		t.Logf("stage %s [%d,%d) holds %d of the %d bytes of model.safetensors (its chunks: %d)", s.Worker, s.First, s.Last, used, st.Size, want)
		if want >= st.Size || used > want+64<<10 || used < want-64<<10 {
			t.Errorf("stage %s [%d,%d) holds %d bytes of model.safetensors, want its chunks' %d of %d", s.Worker, s.First, s.Last, used, want, st.Size)
		}
	}

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
		got, err := client.Chat.Completions.New(ctx, params("tiny", seeded))
		if err != nil {
			t.Fatal(err)
		}
		if got.Choices[0].Message.Content != want[seeded] || got.Usage.CompletionTokens != ref.Usage.CompletionTokens {
			t.Fatalf("seeded=%v: pipeline answered %q (%d tokens), one worker %q (%d)", seeded, got.Choices[0].Message.Content,
				got.Usage.CompletionTokens, want[seeded], ref.Usage.CompletionTokens)
		}
		if s := streamText(t, client.Chat.Completions.NewStreaming(ctx, params("tiny", seeded)), nil); s != want[seeded] {
			t.Fatalf("seeded=%v: pipeline streamed %q, want %q", seeded, s, want[seeded])
		}
		if ref.Usage.CompletionTokens < 40 {
			t.Fatalf("seeded=%v: the reference ended after %d tokens; too short to kill a stage mid-stream", seeded, ref.Usage.CompletionTokens)
		}
	}

	// kill -9 a stage mid-stream: the middle one, then (each time on the
	// re-placed pipeline) the last one and the first one; then drain the
	// middle one (macpool drain) mid-stream.
	for _, which := range []string{"middle", "last", "first", "drained middle"} {
		idx := map[string]int{"first": 0, "middle": 1, "last": 2, "drained middle": 1}[which]
		victim := m.Stages[idx].Worker
		req, wantText := params("tiny", true), want[true]
		if which == "drained middle" {
			// A drain takes effect only once the victim has stopped and
			// left gossip (about a second even with nothing to finish),
			// while 120 tokens stream in about as long on a fast machine:
			// a longer answer keeps the drain mid-stream.
			long := params("whole", true)
			long.MaxTokens = oai.Int(480)
			ref, err := client.Chat.Completions.New(ctx, long)
			if err != nil {
				t.Fatal(err)
			}
			if ref.Usage.CompletionTokens < 300 {
				t.Fatalf("the long reference ended after %d tokens; too short to drain a stage mid-stream", ref.Usage.CompletionTokens)
			}
			long.Model = "tiny"
			req, wantText = long, ref.Choices[0].Message.Content
		}
		failovers := strings.Count(coord.stderr(), "failing over")
		var killed time.Time
		drained := make(chan error, 1)
		got := streamText(t, client.Chat.Completions.NewStreaming(ctx, req), func(chunks int) {
			if chunks != 8 {
				return
			}
			killed = time.Now()
			if which != "drained middle" {
				workers[victim].cmd.Process.Signal(syscall.SIGKILL)
				return
			}
			go func() {
				out, err := exec.Command(binary, "drain", victim, "--coordinator", coord.fields["http"]).CombinedOutput()
				if err != nil {
					err = fmt.Errorf("%v: %s", err, out)
				}
				drained <- err
			}()
		})
		if which == "drained middle" {
			if err := <-drained; err != nil {
				t.Fatalf("macpool drain %s: %v", victim, err)
			}
		}
		if killed.IsZero() {
			t.Fatalf("%s: the stream ended before the kill", which)
		}
		t.Logf("%s stage %s stopped mid-stream (kill -9 or drain); the stream finished %v later", which, victim, time.Since(killed).Round(time.Millisecond))
		if got != wantText {
			t.Fatalf("%s stage killed: text\n got %q\nwant %q", which, got, wantText)
		}
		if strings.Count(coord.stderr(), "failing over") == failovers {
			t.Errorf("%s stage killed: the coordinator never failed the job over (did the stream end before the kill took effect?)", which)
		}
		next := pipelineUp(t, base, "tiny", m.Epoch, 60*time.Second)
		for _, s := range next.Stages {
			if s.Worker == victim {
				t.Fatalf("re-placed pipeline still has the killed %s: %+v", victim, next.Stages)
			}
		}
		t.Logf("re-placed: epoch %d, stages %+v", next.Epoch, next.Stages)
		m = next
		// And the re-placed pipeline answers as one worker does.
		g, err := client.Chat.Completions.New(ctx, params("tiny", false))
		if err != nil || g.Choices[0].Message.Content != want[false] {
			t.Fatalf("after the %s kill: %v %q, want %q", which, err, g.Choices[0].Message.Content, want[false])
		}
	}
}

// stageChunkBytes is the bytes of the chunks of file (size bytes, chunk
// bytes each) that overlap the ranges stage [first, last) reads.
func stageChunkBytes(r *admin.LayoutRanges, first, last int, file string, size, chunk int64) int64 {
	rs := append([]admin.FileRange(nil), r.Common...)
	for i := first; i < last; i++ {
		rs = append(rs, r.Layers[i]...)
	}
	if first == 0 {
		rs = append(rs, r.Embed...)
	}
	if last == len(r.Layers) {
		rs = append(rs, r.Head...)
	}
	var n int64
	for off := int64(0); off < size; off += chunk {
		end := min(off+chunk, size)
		for _, x := range rs {
			if x.Path == file && x.Off < end && off < x.Off+x.Len {
				n += end - off
				break
			}
		}
	}
	return n
}

// pipelineParams is the request the pipeline tests send to the whole and
// the pipelined model: greedy, or sampled with a fixed seed.
func pipelineParams(model string, seeded bool) oai.ChatCompletionNewParams {
	p := oai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Tell me about pipelines and the Macs of an office.")},
		MaxTokens: oai.Int(120),
	}
	if seeded {
		p.Temperature, p.Seed = oai.Float(0.9), oai.Int(7)
	} else {
		p.Temperature = oai.Float(0)
	}
	return p
}

// pipelineCluster is a coordinator process, the model's source worker "src"
// (it holds the files but has no room for a stage), stage workers w1..wN
// limited so that the model splits over three of them, and "whole", the
// same model served whole by one worker as the reference; the model is
// added as "tiny".
type pipelineCluster struct {
	coord    *proc
	workers  map[string]*proc // src, w1..wN
	modelDir string
	dir      string // the workers' data directories are dir/NAME
	base     string // the coordinator's HTTP base URL
}

// startPipelineCluster starts a pipelineCluster of n stage workers, each
// also given workerArgs, and waits until every worker is ready.
func startPipelineCluster(t *testing.T, n int, workerArgs ...string) pipelineCluster {
	t.Helper()
	dir := t.TempDir()
	pc := pipelineCluster{modelDir: filepath.Join(dir, "tiny"), dir: dir, workers: map[string]*proc{}}
	// Layers heavy against the (tied) 152k-token embedding, so that the
	// split is by layers; slow enough per token for a kill mid-stream.
	if err := testmodel.Write(pc.modelDir, testmodel.Options{Layers: 6, HiddenSize: 64, Intermediate: 24576, EOSBias: 0}); err != nil {
		t.Fatal(err)
	}
	limit := splitLimit(t, pc.modelDir)
	pc.coord = start(t, "coordinator", "coordinator", "--name", "coord-1", "--http", "127.0.0.1:0",
		"--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "coord"),
		"--fast-timeouts", "--log-level", "debug")
	join := pc.coord.fields["gossip"]
	for i := 0; i <= n; i++ {
		name, lim := fmt.Sprintf("w%d", i), limit
		if i == 0 {
			name, lim = "src", 1<<20
		}
		args := append([]string{"worker", "--name", name, "--join", join, "--gossip", "127.0.0.1:0",
			"--backend", "cpu", "--threads", "1", "--slots", "2", "--model-store", "127.0.0.1:0",
			"--data-dir", filepath.Join(dir, name), "--memory-limit", fmt.Sprint(lim), "--fast-timeouts", "--log-level", "debug"},
			workerArgs...)
		pc.workers[name] = start(t, "worker", args...)
	}
	start(t, "worker", "worker", "--name", "whole", "--join", join, "--gossip", "127.0.0.1:0",
		"--backend", "cpu", "--threads", "1", "--slots", "2", "--model", pc.modelDir, "--model-name", "whole",
		"--model-store", "off", "--fast-timeouts")
	pc.base = "http://" + pc.coord.fields["http"]
	waitStatus(t, pc.base, func(s string) bool {
		return strings.Count(s, `"role":"worker"`) == n+2 && strings.Contains(s, `"ready":true`)
	})
	if out, err := exec.Command(binary, "models", "add", pc.modelDir, "--name", "tiny", "--node", "src", "--coordinator", pc.coord.fields["http"]).CombinedOutput(); err != nil {
		t.Fatalf("models add: %v\n%s", err, out)
	}
	return pc
}
