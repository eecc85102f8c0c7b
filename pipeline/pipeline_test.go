package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	_ "github.com/macpool/macpool/engine/cpu"
	_ "github.com/macpool/macpool/engine/qwen"
)

// TestPlacedPipelineOverTLS puts the pieces together: Place splits a hybrid
// MoE fixture over three workers none of which could hold it alone, each
// stage loads only its layers, and batches flow stage to stage as frames
// over mutual-TLS connections, each stage keeping its own caches by
// sequence id. The last stage's logits equal the whole model's bit for bit
// for two sequences' prompts (prefilled together) and greedy decode steps.
func TestPlacedPipelineOverTLS(t *testing.T) {
	path := filepath.Join("..", "testdata", "hf", "qwen3_5_moe")
	ck, err := checkpoint.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	size := SizeOf(ck, 4)
	ck.Close()
	var total int64 = size.Embed + size.Head
	for _, l := range size.Layers {
		total += l
	}
	workers := []Worker{{Name: "w1", Free: total * 45 / 100}, {Name: "w2", Free: total * 45 / 100}, {Name: "w3", Free: total * 45 / 100}}
	plan, err := Place(size, Budget{}, workers)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 3 {
		t.Fatalf("plan %v: want 3 stages", plan)
	}
	opts := engine.Options{Threads: 1}
	whole, err := engine.Load(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	var stages []*engine.Model
	for _, a := range plan {
		o := opts
		o.Stage = a.Stage
		m, err := engine.Load(path, o)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if m.WeightBytes() > a.Free {
			t.Errorf("%s: stage %v binds %d bytes, the worker has %d", a.Worker, a.Stage, m.WeightBytes(), a.Free)
		}
		stages = append(stages, m)
	}

	// Stage k > 0 serves frames from in[k-1]: it looks its caches up by
	// sequence id, runs its layers, and forwards the hidden states on out,
	// or (the last stage) hands the logits to the driver.
	secret := newSecret(t)
	var dial [2]*Conn // stage 0 → 1, stage 1 → 2: the senders' ends
	var recv [2]*Conn
	for i := range dial {
		dial[i], recv[i] = pair(t, secret)
	}
	logits := make(chan [][]float32, 1)
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	ctx := context.Background()
	for k := 1; k < 3; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- serveStage(ctx, stages[k], recv[k-1], k == 1, dial, logits)
		}()
	}

	V := whole.VocabSize()
	prompts := [][]int{randomTokens(1, 70, V), randomTokens(2, 9, V)}
	wantCaches := make([]*engine.Cache, 2)
	caches := make([]*engine.Cache, 2)
	for i := range caches {
		wantCaches[i], _ = whole.NewCache()
		caches[i], _ = stages[0].NewCache()
		defer wantCaches[i].Free()
		defer caches[i].Free()
	}
	toks := prompts
	for step := range 5 {
		seqs := make([]engine.Seq, 2)
		want := make([]engine.Seq, 2)
		frame := &Frame{Batch: uint64(step), Cols: whole.Config().HiddenSize}
		for i := range seqs {
			seqs[i] = engine.Seq{Cache: caches[i], Tokens: toks[i], PromptEnd: len(prompts[i])}
			want[i] = engine.Seq{Cache: wantCaches[i], Tokens: toks[i], PromptEnd: len(prompts[i])}
			frame.Seqs = append(frame.Seqs, Seq{ID: uint64(i), Pos: caches[i].Len(), PromptEnd: len(prompts[i]), Tokens: toks[i]})
			frame.Rows += len(toks[i])
		}
		wantLogits, err := whole.Forward(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		out, err := stages[0].ForwardStage(ctx, seqs, nil)
		if err != nil {
			t.Fatal(err)
		}
		frame.Hidden = out.Hidden
		if err := dial[0].Send(ctx, frame); err != nil {
			t.Fatal(err)
		}
		var got [][]float32
		select {
		case got = <-logits:
		case err := <-errs:
			t.Fatalf("stage failed: %v", err)
		}
		next := make([][]int, 2)
		for i := range got {
			for j := range got[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(wantLogits[i][j]) {
					t.Fatalf("step %d sequence %d: logit %d is %g, the whole model's %g", step, i, j, got[i][j], wantLogits[i][j])
				}
			}
			next[i] = []int{engine.Argmax(got[i])}
		}
		toks = next
	}
	for _, c := range dial {
		c.Close()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// serveStage runs stage m on the frames of in until in closes. A middle
// stage forwards to dial[1]; the last sends the logits to logits.
func serveStage(ctx context.Context, m *engine.Model, in *Conn, middle bool, dial [2]*Conn, logits chan<- [][]float32) error {
	caches := map[uint64]*engine.Cache{}
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	var f Frame
	for {
		if err := in.Recv(ctx, &f); err != nil {
			if errors.Is(err, io.EOF) {
				if middle {
					dial[1].Close()
				}
				return nil
			}
			return err
		}
		seqs := make([]engine.Seq, len(f.Seqs))
		for i, s := range f.Seqs {
			c := caches[s.ID]
			if c == nil {
				var err error
				if c, err = m.NewCache(); err != nil {
					return err
				}
				caches[s.ID] = c
			}
			if c.Len() != s.Pos {
				return fmt.Errorf("stage %v: sequence %d at %d positions, frame says %d", m.Stage(), s.ID, c.Len(), s.Pos)
			}
			seqs[i] = engine.Seq{Cache: c, Tokens: s.Tokens, PromptEnd: s.PromptEnd, AllLogits: s.AllLogits, Greedy: s.Greedy}
		}
		out, err := m.ForwardStage(ctx, seqs, f.Hidden)
		if err != nil {
			return err
		}
		if !middle {
			logits <- out.Logits
			continue
		}
		f.Hidden = out.Hidden
		if err := dial[1].Send(ctx, &f); err != nil {
			return err
		}
	}
}

func randomTokens(seed, n, vocab int) []int {
	ids := make([]int, n)
	x := uint64(seed)*0x9e3779b97f4a7c15 + 1
	for i := range ids {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		ids[i] = int(x % uint64(vocab))
	}
	return ids
}
