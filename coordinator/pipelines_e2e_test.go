package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/worker"
)

// TestPipelineStageLoadFails: a model that only runs as a 3-stage pipeline
// (--memory-limit), one of whose stage workers cannot load its stage. The
// worker reports the stage failed; with no other worker to take it the
// leader removes the plan, and a request (queued while the plan existed,
// or new) fails with the 503 of a model no worker serves within a bound
// instead of queueing for ever. A spare worker then joins: the model is
// re-placed without the failing worker and served.
func TestPipelineStageLoadFails(t *testing.T) {
	cfg := coordConfig(t, "c1", nil)
	// Weights as they are, a 1000-byte KV budget per stage.
	cfg.Placement = coordinator.PlacementConfig{UsableFraction: 1, KVBudget: 1000, Overhead: 0}
	c, _ := startCoordinator(t, cfg)
	srv := serveHTTP(t, c)
	src := filepath.Join(t.TempDir(), "big")
	copyDir(t, "../testdata/hf/qwen3", src) // 1.4 MB of weights
	// Three 450 kB layers: a 600 kB worker holds one, none the whole model.
	layout := &admin.ModelLayout{Layers: []int64{450_000, 450_000, 450_000}, Embed: 10, Head: 10,
		KVPerToken: make([]int64, 3), StatePerSeq: make([]int64, 3)}
	var loads sync.Map
	// stages[epoch] counts the stages of that plan loaded: the head
	// serves only once all are (a real head waits for its ring).
	var mu sync.Mutex
	stages := map[uint64]int{}
	start := func(name string, limit int64, fails bool) *worker.Worker {
		wc := placedWorkerConfig(t, name, c.GossipAddr(), &loads, nil)
		wc.MemoryLimit = limit
		// As the real loader (loader.ErrTooBig): a model over the memory
		// limit is not loaded whole. Placement may try it while the
		// model's size is still unknown.
		load := wc.Placed.Load
		wc.Placed.Load = func(ctx context.Context, model, path string) (worker.Engine, func() error, error) {
			if size := dirSize(t, path); size > limit {
				return nil, nil, fmt.Errorf("%d bytes of weights exceed the memory limit %d (test)", size, limit)
			}
			return load(ctx, model, path)
		}
		wc.Pipeline = "127.0.0.1:1" // advertised; the stages below never dial
		wc.Placed.Layout = func(string) (*admin.ModelLayout, error) { return layout, nil }
		wc.Placed.LoadStage = func(ictx context.Context, _, _ string, plan cluster.PipelinePlan) (worker.Stage, error) {
			if fails {
				return worker.Stage{}, errors.New("this worker cannot load its stage (test)")
			}
			mu.Lock()
			stages[plan.Epoch]++
			mu.Unlock()
			st := worker.Stage{Close: func() error { return nil }}
			if plan.Index(name) == 0 {
				st.Engine = &ringHead{gone: ictx.Done(), ready: func() bool {
					mu.Lock()
					defer mu.Unlock()
					return stages[plan.Epoch] == len(plan.Stages)
				}}
			}
			return st, nil
		}
		w, err := worker.New(wc)
		if err != nil {
			t.Fatal(err)
		}
		runNode(t, w)
		return w
	}
	start("src", 1000, false) // holds the files, room for no stage
	for _, n := range []string{"w1", "w2", "w3"} {
		start(n, 600_000, n == "w2")
	}
	const model = "big"
	if code, b := adminDo(t, http.MethodPost, srv.URL+coordinator.ModelsPath, coordinator.AddModelRequest{Name: model, Source: src, SourceNode: "src"}); code != http.StatusCreated {
		t.Fatalf("add model: %d %s", code, b)
	}
	var plan uint64
	eventually(t, 60*time.Second, "a 3-stage plan with w2", func() bool {
		p, ok := c.State().Pipelines[model]
		plan = p.Epoch
		return ok && len(p.Stages) == 3 && p.Index("w2") >= 0
	})
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j := chatJob("j1", "", "hello pipeline", 8)
	j.Model, j.Chat.Model = model, model
	oe := failure(ctx, t, c, j)
	if oe == nil {
		t.Fatal("request while w2 cannot load its stage: served, want a 503")
	}
	took := time.Since(t0)
	t.Logf("epoch %d: request failed after %v: %d %s", plan, took.Round(time.Millisecond), oe.HTTPStatus(), oe.Message)
	if oe.HTTPStatus() != http.StatusServiceUnavailable {
		t.Errorf("got %d %q, want 503", oe.HTTPStatus(), oe.Message)
	}
	if took > 30*time.Second {
		t.Errorf("the request failed after %v; want within 30 s", took)
	}
	if _, ok := c.State().Pipelines[model]; ok {
		t.Errorf("the plan is still there: %+v", c.State().Pipelines[model])
	}
	// New requests fail too, and once the head's worker stopped gossiping
	// the model (it unloads its install), at once in Submit, as for a
	// model no worker serves.
	if oe := failure(ctx, t, c, j); oe == nil || oe.HTTPStatus() != http.StatusServiceUnavailable {
		t.Errorf("new request: %v, want a 503", oe)
	}
	eventually(t, 15*time.Second, "Submit refusing the model with a 503", func() bool {
		s, err := c.Submit(ctx, j)
		if err == nil {
			s.Close()
		}
		return errors.As(err, &oe) && oe.HTTPStatus() == http.StatusServiceUnavailable
	})
	if m, ok := modelStatus(t, srv.URL, model); ok {
		t.Logf("models ls: %+v", m.Workers)
	}

	// A spare: re-placed without w2, and served.
	start("w4", 600_000, false)
	eventually(t, 60*time.Second, "a 3-stage plan without w2", func() bool {
		p, ok := c.State().Pipelines[model]
		return ok && len(p.Stages) == 3 && p.Index("w2") < 0
	})
	eventually(t, 60*time.Second, "a request served by the new plan", func() bool {
		r, err := submit(ctx, c, j)
		return err == nil && r.err == nil && r.text != ""
	})
}

// dirSize is the bytes of the files in dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += info.Size()
		return nil
	})
	if err != nil {
		t.Errorf("size of %s: %v", dir, err)
	}
	return n
}

// failure submits j and returns its error (from Submit or the stream's
// error event), nil when it is served.
func failure(ctx context.Context, t *testing.T, c *coordinator.Coordinator, j *job.Job) *openai.Error {
	t.Helper()
	s, err := c.Submit(ctx, j)
	var oe *openai.Error
	if errors.As(err, &oe) {
		return oe
	}
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	defer s.Close()
	for {
		ev, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if ev.Err != nil {
			return ev.Err
		}
	}
}

// ringHead is a pipeline's first stage in a test: it generates once every
// stage loaded (ready), and waits until then, as a Head waits for its ring;
// when its install is unloaded first (gone) the job fails with
// worker.ErrEngineLost, as a Head's whose member left its plan.
type ringHead struct {
	worker.TestEngine
	gone  <-chan struct{}
	ready func() bool
}

func (e *ringHead) wait(ctx context.Context) error {
	for !e.ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.gone:
			return fmt.Errorf("%w: the plan went before its stages came up (test)", worker.ErrEngineLost)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func (e *ringHead) Generate(ctx context.Context, j *job.Job, emit func(*job.Event) error) error {
	if err := e.wait(ctx); err != nil {
		return err
	}
	return e.TestEngine.Generate(ctx, j, emit)
}

func (e *ringHead) GenerateResume(ctx context.Context, j *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error {
	if err := e.wait(ctx); err != nil {
		return err
	}
	return e.TestEngine.GenerateResume(ctx, j, r, emit)
}
