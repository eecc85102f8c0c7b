package runner

import (
	"context"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine/chat/reasoning"
	"github.com/macpool/macpool/engine/chat/stop"
	"github.com/macpool/macpool/engine/chat/toolcall"
	"github.com/macpool/macpool/engine/sample"
	"github.com/macpool/macpool/engine/tokenizer"
	"github.com/macpool/macpool/job"
)

type choiceResult struct {
	tokens          int // completion tokens (the EOS included, as vLLM counts)
	reasoningTokens int
	cached          int     // prompt positions from the prefix cache
	logprob         float64 // with plan.score: the sum of the generated tokens' logprobs
}

// runChoice generates choice i of p as its own sequence.
func (e *Runner) runChoice(ctx context.Context, p *plan, i int, emit func(*job.Event, []int) error) (choiceResult, error) {
	var res choiceResult
	select {
	case e.slots <- struct{}{}:
	case <-ctx.Done():
		return res, ctx.Err()
	case <-e.quit:
		return res, errClosed
	}
	defer func() { <-e.slots }()

	pr := p.prompt(i)
	params := p.params
	// Each choice of a prompt its own draw stream; choice j of every prompt
	// draws as choice j of a request with that prompt alone would.
	params.Seed += uint64(i % p.n)
	sampler, err := sample.New(params)
	if err != nil {
		return res, openai.InvalidRequest("", "%v", err)
	}
	// Steps whose token is the plain argmax of the logits let the backend
	// pick it (on a GPU only the id comes back): greedy, nothing that
	// changes or reports the logits.
	greedy := greedyParams(params) && !p.logprobs && !p.score && p.segments == nil
	// Over a pipeline the last stage draws the other sampled steps (same
	// sampler, seed and step), so only the id comes back — with the
	// logprobs of the raw logits where the request reports or scores them;
	// constraints need the logits here.
	var remote *sample.Params
	if !greedy && e.fwd.Samples() && p.segments == nil {
		remote = &params
	}
	cache, err := e.newCache()
	if err != nil {
		return res, err
	}
	defer cache.Free()
	s := e.newSeq(cache, len(pr.ids))
	defer e.done(s) // runs before Free: the scheduler forgets s first
	// step runs tokens; gen is the tokens generated before them.
	step := func(tokens []int, first bool, gen int) stepResult {
		r := &stepReq{ctx: ctx, s: s, tokens: tokens, first: first}
		if gen >= p.minTokens {
			r.greedy, r.sample = greedy, remote
			if remote != nil && (p.logprobs || p.score) {
				r.choice = &sample.Choice{Top: make([]sample.TokenLogprob, max(p.top, 0))}
			}
		}
		return e.stepWith(ctx, r)
	}

	var resumed []int // decoded ids; subst[k]: resumed[k] replaced a sampled EOS
	var subst []bool
	if i < len(p.resume) {
		resumed, subst = decodeResumed(p.resume[i])
	}
	out := e.newOutput(p, i, emit)
	if p.kind == job.KindChat && len(resumed) == 0 {
		if err := emit(&job.Event{Choice: i, Role: openai.RoleAssistant, Unenforced: p.unenforced}, nil); err != nil {
			return res, err
		}
	}
	// The echoed prompt is an event of its own, ahead of the generation, so
	// that stop strings never match inside it; a resumed choice already sent it.
	if pr.echo != "" && len(resumed) == 0 {
		if err := emit(&job.Event{Choice: i, Text: pr.echo}, nil); err != nil {
			return res, err
		}
	}

	var logits []float32
	input := pr.ids
	if len(resumed) > 0 {
		input = append(slices.Clip(pr.ids), resumed...)
	}
	// The scheduler prefills the input in chunks (after the prefix cache).
	sr := step(input, true, len(resumed))
	if sr.err != nil {
		return res, sr.err
	}
	logits, res.cached = sr.logits, sr.cached
	var con *constraint
	if p.segments != nil {
		con = newConstraint(e.vocab(), p.segments())
	}
	var gen []int
	finish := "length"
	// Replay resumed tokens silently: parsers and constraint catch up.
	out.silent = true
	ended := false
	for k, id := range resumed {
		if con != nil {
			con.replay(id, subst[k])
		}
		gen = append(gen, id)
		if (con != nil && con.done) || (!p.ignoreEOS && slices.Contains(e.eos, id)) {
			finish, ended = "stop", true
			break
		}
		stopped, _ := out.token(id)
		if stopped {
			finish, ended = "stop", true
			break
		}
	}
	out.silent = false
	if len(gen) >= p.maxTokens {
		ended = true
	}
	for !ended {
		raw := logits
		if (p.logprobs || p.score) && (con != nil || len(gen) < p.minTokens) {
			raw = slices.Clone(logits) // logprobs are of the model, before masks
		}
		if len(gen) < p.minTokens {
			for _, id := range e.eos {
				logits[id] = float32(math.Inf(-1))
			}
		}
		id := -1
		if logits == nil {
			id = sr.token // a greedy step: the backend took the argmax
		}
		if con != nil {
			con.left = p.maxTokens - len(gen)
			id = con.prepare(logits)
		}
		if id < 0 {
			id = sampler.Sample(logits, pr.ids, gen)
		}
		rep := id // reported with the events: the id, or its substitution mark
		if con != nil {
			if acc := con.accept(id); acc != id {
				id, rep = acc, substituted(acc)
			}
		}
		gen = append(gen, id)
		if p.logprobs || p.score {
			var c sample.Choice
			if sr.choice != nil {
				c = *sr.choice // drawn with its logprobs on the last stage
			} else {
				c = sample.Logprobs(raw, id, p.top)
			}
			if p.logprobs {
				out.logprob(c)
			}
			res.logprob += float64(c.Logprob)
		}
		if (con != nil && con.done) || (!p.ignoreEOS && slices.Contains(e.eos, id)) {
			out.ids = append(out.ids, rep) // rides on the last event
			finish = "stop"
			break
		}
		out.ids = append(out.ids, rep) // reported with the next event emitted
		stopped, err := out.token(id)
		if err != nil {
			return res, err
		}
		if stopped {
			finish = "stop"
			break
		}
		if len(gen) >= p.maxTokens {
			break
		}
		if sr = step([]int{id}, false, len(gen)); sr.err != nil {
			return res, sr.err
		}
		logits = sr.logits
	}
	if err := out.finish(finish); err != nil {
		return res, err
	}
	res.tokens = len(gen)
	res.reasoningTokens = out.reasoningTokens
	return res, nil
}

