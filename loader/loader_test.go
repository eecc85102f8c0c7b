package loader

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/testmodel"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/pipeline"
	"github.com/macpool/macpool/runner"
	"github.com/macpool/macpool/worker"
)

// TestLayoutMatchesCheckpoint: the layout read from the headers has the
// bytes per layer, embedding and head and the KV sizes of the opened
// checkpoint (pipeline.SizeOf), for each format.
func TestLayoutMatchesCheckpoint(t *testing.T) {
	for _, fx := range []string{"hf/qwen3", "hf/qwen3_tied", "hf/qwen3_5_moe", "mlx/qwen3-4bit", "gguf/qwen3-q4_k_m.gguf"} {
		t.Run(fx, func(t *testing.T) {
			path := filepath.Join("..", "testdata", filepath.FromSlash(fx))
			l, err := Layout(path, true)
			if err != nil {
				t.Fatal(err)
			}
			ck, err := checkpoint.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			want := pipeline.SizeOf(ck, 2)
			if !slices.Equal(l.Layers, want.Layers) || l.Embed != want.Embed || l.Head != want.Head ||
				!slices.Equal(l.KVPerToken, want.KVPerToken) || !slices.Equal(l.StatePerSeq, want.StatePerSeq) {
				t.Errorf("layout %+v\nwant %+v", l, want)
			}
			if l.Ranges == nil || len(l.Ranges.Layers) != len(want.Layers) {
				t.Errorf("layout has no ranges for every layer: %+v", l.Ranges)
			}
		})
	}
}

func testSecret(t *testing.T) *cluster.Secret {
	t.Helper()
	s, err := cluster.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newLoader(t *testing.T, s *cluster.Secret, name string, limit int64) *Loader {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Name, cfg.Pipeline, cfg.MemoryLimit, cfg.HealTimeout = name, "127.0.0.1:0", limit, 2*time.Second
	cfg.Settings = runner.Settings{Backend: "cpu", Threads: 1, Slots: 2}
	if s != nil {
		tc, err := s.NodeTLS(name)
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = tc
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(context.Background()) }()
	t.Cleanup(func() {
		l.Close()
		l.Close() // idempotent
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return l
}

// TestMemoryLimit: a whole model or a stage whose weights leave less than
// the least KV cache under the limit is refused with ErrTooBig; with room
// it loads.
func TestMemoryLimit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if err := testmodel.Write(dir, testmodel.Options{Layers: 4}); err != nil {
		t.Fatal(err)
	}
	weights := runner.WeightBytes(dir)
	ctx := context.Background()
	small := newLoader(t, nil, "small", weights)
	if _, _, err := small.Load(ctx, "m", dir); !errors.Is(err, ErrTooBig) {
		t.Fatalf("whole model over the limit: got %v, want ErrTooBig", err)
	}
	big := newLoader(t, nil, "big", weights+64<<20)
	e, closeE, err := big.Load(ctx, "m", dir)
	if err != nil {
		t.Fatalf("whole model within the limit: %v", err)
	}
	closeE()
	_ = e
	// A stage: the limit is checked against the stage's bytes only.
	s := testSecret(t)
	r, _, err := checkpoint.TensorRanges(dir)
	if err != nil {
		t.Fatal(err)
	}
	stage := checkpoint.Bytes(r.Stage(checkpoint.Stage{First: 2, Last: 4}))
	tight := newLoader(t, s, "tight", stage+minKV-1)
	plan := cluster.PipelinePlan{Model: "m", Epoch: 1, Stages: []cluster.PipelineStage{
		{Worker: "other", Addr: "127.0.0.1:1", First: 0, Last: 2}, {Worker: "tight", Addr: tight.Addr(), First: 2, Last: 4}}}
	if _, err := tight.LoadStage(ctx, "m", dir, plan); !errors.Is(err, ErrTooBig) {
		t.Fatalf("stage over the limit: got %v, want ErrTooBig", err)
	}
}

// chat runs one chat job on e and returns its text and token ids.
func chat(t *testing.T, e worker.Engine, seed int64, onEvent func()) (string, []int, error) {
	t.Helper()
	maxTokens, temp := 24, 0.9
	req := &openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatMessage{{Role: "user", Content: openai.TextContent("pipelines")}},
		MaxTokens: &maxTokens, Temperature: &temp, Seed: &seed}
	j := &job.Job{ID: "t", Kind: job.KindChat, Model: "m", Chat: req}
	var text strings.Builder
	var ids []int
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := e.(worker.ResumeEngine).GenerateResume(ctx, j, nil, func(ev *job.Event, toks []int) error {
		text.WriteString(ev.Text)
		ids = append(ids, toks...)
		if onEvent != nil {
			onEvent()
		}
		return nil
	})
	return text.String(), ids, err
}

// TestLoadStage: two loaders (each a worker's pipeline listener, mutual TLS
// from one cluster secret) load the two stages of a model from one folder
// and join the plan; the first stage's engine answers a seeded chat job
// with the whole model's tokens, the second has no engine; when the second
// stage closes under a running job, the job fails with
// worker.ErrEngineInterrupted (the first re-dials), and once the first
// gives up (HealTimeout: Stage.Lost) jobs fail with worker.ErrEngineLost.
func TestLoadStage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if err := testmodel.Write(dir, testmodel.Options{Layers: 4}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := testSecret(t)
	a, b := newLoader(t, s, "a", 0), newLoader(t, s, "b", 0)
	whole, closeWhole, err := a.Load(ctx, "m", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWhole()
	wantText, wantIDs, err := chat(t, whole, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := cluster.PipelinePlan{Model: "m", Epoch: 3, Stages: []cluster.PipelineStage{
		{Worker: "a", Addr: a.Addr(), First: 0, Last: 1}, {Worker: "b", Addr: b.Addr(), First: 1, Last: 4}}}
	stA, err := a.LoadStage(ctx, "m", dir, plan)
	if err != nil {
		t.Fatal(err)
	}
	defer stA.Close()
	stB, err := b.LoadStage(ctx, "m", dir, plan)
	if err != nil {
		t.Fatal(err)
	}
	head, tail, closeB := stA.Engine, stB.Engine, stB.Close
	if head == nil || tail != nil {
		t.Fatalf("engines: first stage %v, second %v; want only the first", head, tail)
	}
	if _, ok := head.(worker.PrefixSummarizer); !ok {
		t.Error("the first stage's engine reports no prefix summary")
	}
	text, ids, err := chat(t, head, 5, nil)
	if err != nil || text != wantText || !slices.Equal(ids, wantIDs) {
		t.Fatalf("pipeline: %q %v (%v), want %q %v", text, ids, err, wantText, wantIDs)
	}
	events := 0
	_, _, err = chat(t, head, 6, func() {
		if events++; events == 2 {
			closeB()
		}
	})
	if !errors.Is(err, worker.ErrEngineInterrupted) || !errors.Is(err, pipeline.ErrStageLost) {
		t.Fatalf("second stage closed mid-job: got %v, want worker.ErrEngineInterrupted", err)
	}
	select {
	case <-stA.Lost:
	case <-time.After(30 * time.Second):
		t.Fatal("the first stage never gave up re-connecting to the closed second")
	}
	if stA.Err() == nil {
		t.Error("the first stage is lost without an error")
	}
	if _, _, err = chat(t, head, 7, nil); !errors.Is(err, worker.ErrEngineLost) || !errors.Is(err, pipeline.ErrStageLost) {
		t.Fatalf("job after the first stage gave up: got %v, want worker.ErrEngineLost", err)
	}
}
