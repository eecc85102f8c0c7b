package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/runner"
)

// embedAll runs an embedding job on e and returns the vectors by input
// index.
func embedAll(t testing.TB, e interface {
	Generate(context.Context, *job.Job, func(*job.Event) error) error
}, inputs [][]int, dims *int) ([][]float32, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j := &job.Job{ID: "emb", Kind: job.KindEmbedding, Embedding: &openai.EmbeddingRequest{Model: "m", Input: openai.Prompt{Tokens: inputs}, Dimensions: dims}}
	out := make([][]float32, len(inputs))
	err := e.Generate(ctx, j, func(ev *job.Event) error {
		for _, v := range ev.Embeddings {
			out[v.Index] = v.Vector
		}
		return nil
	})
	return out, err
}

// TestHeadEmbeddings: /v1/embeddings on a pipelined model. Every fixture
// over 2 and 3 stages (mutual TLS): the vectors are the whole model's bit
// for bit — several inputs per pass, one longer than a prefill chunk (it
// continues over passes in its caches on every stage), with and without
// dimensions — and no stage keeps a sequence afterwards. An architecture
// that cannot embed refuses as the whole model does.
func TestHeadEmbeddings(t *testing.T) {
	for _, fx := range execFixtures() {
		t.Run(fx.name, func(t *testing.T) {
			rc := fixtureRunner(fx.path, fx.opts)
			whole, err := runner.New(rc, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Close()
			V := whole.Model().VocabSize()
			inputs := [][]int{randomTokens(1, 150, V), randomTokens(2, 7, V), randomTokens(3, 40, V), randomTokens(4, 1, V)}
			dims := ptrTo(8)
			want, werr := embedAll(t, whole, inputs, nil)
			wantDims, _ := embedAll(t, whole, inputs, dims)
			secret := newSecret(t)
			for k, stages := range splits(whole.Model().Config().NumHiddenLayers) {
				t.Run(fmt.Sprintf("%d-stage", len(stages)), func(t *testing.T) {
					opts := fx.opts
					opts.Threads = 1
					tp := startPipeline(t, secret, fx.path, opts, stages, uint64(k+1), rc)
					got, err := embedAll(t, tp.head, inputs, nil)
					if werr != nil {
						var we, ge *openai.Error
						if !errors.As(werr, &we) || !errors.As(err, &ge) || we.Status != ge.Status || !strings.Contains(ge.Message, "cannot compute embeddings") {
							t.Fatalf("whole model refused with %v; pipelined: %v", werr, err)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					sameVectors(t, got, want)
					gotDims, err := embedAll(t, tp.head, inputs, dims)
					if err != nil {
						t.Fatal(err)
					}
					sameVectors(t, gotDims, wantDims)
					tp.head.mu.Lock()
					left := len(tp.head.known)
					tp.head.mu.Unlock()
					if left != 0 {
						t.Errorf("%d sequences still known to the other stages after the jobs", left)
					}
				})
			}
		})
	}
}

func sameVectors(t *testing.T, got, want [][]float32) {
	t.Helper()
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("input %d: %d values, want %d", i, len(got[i]), len(want[i]))
		}
		for j := range want[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("input %d value %d: %v, want %v (the whole model's, bit for bit)", i, j, got[i][j], want[i][j])
			}
		}
	}
}

// A last stage given a frame that mixes embedding and generation
// sequences (merged passes) answers each as it would alone.
func TestStagePassMixed(t *testing.T) {
	path := "../testdata/hf/qwen3"
	var models []*engine.Model
	for _, st := range []engine.Stage{{First: 0, Last: 1}, {First: 1, Last: 0}} {
		m, err := engine.Load(path, engine.Options{Stage: st, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		models = append(models, m)
	}
	V := models[0].VocabSize()
	a, b := randomTokens(5, 9, V), randomTokens(6, 4, V)
	// run passes a and b through the two stages, marking which embed.
	run := func(embedA, embedB bool, only int) engine.StageOutput {
		var es0, es1 []engine.Seq
		var fs []Seq
		for i, toks := range [][]int{a, b} {
			if only >= 0 && i != only {
				continue
			}
			c0, _ := models[0].NewCache()
			c1, _ := models[1].NewCache()
			es0 = append(es0, engine.Seq{Cache: c0, Tokens: toks})
			es1 = append(es1, engine.Seq{Cache: c1, Tokens: toks})
			fs = append(fs, Seq{Tokens: toks, Embed: []bool{embedA, embedB}[i]})
		}
		h, err := models[0].ForwardStage(context.Background(), es0, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := &Member{cfg: MemberConfig{Model: models[1]}, last: true}
		out, err := m.stagePass(context.Background(), es1, &Frame{Seqs: fs, Cols: models[0].Config().HiddenSize, Hidden: h.Hidden})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	mixed := run(true, false, -1)
	alone := []engine.StageOutput{run(true, false, 0), run(true, false, 1)}
	H := models[0].Config().HiddenSize
	if len(alone[0].Logits[0]) != H || len(mixed.Logits[0]) != V || len(mixed.Logits[1]) != V {
		t.Fatalf("row widths: alone %d, mixed %d and %d; want the hidden size alone, the vocabulary (padded) mixed",
			len(alone[0].Logits[0]), len(mixed.Logits[0]), len(mixed.Logits[1]))
	}
	sameVectors(t, [][]float32{mixed.Logits[0][:H]}, alone[0].Logits)
	sameVectors(t, mixed.Logits[1:], alone[1].Logits)
	for _, x := range mixed.Logits[0][H:] {
		if x != 0 {
			t.Fatalf("padding holds %v, want zeros", x)
		}
	}
}

// Embedding jobs beside generation on one Head (the scheduler's lanes run
// their passes at the same time, and a Head that merges passes puts both
// kinds in one frame): both answer as on the whole model — the vectors
// bit for bit, the generations token for token and logprob for logprob.
func TestHeadEmbeddingsBesideGeneration(t *testing.T) {
	path := filepath.Join("..", "testdata", "hf", "qwen3")
	rc := fixtureRunner(path, engine.Options{})
	whole, err := runner.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	V := whole.Model().VocabSize()
	jobs := requests(V)
	inputs := [][]int{randomTokens(11, 90, V), randomTokens(12, 5, V), randomTokens(13, 33, V)}
	wantGen := runAll(t, whole, jobs, false)
	wantEmb, err := embedAll(t, whole, inputs, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := engine.Options{Threads: 1}
	tp := startPipeline(t, newSecret(t), path, opts, splits(whole.Model().Config().NumHiddenLayers)[0], 1, rc)
	for round := range 3 {
		var gen []generation
		done := make(chan struct{})
		go func() {
			defer close(done)
			gen = runAll(t, tp.head, jobs, true)
		}()
		var embs [][][]float32
		for range 3 {
			got, err := embedAll(t, tp.head, inputs, nil)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			embs = append(embs, got)
		}
		<-done
		sameGenerations(t, gen, wantGen)
		for _, got := range embs {
			sameVectors(t, got, wantEmb)
		}
	}
}
