package runner

import (
	"time"

	"github.com/macpool/macpool/engine"
)

// Pipelined greedy decoding. On a backend that keeps token ids on the
// device (engine.DeviceTokenOps: metal), a pass made only of greedy
// one-token decode steps is launched (engine.Model.LaunchGreedy) and,
// before its ids are read back, the next step of the same sequences is
// launched too, feeding each the id its step leaves on the device
// (speculation): the GPU runs step N+1 while the sequences' goroutines
// stream step N's tokens and decide whether to go on. When they come back
// with their next step — a greedy decode of the very token the device fed
// (always, unless the sequence's sampling changed) — that step is already
// in flight: the scheduler launches the one after it and waits for it.
// A sequence that does not come back that way (it stopped: EOS, a stop
// string, max_tokens; a constraint or sampler took over; it is slow) has
// its speculative position rolled back (GreedyStep.Drop: KV position
// dropped, recurrent state one step back), so tokens and caches are the
// plain path's; one that left has its cache freed by its goroutine (the
// speculative position with it: its token was never recorded, so no
// prefix-cache block holds it). Any other work (a prompt, a sampled step)
// ends the speculation: its tokens are answered, and the pass runs as
// before.

// speculation is the speculative step in flight and what it fed.
type speculation struct {
	step *engine.GreedyStep
	seqs []*seq // the step's sequences, in its order
	fed  []int  // the token each fed (the previous step's ids, answered)
}

// deviceTokens says whether the model's backend can run pipelined steps:
// the local model runs every pass (no Forwarder over pipeline stages).
func (e *Runner) deviceTokens() bool {
	_, ok := e.model.Backend().(engine.DeviceTokenOps)
	return ok && e.cfg.Forward == nil
}

// pipelinable says whether a scheduled batch is greedy one-token decode
// steps only (no prompt chunk, no step needing logits, no snapshot due).
func pipelinable(batch []item) bool {
	for _, it := range batch {
		r := it.r
		if !r.greedy || r.sample != nil || r.first || it.n != 1 || r.off+1 != len(r.tokens) || r.s.snapAt != 0 {
			return false
		}
	}
	return len(batch) > 0
}

// runPipelined launches a pipelinable batch and continues as advance. It
// returns false, having run nothing, if the step cannot be launched (the
// caller then runs the batch the plain way, which reports any error).
func (e *Runner) runPipelined(st *sched, batch []item) bool {
	gs := make([]engine.GreedySeq, len(batch))
	seqs := make([]*seq, len(batch))
	reqs := make([]*stepReq, len(batch))
	idx := make([]int, len(batch))
	for i, it := range batch {
		r := it.r
		gs[i] = engine.GreedySeq{Cache: r.s.cache, Tokens: r.tokens[r.off:], PromptEnd: r.s.promptEnd}
		seqs[i], reqs[i], idx[i] = r.s, r, i
	}
	t0 := time.Now()
	step, err := e.model.LaunchGreedy(gs)
	if err != nil {
		e.log.Debug("pipelined decode: plain pass instead", "err", err)
		return false
	}
	e.advance(st, step, idx, seqs, reqs, t0)
	return true
}

// advance launches the speculative step after step for its sequences idx
// (seqs, with their requests reqs), then waits for step and answers the
// requests with its ids; the new step becomes the speculation.
func (e *Runner) advance(st *sched, step *engine.GreedyStep, idx []int, seqs []*seq, reqs []*stepReq, t0 time.Time) {
	next := make([]engine.GreedySeq, len(idx))
	for k, i := range idx {
		next[k] = engine.GreedySeq{Cache: seqs[k].cache, Tokens: []int{step.Next(i)}, PromptEnd: seqs[k].promptEnd}
	}
	spec, serr := e.model.LaunchGreedy(next) // an error (no KV blocks): no speculation
	toks, err := step.Wait()
	e.forwardNanos.Add(int64(time.Since(t0)))
	e.passes.Add(1)
	clear(st.awaiting)
	if err != nil {
		if serr == nil {
			spec.Wait()
			for k := range idx {
				spec.Drop(k)
			}
		}
		for _, r := range reqs {
			e.answer(st, r, stepResult{err: err})
		}
		return
	}
	if serr == nil {
		fed := make([]int, len(idx))
		for k, i := range idx {
			fed[k] = toks[i]
		}
		st.spec = &speculation{step: spec, seqs: seqs, fed: fed}
	}
	for k, i := range idx {
		r := reqs[k]
		r.off = len(r.tokens)
		st.awaiting[r.s] = true
		e.answer(st, r, stepResult{token: toks[i], cached: r.cached})
	}
}

// resolveSpec matches the speculation with the steps the sequences
// submitted since. It returns true when it ran the pass: every pending
// step was a speculated one, so the next speculation was launched and
// they were answered. Otherwise the speculation is over (its hits
// answered, its misses rolled back) and the pass runs as usual.
func (e *Runner) resolveSpec(st *sched) bool {
	sp := st.spec
	if sp == nil {
		return false
	}
	st.spec = nil
	var idx []int
	var seqs []*seq
	var reqs []*stepReq
	for i, s := range sp.seqs {
		r := s.pending
		switch {
		case !st.live[s]:
			// Left: its goroutine frees the cache (the scheduler no
			// longer owns it), speculative position included.
		case r != nil && r.greedy && !r.first && r.ctx.Err() == nil && s.order != 0 && s.snapAt == 0 &&
			len(r.tokens)-r.off == 1 && r.tokens[r.off] == sp.fed[i]:
			sp.step.Confirm(i, sp.fed[i])
			idx, seqs, reqs = append(idx, i), append(seqs, s), append(reqs, r)
		default:
			// Stopped, or not back, or no longer a greedy decode of the
			// token fed: the position is rolled back.
			if err := sp.step.Drop(i); err != nil {
				e.log.Error("pipelined decode: roll back", "err", err)
			}
		}
	}
	t0 := time.Now()
	if len(reqs) > 0 && len(reqs) == len(st.pending) {
		e.advance(st, sp.step, idx, seqs, reqs, t0)
		return true
	}
	toks, err := sp.step.Wait()
	if len(reqs) == 0 {
		return false
	}
	e.forwardNanos.Add(int64(time.Since(t0)))
	clear(st.awaiting)
	for k, i := range idx {
		r := reqs[k]
		if err != nil {
			e.answer(st, r, stepResult{err: err})
			continue
		}
		r.off = len(r.tokens)
		st.awaiting[r.s] = true
		e.answer(st, r, stepResult{token: toks[i], cached: r.cached})
	}
	return len(st.pending) == 0
}

// dropSpec ends a speculation without answering (the scheduler quits):
// it waits for the step, so nothing of it is in flight.
func (st *sched) dropSpec() {
	if st.spec != nil {
		st.spec.step.Wait()
		st.spec = nil
	}
}
