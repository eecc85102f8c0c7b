package runner

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine/chat/grammar"
	"github.com/macpool/macpool/engine/chat/reasoning"
	"github.com/macpool/macpool/engine/chat/toolcall"
	"github.com/macpool/macpool/engine/sample"
	"github.com/macpool/macpool/job"
)

// plan is a job turned into what every choice needs.
type plan struct {
	kind       string
	prompt     []int
	maxTokens  int
	minTokens  int
	ignoreEOS  bool
	params     sample.Params // Seed is the request's base seed: choice i uses Seed+i
	n          int
	logprobs   bool
	top        int
	stops      []string
	reasoning  bool // split <think> output
	promptOpen bool // the prompt opened <think>
	tools      []toolcall.Tool
	parseTools bool
	parallel   bool
	segments   func() []segment // nil: unconstrained
	unenforced []string         // what schemas could not enforce or only approximate (job.Event.Unenforced)
	resume     [][]int          // per choice: tokens generated elsewhere (failover)
}

// plan validates and prepares job. Errors are 400s naming the parameter.
func (e *Runner) plan(j *job.Job) (*plan, *openai.Error) {
	p := &plan{kind: j.Kind}
	var (
		req      sampleReq
		maxNew   int
		promptPm string
	)
	switch j.Kind {
	case job.KindChat:
		r := j.Chat
		if r == nil {
			return nil, openai.InvalidRequest("messages", "chat job without a chat request")
		}
		if e.tmpl == nil {
			return nil, openai.InvalidRequest("messages", "model %s has no chat template; use /v1/completions", e.cfg.ModelName)
		}
		promptPm = "messages"
		if r.Truncation == "auto" {
			r = e.truncate(r)
		}
		text, oe := e.render(r)
		if oe != nil {
			return nil, oe
		}
		p.prompt = e.tok.Encode(text)
		p.reasoning = e.thinking
		p.promptOpen = e.thinking && reasoning.PromptOpensThink(text)
		maxNew = r.MaxNewTokens()
		p.n = r.Choices()
		p.logprobs = r.Logprobs
		if r.TopLogprobs != nil {
			p.top = *r.TopLogprobs
		}
		p.stops = r.Stop
		p.ignoreEOS = r.IgnoreEOS
		if r.MinTokens != nil {
			p.minTokens = *r.MinTokens
		}
		req = sampleReq{r.Temperature, r.TopP, r.TopK, r.MinP, r.RepetitionPenalty, r.PresencePenalty, r.FrequencyPenalty, r.LogitBias, r.Seed}
		if oe := e.planOutput(p, r); oe != nil {
			return nil, oe
		}
	case job.KindCompletion:
		r := j.Completion
		if r == nil {
			return nil, openai.InvalidRequest("prompt", "completion job without a completion request")
		}
		promptPm = "prompt"
		switch {
		case r.Prompt.Len() != 1:
			return nil, openai.InvalidRequest("prompt", "exactly one prompt is supported, got %d", r.Prompt.Len())
		case len(r.Prompt.Tokens) == 1:
			p.prompt = append([]int(nil), r.Prompt.Tokens[0]...)
			for _, id := range p.prompt {
				if id < 0 || id >= e.model.VocabSize() {
					return nil, openai.InvalidRequest("prompt", "token id %d is outside the vocabulary [0, %d)", id, e.model.VocabSize())
				}
			}
		case e.noText:
			return nil, openai.InvalidRequest("prompt", "model %s has no tokenizer: the prompt must be token ids", e.cfg.ModelName)
		default:
			p.prompt = e.tok.Encode(r.Prompt.Texts[0])
		}
		if r.Echo {
			return nil, openai.InvalidRequest("echo", "echo is not supported")
		}
		if r.Suffix != "" {
			return nil, openai.InvalidRequest("suffix", "suffix is not supported")
		}
		maxNew = r.MaxNewTokens()
		if r.MaxTokens == nil {
			maxNew = 16 // OpenAI's default for completions
		}
		p.n = r.Choices()
		if r.Logprobs != nil {
			p.logprobs, p.top = true, *r.Logprobs
		}
		p.stops = r.Stop
		p.ignoreEOS = r.IgnoreEOS
		if r.MinTokens != nil {
			p.minTokens = *r.MinTokens
		}
		req = sampleReq{r.Temperature, r.TopP, r.TopK, r.MinP, r.RepetitionPenalty, r.PresencePenalty, r.FrequencyPenalty, r.LogitBias, r.Seed}
	default:
		return nil, openai.InvalidRequest("", "unknown job kind %q", j.Kind)
	}
	if len(p.prompt) == 0 {
		return nil, openai.InvalidRequest(promptPm, "the prompt is empty after tokenization")
	}
	if p.n < 1 {
		p.n = 1
	}
	room := e.maxCtx - len(p.prompt)
	switch {
	case room <= 0:
		return nil, openai.InvalidRequest(promptPm, "this model's maximum context length is %d tokens, but the prompt has %d tokens", e.maxCtx, len(p.prompt))
	case maxNew > room:
		return nil, openai.InvalidRequest(promptPm, "this model's maximum context length is %d tokens; the prompt has %d tokens and %d completion tokens were requested (%d in total)", e.maxCtx, len(p.prompt), maxNew, len(p.prompt)+maxNew)
	case maxNew <= 0:
		maxNew = room
	}
	p.maxTokens = maxNew
	params, oe := e.sampleParams(req)
	if oe != nil {
		return nil, oe
	}
	p.params = params
	return p, nil
}

