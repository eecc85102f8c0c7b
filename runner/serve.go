// Package serve is macpool's serving layer: it turns one OpenAI job
// (job.Job: chat or completion) into a stream of api.Events, using the
// checkpoint's own chat template, tokenizer and engine. It implements
// worker.Engine.
//
// Per request it renders the prompt, tokenizes, builds a sampler per choice,
// and generates every choice as its own sequence. Sequences of all
// concurrent requests are decoded together: a scheduler goroutine owned by
// the Engine batches one step of every active sequence into one
// engine.Model.Forward (prompts are prefilled in chunks so that a long
// prompt does not stall running decodes for long). Output goes through the
// streaming detokenizer, stop strings, the reasoning splitter and the
// tool-call parser (engine/chat/...). response_format and forced tool
// calls are enforced with grammar masks while decoding (constraint.go).
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/chat/grammar"
	"github.com/macpool/macpool/engine/chat/template"
	"github.com/macpool/macpool/engine/checkpoint"
	_ "github.com/macpool/macpool/engine/cpu" // the "cpu" backend
	"github.com/macpool/macpool/engine/gguf"
	_ "github.com/macpool/macpool/engine/qwen" // the Qwen model types
	"github.com/macpool/macpool/engine/tokenizer"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/prefix"
)

// ErrNoTokenizer is returned by New for a checkpoint folder without
// tokenizer.json unless Config.TokensOnly is set.
var ErrNoTokenizer = errors.New("the checkpoint has no tokenizer")

// Config configures an Engine.
type Config struct {
	// ModelDir is the checkpoint folder: tokenizer.json,
	// tokenizer_config.json / chat_template.jinja, and (unless Model is set)
	// the weights.
	ModelDir string
	// Model is an already loaded model to serve (the caller keeps
	// ownership: Close does not close it). nil loads ModelDir.
	Model *engine.Model
	// ModelName is the name clients use (informational; routing is the
	// cluster's job). Default: ModelDir's base name.
	ModelName string
	// Backend, Threads, KVF16, KVQ8, Quantize and ExactMatMul are passed
	// to engine.Load (see engine.Options).
	Backend     string
	Threads     int
	KVF16       bool
	KVQ8        bool
	Quantize    string
	ExactMatMul bool
	// TokensOnly serves a checkpoint without a tokenizer: prompts must be
	// token ids, events carry no text, and every generated token comes
	// with an event of its own (macpool run --tokens --output ids on a bare
	// checkpoint). A checkpoint that has a tokenizer is served as usual.
	TokensOnly bool
	// AllowNoEOS serves a checkpoint none of whose end-of-sequence ids is
	// in the vocabulary (the tiny test fixtures): generation then ends at
	// max_tokens only. A server refuses such a model; macpool run accepts it.
	AllowNoEOS bool
	// MaxSeqs is the most sequences (choices of all requests) decoded at
	// once; more wait for a free slot.
	MaxSeqs int
	// MaxContext is the most prompt + completion tokens of a sequence;
	// 0 means the model's max_position_embeddings.
	MaxContext int
	// PrefillChunk is the most prompt tokens one sequence puts into one
	// batched forward pass. Hybrid models (recurrent layers) end prompt
	// chunks only at multiples of engine.DeltaNetChunk or at the prompt end
	// (so that a resume reproduces the same bits), which may take a chunk,
	// and so a pass (MaxBatchTokens), past these bounds by under 64 tokens.
	PrefillChunk int
	// MaxBatchTokens bounds the tokens of one forward pass (decode steps
	// go first, prefill chunks fill the rest), so that prompts arriving
	// together do not stall running decodes for long.
	MaxBatchTokens int
	// KV pool (paged KV cache with prefix caching), used when the backend
	// and the model support paging (else per-sequence caches, no prefix
	// cache). KVBlockSize positions per block (0: 32); the budget is KVBlocks, else
	// KVBytes, else the backend's recommendation (engine.KVBudgeter: on a
	// Mac the GPU working set left after the weights), else
	// engine.DefaultKVBytes capped at what MaxSeqs full contexts need twice.
	KVBlockSize int
	KVBlocks    int
	KVBytes     int64
	// NoPrefixCache turns off the reuse of cached prompt prefixes.
	NoPrefixCache bool
	// Forward, when set, runs the forward passes in place of Model (which
	// is then the first stage of a pipeline: package pipeline's Head).
	Forward Forwarder
	// Lanes is the number of scheduler loops with Forward (each with its
	// own sequences and passes, so that several passes are in flight
	// along a pipeline); 0 or 1: one. Without Forward there is one.
	Lanes int
}

