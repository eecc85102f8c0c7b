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
		body, err := json.Marshal(r)
		if err != nil {
			return nil, openai.InvalidRequest("messages", "encode request: %v", err)
		}
		text, err := e.tmpl.RenderRequest(body)
		if err != nil {
			return nil, openai.InvalidRequest("messages", "chat template: %v", err)
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
				g, err := grammar.Compile(argsSchema(params[n]))
				if err != nil {
					// A schema the grammar cannot enforce: any object.
					g = grammar.JSONObject()
				}
				args[n] = g
			}
			p.segments = func() []segment { return e.jsonCallSegments(prefix, names, args) }
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

// jsonCallSegments forces one Qwen2.5/3 call, in the layout the templates
// show: <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>, the
// name a literal (or a choice among names), ARGS following the tool's
// parameter schema.
func (e *Runner) jsonCallSegments(prefix, names []string, args map[string]*grammar.Grammar) []segment {
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
	return append(s, segment{kind: segEOS})
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