type sampleReq struct {
	temperature, topP *float64
	topK              *int
	minP, repetition  *float64
	presence, freq    *float64
	logitBias         map[string]float64
	seed              *int64
}

// sampleParams maps request parameters (falling back to the checkpoint's
// generation_config defaults, then OpenAI's) to sample.Params.
func (e *Runner) sampleParams(r sampleReq) (sample.Params, *openai.Error) {
	pick := func(v, def *float64, fallback float64) float32 {
		switch {
		case v != nil:
			return float32(*v)
		case def != nil:
			return float32(*def)
		}
		return float32(fallback)
	}
	d := e.defaults
	p := sample.Params{
		Temperature:       pick(r.temperature, d.Temperature, 1),
		TopP:              pick(r.topP, d.TopP, 0),
		MinP:              pick(r.minP, d.MinP, 0),
		RepetitionPenalty: pick(r.repetition, d.RepetitionPenalty, 0),
		PresencePenalty:   pick(r.presence, nil, 0),
		FrequencyPenalty:  pick(r.freq, nil, 0),
	}
	switch {
	case r.topK != nil:
		p.TopK = *r.topK
	case d.TopK != nil:
		p.TopK = *d.TopK
	}
	if len(r.logitBias) > 0 {
		p.LogitBias = make(map[int]float32, len(r.logitBias))
		for k, v := range r.logitBias {
			id, err := strconv.Atoi(k)
			if err != nil || id < 0 || id >= e.model.VocabSize() {
				return p, openai.InvalidRequest("logit_bias", "logit_bias key %q is not a token id in [0, %d)", k, e.model.VocabSize())
			}
			p.LogitBias[id] = float32(v)
		}
	}
	if r.seed != nil {
		p.Seed = uint64(*r.seed)
	} else {
		p.Seed = newSeed()
	}
	if err := p.Validate(); err != nil {
		param, _, _ := strings.Cut(err.Error(), " ")
		return p, openai.InvalidRequest(param, "%v", err)
	}
	return p, nil
}