// DefaultConfig returns the defaults: 8 sequences, prefill chunks of 256,
// 512 tokens per pass.
func DefaultConfig() Config {
	return Config{MaxSeqs: 8, PrefillChunk: 256, MaxBatchTokens: 512, KVBlockSize: 32}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.ModelDir == "":
		return errors.New("serve: model dir must be set")
	case c.MaxSeqs < 1:
		return fmt.Errorf("serve: max sequences %d must be at least 1", c.MaxSeqs)
	case c.MaxContext < 0:
		return fmt.Errorf("serve: max context %d must not be negative", c.MaxContext)
	case c.PrefillChunk < 1:
		return fmt.Errorf("serve: prefill chunk %d must be at least 1", c.PrefillChunk)
	case c.MaxBatchTokens < c.PrefillChunk:
		return fmt.Errorf("serve: max batch tokens %d must be at least the prefill chunk %d", c.MaxBatchTokens, c.PrefillChunk)
	case c.Threads < 0:
		return fmt.Errorf("serve: threads %d must not be negative", c.Threads)
	case c.KVBlockSize < 0:
		return fmt.Errorf("serve: kv block size %d must not be negative", c.KVBlockSize)
	case c.KVBlocks < 0 || c.KVBytes < 0:
		return fmt.Errorf("serve: kv budget (%d blocks, %d bytes) must not be negative", c.KVBlocks, c.KVBytes)
	case c.Lanes < 0:
		return fmt.Errorf("serve: lanes %d must not be negative", c.Lanes)
	case c.Forward != nil && c.Model == nil:
		return errors.New("serve: a Forwarder needs the first stage's Model")
	}
	return nil
}

// Engine serves one model. Safe for concurrent use; Close stops it.
type Runner struct {
	cfg      Config
	log      *slog.Logger
	model    *engine.Model
	ownModel bool
	tok      *tokenizer.Tokenizer
	tmpl     *template.Template // nil when the folder has no chat template
	xmlTools bool               // the template writes Qwen3-Coder/3.5 XML calls
	thinking bool               // the template knows <think>
	noText   bool               // Config.TokensOnly and no tokenizer: tok is empty
	eos      []int
	maxCtx   int
	info     modelInfo // RoutingSummary (describe.go)
	defaults genDefaults

	thinkOpen, thinkClose int // token ids, -1 if absent

	slots  chan struct{}
	fwd    Forwarder
	lanes  []*lane
	laneMu sync.Mutex
	seqIDs atomic.Uint64
	quit   chan struct{}
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	vocabOnce sync.Once
	voc       *vocab

	pool *engine.KVPool // nil: per-sequence caches (backend without paging)
	emb  embedState     // embeddings (embed.go)
	keys *prefix.Recent // prefix-routing keys of recent requests

	passes       atomic.Int64 // forward passes run (tests check batching)
	preemptions  atomic.Int64 // sequences preempted for lack of KV blocks
	forwardNanos atomic.Int64 // time spent in Model.Forward
}

// genDefaults are sampling defaults from generation_config.json, used for
// parameters a request leaves out (as vLLM does).
type genDefaults struct {
	Temperature       *float64 `json:"temperature"`
	TopP              *float64 `json:"top_p"`
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
}

