package runner

import (
	"context"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/sample"
)

// Forwarder runs the scheduler's forward passes in place of the runner's
// model (Config.Forward): a pipeline Head (package pipeline) runs them over
// its stages, the runner's model being the first stage. Everything else
// (plans, sampling, constraints, the prefix cache and KV pool of the first
// stage, preemption, resume) stays the runner's.
//
// Forward may be called by several scheduler lanes at once (Config.Lanes);
// a sequence's passes come from one lane, in order.
type Forwarder interface {
	// Forward runs one pass, as engine.Model.ForwardGreedy runs seqs: it
	// returns per sequence the logits of its last token (nil where the
	// sequence was greedy or sampled) and its token (the argmax for a
	// greedy one, the draw of PassSeq.Sample for a sampled one, else -1).
	Forward(ctx context.Context, pass []PassSeq) (logits [][]float32, tokens []int, err error)
	// Attach makes the other stages hold the longest cached prefix of
	// tokens that each has (at most len(tokens)-1 positions, as
	// engine.Cache.Attach) for sequence id, and returns the positions all
	// of them hold. The runner's own cache attached len(tokens)-1.
	Attach(ctx context.Context, id uint64, tokens []int) (int, error)
	// Forget says that sequence id ended: its caches elsewhere are freed.
	Forget(id uint64)
	// Samples says whether Forward draws tokens for PassSeq.Sample.
	Samples() bool
}

// PassSeq is one sequence's share of a forward pass.
type PassSeq struct {
	engine.Seq
	// ID names the sequence from its first pass to Forget.
	ID uint64
	// Sample, when set, asks for the token drawn by a sampler with these
	// parameters at the sequence's step: its prompt is the first PromptEnd
	// tokens it holds, its generated tokens the rest (sample.Sampler.Sample).
	Sample *sample.Params
	// Choice, with Sample, asks for the log-probabilities of the drawn
	// token and of the Choice.Top-length most likely ones
	// (sample.Logprobs of the raw logits, len(Choice.Top) = topN on the
	// way in): Forward fills *Choice, so that only those come back.
	Choice *sample.Choice
	// Snapshot: the runner saves the sequence's recurrent state after this
	// pass (engine.Cache.SaveSnapshot); the other stages do the same.
	Snapshot bool
	// Embed: an embedding pass (embed.go): Forward returns, in place of the
	// logits, a row whose first HiddenSize values are the final-normed
	// hidden state of the sequence's last token (engine.Model.EmbedStage on
	// the last stage). Only for a Forwarder over pipeline stages.
	Embed bool
}

// localForward is the runner's own model as a Forwarder.
type localForward struct{ m *engine.Model }

func (l localForward) Forward(ctx context.Context, pass []PassSeq) ([][]float32, []int, error) {
	seqs := make([]engine.Seq, len(pass))
	for i := range pass {
		seqs[i] = pass[i].Seq
	}
	return l.m.ForwardGreedy(ctx, seqs)
}

func (localForward) Attach(_ context.Context, _ uint64, tokens []int) (int, error) {
	return len(tokens) - 1, nil
}

func (localForward) Forget(uint64) {}

func (localForward) Samples() bool { return false }