// planOutput sets up output parsing and constraints of a chat request:
// tool calls (parsed unless tool_choice is "none"; forced by grammar for
// "required" and a named function) and response_format.
func (e *Runner) planOutput(p *plan, r *openai.ChatCompletionRequest) *openai.Error {
	mode := openai.ToolChoiceAuto
	if r.ToolChoice != nil {
		mode = r.ToolChoice.Mode
	}
	// Tool parameter schemas go through the compiler response_format uses:
	// a malformed schema is a 400, as is one a strict tool cannot enforce.
	toolGrammars := map[string]*grammar.Grammar{}
	for i, t := range r.Tools {
		strict := t.Function.Strict != nil && *t.Function.Strict
		g, err := grammar.CompileOptions(argsSchema(t.Function.Parameters), grammar.Options{Lenient: !strict})
		if g != nil {
			for _, u := range append(g.Unenforced(), g.Approximated()...) {
				p.unenforced = append(p.unenforced, fmt.Sprintf("tools[%d].function.parameters: %s", i, u))
			}
		}
		if err != nil {
			return openai.InvalidRequest(fmt.Sprintf("tools[%d].function.parameters", i), "tool %q: %v", t.Function.Name, err)
		}
		toolGrammars[t.Function.Name] = g
	}
	if len(r.Tools) > 0 && mode != openai.ToolChoiceNone {
		p.parseTools = true
		for _, t := range r.Tools {
			p.tools = append(p.tools, toolcall.Tool{Name: t.Function.Name, Parameters: t.Function.Parameters})
		}
	}
	p.parallel = r.ParallelToolCalls == nil || *r.ParallelToolCalls
	var prefix []string
	if p.promptOpen {
		// The generation prompt opened <think>: close it before forced
		// output so that the reasoning parser sees content.
		prefix = append(prefix, "\n</think>\n\n")
	}
	if p.parseTools && (mode == openai.ToolChoiceRequired || mode == openai.ToolChoiceFunction) {
		var names []string
		params := map[string]json.RawMessage{}
		for _, t := range p.tools {
			if mode == openai.ToolChoiceRequired || t.Name == r.ToolChoice.Function {
				names = append(names, t.Name)
				params[t.Name] = t.Parameters
			}
		}
		if len(names) == 0 {
			return openai.InvalidRequest("tool_choice", "tool_choice names function %q, which is not in tools", r.ToolChoice.Function)
		}
		if e.xmlTools {
			p.segments = func() []segment { return e.xmlCallSegments(prefix, names, params) }
		} else {
			args := map[string]*grammar.Grammar{}
			for _, n := range names {
				args[n] = toolGrammars[n]
			}
			parallel := p.parallel
			p.segments = func() []segment { return e.jsonCallSegments(prefix, names, args, parallel) }
		}
		return nil
	}
	if r.ResponseFormat != nil {
		raw, err := json.Marshal(r.ResponseFormat)
		if err != nil {
			return openai.InvalidRequest("response_format", "%v", err)
		}
		g, err := grammar.FromResponseFormat(raw)
		if err != nil {
			param := "response_format"
			if r.ResponseFormat.Type == "json_schema" {
				param = "response_format.json_schema.schema"
			}
			return openai.InvalidRequest(param, "%v", err)
		}
		if g != nil {
			for _, u := range append(g.Unenforced(), g.Approximated()...) {
				p.unenforced = append(p.unenforced, "response_format: "+u)
			}
			p.segments = func() []segment {
				var s []segment
				for _, x := range prefix {
					s = append(s, e.literal(x))
				}
				return append(s, segment{kind: segGrammar, g: g})
			}
		}
	}
	return nil
}

// maxParallelCalls caps the forced calls of one reply.
const maxParallelCalls = 8

// jsonCallSegments forces one Qwen2.5/3 call, in the layout the templates
// show: <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>, the
// name a literal (or a choice among names), ARGS following the tool's
// parameter schema. With parallel, more calls may follow (each on a new
// line, as the templates join them) until the model ends the reply.
func (e *Runner) jsonCallSegments(prefix, names []string, args map[string]*grammar.Grammar, parallel bool) []segment {
	var s []segment
	for _, x := range prefix {
		s = append(s, e.literal(x))
	}
	body := func(name string) []segment {
		return []segment{e.literal(`", "arguments": `), {kind: segGrammar, g: args[name]}, e.literal("}\n</tool_call>")}
	}
	s = append(s, e.literal("<tool_call>\n{\"name\": \""))
	if len(names) == 1 {
		s = append(s, e.literal(jsonString(names[0])))
		s = append(s, body(names[0])...)
	} else {
		alts := make([]string, len(names))
		byAlt := map[string]string{}
		for i, n := range names {
			alts[i] = jsonString(n)
			byAlt[alts[i]] = n
		}
		s = append(s, segment{kind: segChoice, alts: alts, then: func(a string) []segment { return body(byAlt[a]) }})
	}
	if !parallel {
		return append(s, segment{kind: segEOS})
	}
	// After each call: the end of the reply, or another call.
	var more func(k int) segment
	more = func(k int) segment {
		if k >= maxParallelCalls {
			return segment{kind: segEOS}
		}
		alts := make([]string, len(names))
		byAlt := map[string]string{}
		for i, n := range names {
			alts[i] = "\n<tool_call>\n{\"name\": \"" + jsonString(n)
			byAlt[alts[i]] = n
		}
		return segment{kind: segChoice, alts: alts, eosOK: true, then: func(a string) []segment {
			return append(body(byAlt[a]), more(k+1))
		}}
	}
	return append(s, more(1))
}