// greedyParams says whether p picks the argmax of the raw logits:
// temperature 0 and no penalty or bias (top-k/p and min-p keep the argmax).
func greedyParams(p sample.Params) bool {
	return p.Temperature == 0 && (p.RepetitionPenalty == 0 || p.RepetitionPenalty == 1) &&
		p.PresencePenalty == 0 && p.FrequencyPenalty == 0 && len(p.LogitBias) == 0
}

// output turns one choice's tokens into events: detokenizer → stop strings
// → reasoning split → tool-call parser. Logprobs of tokens whose text is
// held back ride on the next event that carries anything.
type output struct {
	e      *Runner
	choice int
	emit   func(*job.Event, []int) error
	chat   bool

	stream   *tokenizer.Stream
	stop     *stop.Matcher
	stopped  bool
	rp       *reasoning.Parser
	tp       *toolcall.Parser
	parallel bool
	calls    int // calls seen (index+1 of the highest)
	lps      []openai.TokenLogprob
	wantLP   bool
	silent   bool  // replaying resumed tokens: emit nothing
	ids      []int // generated tokens not yet reported with an event (substitution marks included)

	inThink         bool
	reasoningTokens int
}

func (e *Runner) newOutput(p *plan, i int, emit func(*job.Event, []int) error) *output {
	o := &output{e: e, choice: i, emit: emit, chat: p.kind == job.KindChat, stream: e.tok.NewStream(),
		stop: stop.New(p.stops), parallel: p.parallel, wantLP: p.logprobs, inThink: p.promptOpen}
	if o.chat && p.reasoning {
		o.rp = reasoning.New(p.promptOpen)
	}
	if o.chat && p.parseTools {
		o.tp = toolcall.NewParser(p.tools, toolcall.Options{BareXMLCalls: e.xmlTools})
	}
	return o
}

func (o *output) logprob(c sample.Choice) {
	tl := o.e.tokenLogprob(c.ID, c.Logprob)
	tl.TopLogprobs = make([]openai.TopLogprob, len(c.Top))
	for k, t := range c.Top {
		a := o.e.tokenLogprob(t.ID, t.Logprob)
		tl.TopLogprobs[k] = openai.TopLogprob{Token: a.Token, Logprob: a.Logprob, Bytes: a.Bytes}
	}
	o.lps = append(o.lps, tl)
}