// New loads the model (unless cfg.Model is set), tokenizer and chat
// template, and starts the scheduler.
func New(cfg Config, logger *slog.Logger) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.ModelName == "" {
		cfg.ModelName = filepath.Base(strings.TrimRight(cfg.ModelDir, "/"))
	}
	e := &Runner{
		cfg:   cfg,
		log:   logger.With("component", "serve", "model", cfg.ModelName),
		model: cfg.Model,
		slots: make(chan struct{}, cfg.MaxSeqs),
		quit:  make(chan struct{}),
		keys:  prefix.NewRecent(maxPrefixKeys),
	}
	if err := e.loadText(); err != nil {
		return nil, err
	}
	if e.model == nil {
		m, err := engine.Load(cfg.ModelDir, engine.Options{Backend: cfg.Backend, Threads: cfg.Threads, KVF16: cfg.KVF16,
			KVQ8: cfg.KVQ8, Quantize: cfg.Quantize, ExactMatMul: cfg.ExactMatMul})
		if err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		e.model, e.ownModel = m, true
	}
	e.maxCtx = cfg.MaxContext
	if e.maxCtx == 0 {
		e.maxCtx = e.model.Config().ContextLength() // rope: YaRN extends max_position_embeddings
	}
	if e.maxCtx <= 0 {
		e.maxCtx = 32768
	}
	if err := e.newPool(); err != nil {
		e.log.Info("no paged KV cache", "err", err)
	}
	e.info = describe(cfg.ModelDir, cfg.Quantize)
	seen := map[int]bool{}
	for _, id := range append(e.model.EOSTokenIDs(), e.tok.EOSTokenIDs()...) {
		if !seen[id] && id >= 0 && id < e.model.VocabSize() {
			seen[id] = true
			e.eos = append(e.eos, id)
		}
	}
	if len(e.eos) == 0 && !cfg.AllowNoEOS {
		e.Close()
		return nil, fmt.Errorf("serve: %s: no end-of-sequence token id in config, generation_config or tokenizer", cfg.ModelDir)
	}
	e.thinkOpen, e.thinkClose = -1, -1
	if id, ok := e.tok.TokenID("<think>"); ok {
		e.thinkOpen = id
	}
	if id, ok := e.tok.TokenID("</think>"); ok {
		e.thinkClose = id
	}
	e.start()
	return e, nil
}