// jsonString is s as the inside of a JSON string literal.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// xmlCallSegments forces one Qwen3-Coder/3.5 call:
// <tool_call>\n<function=NAME>\n(<parameter=K>\nV\n</parameter>\n)*</function>\n</tool_call>
// with the required parameters in schema order; string values are free
// text without '<' (at most 24 tokens), others follow their JSON schema.
func (e *Runner) xmlCallSegments(prefix, names []string, params map[string]json.RawMessage) []segment {
	var s []segment
	for _, x := range prefix {
		s = append(s, e.literal(x))
	}
	body := func(name string) []segment {
		out := []segment{e.literal(">\n")}
		ks, schemas := xmlParams(params[name])
		for i, k := range ks {
			out = append(out, e.literal(fmt.Sprintf("<parameter=%s>\n", k)))
			val := segment{kind: segText, maxToks: 24}
			if !isStringSchema(schemas[i]) {
				if g, err := grammar.Compile(schemas[i]); err == nil {
					val = segment{kind: segGrammar, g: g}
				}
			}
			out = append(out, val, e.literal("\n</parameter>\n"))
		}
		return out
	}
	s = append(s, e.literal("<tool_call>\n<function="))
	if len(names) == 1 {
		s = append(s, e.literal(names[0]))
		s = append(s, body(names[0])...)
	} else {
		s = append(s, segment{kind: segChoice, alts: names, then: body})
	}
	return append(s, e.literal("</function>\n</tool_call>"), segment{kind: segEOS})
}

// withThinking maps reasoning_effort onto Qwen's thinking switch: none and
// minimal turn it off, low to high on (Qwen has no finer setting). An
// explicit chat_template_kwargs.enable_thinking wins.
func withThinking(r *openai.ChatCompletionRequest) *openai.ChatCompletionRequest {
	var on bool
	switch r.ReasoningEffort {
	case "none", "minimal":
	case "low", "medium", "high":
		on = true
	default:
		return r
	}
	if _, set := r.ChatTemplateKwargs["enable_thinking"]; set {
		return r
	}
	c := *r
	c.ChatTemplateKwargs = make(map[string]json.RawMessage, len(r.ChatTemplateKwargs)+1)
	for k, v := range r.ChatTemplateKwargs {
		c.ChatTemplateKwargs[k] = v
	}
	c.ChatTemplateKwargs["enable_thinking"] = json.RawMessage(strconv.FormatBool(on))
	return &c
}

// render renders a chat request with the chat template.
func (e *Runner) render(r *openai.ChatCompletionRequest) (string, *openai.Error) {
	body, err := json.Marshal(withThinking(r))
	if err != nil {
		return "", openai.InvalidRequest("messages", "encode request: %v", err)
	}
	text, err := e.tmpl.RenderRequest(body)
	if err != nil {
		return "", openai.InvalidRequest("messages", "chat template: %v", err)
	}
	return text, nil
}

// truncate implements truncation "auto": while the rendered prompt and the
// requested completion (at least one token) do not fit the context, it
// drops the oldest turn after the leading system messages — a user message
// with the assistant messages and tool results that follow it up to the
// next user message — so the conversation stays well formed and still
// starts with a user turn. The last turn is never dropped; what still does
// not fit is refused by plan as without truncation. The request is copied,
// never modified.
func (e *Runner) truncate(r *openai.ChatCompletionRequest) *openai.ChatCompletionRequest {
	need := max(r.MaxNewTokens(), 1)
	fits := func(c *openai.ChatCompletionRequest) bool {
		text, oe := e.render(c)
		return oe != nil || len(e.tok.Encode(text))+need <= e.maxCtx
	}
	if fits(r) {
		return r
	}
	c := *r
	msgs := append([]openai.ChatMessage(nil), r.Messages...)
	first := 0
	for first < len(msgs) && (msgs[first].Role == "system" || msgs[first].Role == "developer") {
		first++
	}
	for {
		end := first + 1
		for end < len(msgs) && msgs[end].Role != "user" {
			end++
		}
		if end >= len(msgs) {
			break // the last turn stays
		}
		msgs = append(msgs[:first], msgs[end:]...)
		c.Messages = msgs
		if fits(&c) {
			break
		}
	}
	return &c
}