// tokenLogprob names a token as OpenAI does: its text and UTF-8 bytes.
func (e *Runner) tokenLogprob(id int, lp float32) openai.TokenLogprob {
	b, _ := e.tok.TokenBytes(id)
	text := string(b)
	if !utf8.Valid(b) {
		text = e.tok.Decode([]int{id})
	}
	ints := make([]int, len(b))
	for i, x := range b {
		ints[i] = int(x)
	}
	v := float64(lp)
	if math.IsInf(v, -1) {
		v = -9999 // JSON has no -Inf; vLLM reports -9999.0 as well
	}
	return openai.TokenLogprob{Token: text, Logprob: v, Bytes: ints}
}

// token processes one generated (non-EOS) token; stopped reports a stop
// string.
func (o *output) token(id int) (stopped bool, err error) {
	e := o.e
	if id == e.thinkOpen {
		o.inThink = true
	}
	if o.inThink {
		o.reasoningTokens++
	}
	if id == e.thinkClose {
		o.inThink = false
	}
	text := ""
	if !e.tok.IsSpecial(id) {
		text = o.stream.Add(id)
	}
	return o.stopped, o.push(text, "")
}

// finish flushes held-back text and sends the choice's last event.
func (o *output) finish(reason string) error {
	text := ""
	if !o.stopped {
		text = o.stream.Flush()
	}
	return o.push(text, reason)
}

// push routes text through the pipeline and emits an event when there is
// something to say; final (reason != "") flushes every stage.
func (o *output) push(text, reason string) error {
	final := reason != ""
	var out string
	if !o.stopped {
		out, o.stopped = o.stop.Add(text)
		if final && !o.stopped {
			out += o.stop.Flush()
		}
	}
	ev := &job.Event{Choice: o.choice}
	content := out
	if o.rp != nil {
		d := o.rp.Add(out)
		if final || o.stopped {
			f := o.rp.Flush()
			d.Reasoning += f.Reasoning
			d.Content += f.Content
		}
		ev.Reasoning, content = d.Reasoning, d.Content
	}
	if o.tp != nil {
		d := o.tp.Add(content)
		if final || o.stopped {
			f := o.tp.Flush()
			d.Content += f.Content
			d.Calls = append(d.Calls, f.Calls...)
		}
		content = d.Content
		for _, c := range d.Calls {
			if c.Index > 0 && !o.parallel {
				continue
			}
			o.calls = max(o.calls, c.Index+1)
			td := openai.ToolCallDelta{Index: c.Index, ID: c.ID, Function: &openai.FunctionCallDelta{Name: c.Name, Arguments: c.Arguments}}
			if c.ID != "" {
				td.Type = "function"
			}
			ev.ToolCalls = append(ev.ToolCalls, td)
		}
	}
	ev.Text = content
	if final {
		if reason == "stop" && o.calls > 0 {
			reason = "tool_calls"
		}
		ev.FinishReason = reason
		if s, ok := o.stop.Matched(); ok && reason == "stop" {
			ev.StopSequence = s
		}
	}
	if o.silent {
		return nil
	}
	if ev.Text == "" && ev.Reasoning == "" && len(ev.ToolCalls) == 0 && !final && !o.e.noText {
		return nil // logprobs and token ids wait for the event that carries their text
	}
	if len(o.lps) > 0 {
		ev.Logprobs = &openai.ChoiceLogprobs{Content: o.lps, Refusal: []openai.TokenLogprob{}}
		o.lps = nil
	}
	ids := o.ids
	o.ids = nil
	return o.emit(ev, ids)
}

// A token that a constraint put in place of a sampled EOS (a grammar or
// XML text segment ended, the next forced literal's first token follows) is
// reported as substituted(id) < 0, so that a resumed generation can replay
// the constraint exactly: from the id alone it is ambiguous whether the
// segment ended there (the same token may also be valid inside it, e.g.
// whitespace after a JSON value before "\n</parameter>").
func substituted(id int) int { return -1 - id }

// decodeResumed splits resumed token marks into ids and substitution flags.
func decodeResumed(marks []int) (ids []int, subst []bool) {
	ids, subst = make([]int, len(marks)), make([]bool, len(marks))
	for k, m := range marks {
		if m < 0 {
			ids[k], subst[k] = -1-m, true
		} else {
			ids[k] = m
		}
	}
	return ids, subst
}