// loadText loads the tokenizer, the chat template and the generation
// defaults: from the folder, or from a GGUF file's metadata.
func (e *Runner) loadText() error {
	dir := e.cfg.ModelDir
	if checkpoint.IsGGUF(dir) {
		f, err := gguf.Open(dir)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		defer f.Close()
		if e.tok, err = f.Tokenizer(); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		if src, ok := f.String("tokenizer.chat_template"); ok {
			special := map[string]string{}
			for key, name := range map[string]string{"tokenizer.ggml.bos_token_id": "bos_token", "tokenizer.ggml.eos_token_id": "eos_token"} {
				if id, ok := f.Int(key); ok {
					if t, ok := e.tok.Token(int(id)); ok {
						special[name] = t
					}
				}
			}
			t, err := template.New(src, special)
			if err != nil {
				return fmt.Errorf("serve: %s: %w", dir, err)
			}
			e.setTemplate(t)
		} else {
			e.log.Warn("no chat template in the GGUF metadata: chat requests will fail")
		}
		return nil
	}
	tok, err := tokenizer.Load(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if !e.cfg.TokensOnly {
			return fmt.Errorf("no tokenizer.json in %s (%w)", dir, ErrNoTokenizer)
		}
		// An empty vocabulary: every id decodes to nothing, and the EOS ids
		// come from the model's config alone.
		if e.tok, err = tokenizer.New(tokenizer.Spec{}); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		e.noText = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	e.tok = tok
	if t, err := template.Load(dir); err == nil {
		e.setTemplate(t)
	} else {
		e.log.Warn("no chat template: chat requests will fail", "err", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil {
		_ = json.Unmarshal(b, &e.defaults)
	}
	return nil
}

func (e *Runner) setTemplate(t *template.Template) {
	e.tmpl = t
	src := t.Source()
	e.xmlTools = strings.Contains(src, "<function=")
	e.thinking = strings.Contains(src, "<think>")
}

// newPool sets up the paged KV pool if the backend and model support it.
func (e *Runner) newPool() error {
	kc := engine.DefaultKVPoolConfig()
	if e.cfg.KVBlockSize > 0 {
		kc.BlockSize = e.cfg.KVBlockSize
	}
	kc.MaxBlocks, kc.MaxBytes, kc.PrefixCache = e.cfg.KVBlocks, e.cfg.KVBytes, !e.cfg.NoPrefixCache
	kc.MaxPositions = 2 * e.cfg.MaxSeqs * e.maxCtx
	pool, err := e.model.NewKVPool(kc)
	if err != nil {
		return err
	}
	e.pool = pool
	return nil
}

// newCache makes a sequence's cache: paged from the pool when there is one.
func (e *Runner) newCache() (*engine.Cache, error) {
	if e.pool != nil {
		return e.pool.NewCache()
	}
	return e.model.NewCache()
}

// Stats are the scheduler's and the KV pool's counters.
type Stats struct {
	Passes, Preemptions int64
	KV                  engine.KVStats // zero without a pool
}

// Stats returns the engine's counters.
func (e *Runner) Stats() Stats {
	s := Stats{Passes: e.passes.Load(), Preemptions: e.preemptions.Load()}
	if e.pool != nil {
		s.KV = e.pool.Stats()
	}
	return s
}

// Model is the served model.
func (e *Runner) Model() *engine.Model { return e.model }

// Tokenizer is the model's tokenizer.
func (e *Runner) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// Name is the served model name.
func (e *Runner) Name() string { return e.cfg.ModelName }

// Close stops the scheduler (running generations fail) and releases the
// model if New loaded it. Safe to call twice.
func (e *Runner) Close() error {
	e.closeOnce.Do(func() {
		close(e.quit)
		e.wg.Wait()
		if e.ownModel {
			e.closeErr = e.model.Close()
		}
		if e.pool != nil {
			e.pool.Close()
		}
	})
	return e.closeErr
}

// vocab prepares the vocabulary for grammar masks, once (~0.2 s).
func (e *Runner) vocab() *vocab {
	e.vocabOnce.Do(func() {
		n := e.model.VocabSize()
		v := &vocab{bytes: make([][]byte, n), noLT: make([]bool, n), eos: e.eos}
		// Added tokens (Qwen: the block from <|endoftext|> up) are markup,
		// never JSON or parameter text.
		firstAdded := e.tok.VocabSize()
		for _, s := range []string{"<|endoftext|>", "<|im_start|>"} {
			if id, ok := e.tok.TokenID(s); ok && id < firstAdded {
				firstAdded = id
			}
		}
		for id := 0; id < n && id < firstAdded; id++ {
			if e.tok.IsSpecial(id) {
				continue
			}
			if b, ok := e.tok.TokenBytes(id); ok && len(b) > 0 {
				v.bytes[id] = b
				v.noLT[id] = !strings.ContainsRune(string(b), '<')
			}
		}
		v.g = grammar.NewVocab(v.bytes, e.eos)
		e.voc = v
	})
	return e.voc
}

// Generate implements worker.Engine: it runs job and calls emit for every
// delta, then once with the Usage. Errors in the request are returned as
// *openai.Error (400 naming the parameter) before any event.
func (e *Runner) Generate(ctx context.Context, j *job.Job, emit func(*job.Event) error) error {
	return e.GenerateResume(ctx, j, nil, func(ev *job.Event, _ []int) error { return emit(ev) })
}

// GenerateResume implements worker.ResumeEngine: Generate continuing from r
// (nil: from scratch), reporting with every event the ids of the generated
// tokens behind it.
//
// r.Tokens[i] are the tokens choice i already generated and whose text the
// client already has. They are prefilled and replayed silently through the
// sampler steps, constraints and output parsers, so the continuation is
// what the first worker would have produced (same seed, same step
// numbers); events carry only new text. Usage counts all tokens.
//
// Every generated token of a choice is reported
// exactly once, in order: a token goes with the first event emitted after
// it entered the output pipeline (detokenizer, stop strings, reasoning and
// tool-call parsers), so ids whose text is held back ride on the event that
// finally carries text, and the ids delivered up to an event are exactly the
// tokens whose processing produced the text delivered so far. Resuming from
// them replays those tokens silently through the same pipeline, which
// restores any held-back text, so the continuation is the uninterrupted
// run's remainder. The EOS (or the token that completed a constraint) goes
// with the choice's last event; resumed tokens, the role event and the usage
// event carry none. A token that a constraint put in place of a sampled EOS
// is reported as -1-id (see substituted): the values are for Resume, not
// for display.
func (e *Runner) GenerateResume(ctx context.Context, j *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error {
	select {
	case <-e.quit:
		return openai.Unavailable("model %s is shutting down", e.cfg.ModelName)
	default:
	}
	if j.Kind == job.KindEmbedding {
		return e.embed(ctx, j, func(ev *job.Event) error { return emit(ev, nil) }) // embed.go; nothing to resume
	}
	p, oe := e.plan(j)
	if oe != nil {
		return oe
	}
	e.recordKeys(j)
	if r != nil {
		if len(r.Tokens) > p.choices() {
			return openai.InvalidRequest("n", "resume has %d choices, the request %d", len(r.Tokens), p.choices())
		}
		if p.keep > 0 && slices.ContainsFunc(r.Tokens, func(t []int) bool { return len(t) > 0 }) {
			// The tokens are of returned choices, and which candidate each
			// was is not carried over; nothing is sent before the selection
			// is complete, so this is a failover during that last instant.
			return openai.Unavailable("a best_of selection already partly sent cannot be resumed")
		}
		p.resume = r.Tokens
		for i, toks := range r.Tokens {
			ids, _ := decodeResumed(toks)
			for _, id := range ids {
				if id >= e.model.VocabSize() {
					return openai.InvalidRequest("", "resume token id %d outside the vocabulary", id)
				}
			}
			if len(p.prompt(i).ids)+len(toks) >= e.maxCtx {
				return openai.InvalidRequest("", "resume: prompt and generated tokens fill the context")
			}
		}
	}
	var mu sync.Mutex
	safeEmit := func(ev *job.Event, tokens []int) error {
		mu.Lock()
		defer mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
		return emit(ev, tokens)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]choiceResult, p.choices())
	errs := make([]error, p.choices())
	var wg sync.WaitGroup
	emitChoice := safeEmit
	var held *bestOf
	if p.keep > 0 {
		held = newBestOf(p)
		emitChoice = held.hold
	}
	for i := range p.choices() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.runChoice(ctx, p, i, emitChoice)
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	// Report the cause, not the cancellations it caused in sibling choices.
	var first error
	for _, err := range errs {
		if err != nil && (first == nil || errors.Is(first, context.Canceled) && !errors.Is(err, context.Canceled)) {
			first = err
		}
	}
	if first != nil {
		return first
	}
	if held != nil {
		if err := held.release(results, safeEmit); err != nil {
			return err
		}
	}
	// Each prompt counts once, however many choices it has; its cached
	// positions are those its first choice found.
	u := &openai.Usage{PromptTokensDetails: &openai.PromptTokensDetails{}}
	for k, pr := range p.prompts {
		u.PromptTokens += len(pr.ids)
		u.PromptTokensDetails.CachedTokens += min(results[k*p.n].cached, len(pr.ids))
	}
	reasoning := 0
	for _, r := range results { // every best_of candidate, as OpenAI bills them
		u.CompletionTokens += r.tokens
		reasoning += r.reasoningTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if p.kind == job.KindChat {
		u.CompletionTokensDetails = &openai.CompletionTokensDetails{ReasoningTokens: reasoning}
	}
	return safeEmit(&job.Event{Usage: u}, nil)
}

// newSeed is the seed of a request without one.
func newSeed() uint64 { return rand.Uint64() }
