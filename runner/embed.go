package runner

// Embeddings (job.KindEmbedding), for Qwen3-Embedding style checkpoints:
// every input is tokenized as the reference tokenizer does it (texts get the
// special tokens of tokenizer.json's post-processor: Qwen3-Embedding's
// TemplateProcessing appends <|endoftext|>; token-id inputs are used as
// given, as vLLM does), run through engine.Model.Embed, and pooled as
// Qwen3-Embedding and sentence-transformers do: the final-normed hidden
// state of the last token, L2-normalised. `dimensions` (Matryoshka) keeps the
// first d values and normalises again (vLLM's pooler: truncate, then
// normalise; the same as normalising the truncated full vector).
//
// Inputs are batched: each pass puts up to PrefillChunk tokens of as many
// inputs as fit into MaxBatchTokens through one Embed call; a long input
// continues over several passes in its own cache. Embedding passes take the
// model's lock between the scheduler's generation passes; their caches are
// per-sequence (outside the paged KV pool) and freed as soon as an input is
// done.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/gguf"
	"github.com/macpool/macpool/job"
)

// maxVectorValuesPerEvent bounds one event's payload (~12 bytes of JSON per
// value, far below NATS's default 1 MiB message limit).
const maxVectorValuesPerEvent = 32 << 10

// embedState is the Engine's embedding state: the special tokens added
// around texts, read once.
type embedState struct {
	once           sync.Once
	prefix, suffix []int
}

// embedItem is one input on its way through the passes.
type embedItem struct {
	index  int
	tokens []int
	done   int // tokens already in cache
	cache  *engine.Cache
	id     uint64 // its sequence id on a pipeline's stages (0: none yet)
}

// embed answers an embedding job: one or more events with Embeddings, then
// one with Usage. Request errors are *openai.Error (400 naming the
// parameter) before any event.
func (e *Runner) embed(ctx context.Context, j *job.Job, emit func(*job.Event) error) error {
	req := j.Embedding
	if req == nil {
		return openai.InvalidRequest("input", "embedding job without an embedding request")
	}
	if !e.model.CanEmbed() {
		return openai.InvalidRequest("model", "model %s (%s) cannot compute embeddings", e.cfg.ModelName, e.model.Config().ModelType)
	}
	hidden := e.model.HiddenSize()
	dims := hidden
	if req.Dimensions != nil {
		dims = *req.Dimensions
		if dims < 1 || dims > hidden {
			return openai.InvalidRequest("dimensions", "dimensions must be between 1 and %d (the model's hidden size), got %d", hidden, dims)
		}
	}
	n := req.Input.Len()
	if n == 0 {
		return openai.InvalidRequest("input", "input must not be empty")
	}
	if n > openai.MaxEmbeddingInputs {
		return openai.InvalidRequest("input", "input has %d items; at most %d are allowed", n, openai.MaxEmbeddingInputs)
	}
	items := make([]*embedItem, 0, n)
	vocab := e.model.VocabSize()
	prefix, suffix := e.embedSpecialTokens()
	promptTokens := 0
	for i := 0; i < n; i++ {
		var ids []int
		if i < len(req.Input.Texts) {
			ids = append(append(append([]int(nil), prefix...), e.tok.Encode(req.Input.Texts[i])...), suffix...)
		} else {
			ids = req.Input.Tokens[i-len(req.Input.Texts)]
			for _, id := range ids {
				if id < 0 || id >= vocab {
					return openai.InvalidRequest("input", "input[%d] has token id %d outside the vocabulary [0, %d)", i, id, vocab)
				}
			}
		}
		switch {
		case len(ids) == 0:
			return openai.InvalidRequest("input", "input[%d] has no tokens", i)
		case len(ids) > e.maxCtx:
			return openai.InvalidRequest("input", "input[%d] has %d tokens; this model's maximum context length is %d tokens", i, len(ids), e.maxCtx)
		}
		promptTokens += len(ids)
		items = append(items, &embedItem{index: i, tokens: ids})
	}
	defer func() {
		for _, it := range items {
			if it.cache != nil {
				it.cache.Free()
				e.embedForget(it)
			}
		}
	}()

	pending := items
	for len(pending) > 0 {
		select {
		case <-e.quit:
			return openai.Unavailable("model %s is shutting down", e.cfg.ModelName)
		default:
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// Started inputs stay at the front of pending, so they finish first.
		budget := e.cfg.MaxBatchTokens
		var batch []*embedItem
		var seqs []engine.Seq
		for _, it := range pending {
			if budget == 0 {
				break
			}
			take := min(len(it.tokens)-it.done, e.cfg.PrefillChunk, budget)
			if it.cache == nil {
				c, err := e.model.NewCache()
				if err != nil {
					return fmt.Errorf("embed: %w", err)
				}
				it.cache = c
			}
			batch = append(batch, it)
			seqs = append(seqs, engine.Seq{Cache: it.cache, Tokens: it.tokens[it.done : it.done+take]})
			budget -= take
		}
		out, err := e.embedPass(ctx, batch, seqs)
		if err != nil {
			return fmt.Errorf("embed: %w", err)
		}
		e.passes.Add(1)
		var vecs []job.EmbeddingVector
		values := 0
		for i, it := range batch {
			it.done += len(seqs[i].Tokens)
			if it.done < len(it.tokens) {
				continue
			}
			it.cache.Free()
			it.cache = nil
			e.embedForget(it)
			if values+dims > maxVectorValuesPerEvent && len(vecs) > 0 {
				if err := emit(&job.Event{Embeddings: vecs}); err != nil {
					return err
				}
				vecs, values = nil, 0
			}
			vecs = append(vecs, job.EmbeddingVector{Index: it.index, Vector: poolVector(out[i], dims)})
			values += dims
		}
		if len(vecs) > 0 {
			if err := emit(&job.Event{Embeddings: vecs}); err != nil {
				return err
			}
		}
		rest := pending[:0:0]
		for _, it := range pending {
			if it.done < len(it.tokens) {
				rest = append(rest, it)
			}
		}
		pending = rest
	}
	return emit(&job.Event{Usage: &openai.Usage{PromptTokens: promptTokens, TotalTokens: promptTokens}})
}

// embedPass runs one embedding pass over seqs (the caches of batch's
// items): on the model, or on a pipelined model (Config.Forward: the
// runner's model is the first stage) down the stages as a pass of
// PassSeq.Embed sequences, whose last stage returns the final-normed
// hidden states (engine.Model.EmbedStage) — the whole model's vectors bit
// for bit.
func (e *Runner) embedPass(ctx context.Context, batch []*embedItem, seqs []engine.Seq) ([][]float32, error) {
	if e.cfg.Forward == nil {
		return e.model.Embed(ctx, seqs)
	}
	pass := make([]PassSeq, len(seqs))
	for i, it := range batch {
		if it.id == 0 {
			it.id = e.seqIDs.Add(1)
		}
		pass[i] = PassSeq{Seq: seqs[i], ID: it.id, Embed: true}
	}
	rows, _, err := e.cfg.Forward.Forward(ctx, pass)
	if err != nil {
		return nil, err
	}
	H := e.model.HiddenSize()
	for i, r := range rows {
		if len(r) < H {
			return nil, fmt.Errorf("pipeline returned %d values for input %d, want the hidden size %d", len(r), batch[i].index, H)
		}
		rows[i] = r[:H:H]
	}
	return rows, nil
}

// embedForget frees an item's caches on a pipeline's other stages.
func (e *Runner) embedForget(it *embedItem) {
	if e.cfg.Forward != nil && it.id != 0 {
		e.cfg.Forward.Forget(it.id)
		it.id = 0
	}
}

// poolVector keeps the first dims values of the last token's hidden state
// and L2-normalises them (in float64; a zero vector stays zero).
func poolVector(h []float32, dims int) []float32 {
	v := h[:dims]
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	out := make([]float32, dims)
	if ss == 0 {
		return out
	}
	inv := 1 / math.Sqrt(ss)
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out
}

// embedSpecialTokens are the ids the reference tokenizer adds around a text
// (add_special_tokens=True), read once: from tokenizer.json's
// post_processor (TemplateProcessing, possibly inside a Sequence), or from a
// GGUF file's tokenizer.ggml.add_bos_token / add_eos_token.
func (e *Runner) embedSpecialTokens() (prefix, suffix []int) {
	e.emb.once.Do(func() {
		dir := e.cfg.ModelDir
		if checkpoint.IsGGUF(dir) {
			e.emb.prefix, e.emb.suffix = ggufSpecialTokens(dir)
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			return
		}
		var p, s []int
		p, s, err = postProcessorTokens(b)
		if err != nil {
			e.log.Warn("tokenizer.json post_processor not understood: texts are embedded without added special tokens", "err", err)
			return
		}
		e.emb.prefix, e.emb.suffix = p, s
	})
	return e.emb.prefix, e.emb.suffix
}

func ggufSpecialTokens(path string) (prefix, suffix []int) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	if add, _ := f.Bool("tokenizer.ggml.add_bos_token"); add {
		if id, ok := f.Int("tokenizer.ggml.bos_token_id"); ok {
			prefix = []int{id}
		}
	}
	if add, _ := f.Bool("tokenizer.ggml.add_eos_token"); add {
		if id, ok := f.Int("tokenizer.ggml.eos_token_id"); ok {
			suffix = []int{id}
		}
	}
	return prefix, suffix
}

// postProcessor is the part of a Hugging Face tokenizers post_processor
// that adds special tokens to a single sequence.
type postProcessor struct {
	Type       string          `json:"type"`
	Processors []postProcessor `json:"processors"` // type Sequence
	Single     []struct {
		Sequence     *struct{ ID string } `json:"Sequence"`
		SpecialToken *struct{ ID string } `json:"SpecialToken"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int `json:"ids"`
	} `json:"special_tokens"`
}

// postProcessorTokens returns the ids that tokenizer.json's post_processor
// puts before and after a single sequence ($A).
func postProcessorTokens(tokenizerJSON []byte) (prefix, suffix []int, err error) {
	var doc struct {
		PostProcessor *postProcessor `json:"post_processor"`
	}
	if err := json.Unmarshal(tokenizerJSON, &doc); err != nil {
		return nil, nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if doc.PostProcessor == nil {
		return nil, nil, nil
	}
	return doc.PostProcessor.tokens()
}

func (p *postProcessor) tokens() (prefix, suffix []int, err error) {
	switch p.Type {
	case "Sequence":
		for i := range p.Processors {
			pp, ss, err := p.Processors[i].tokens()
			if err != nil {
				return nil, nil, err
			}
			prefix, suffix = append(prefix, pp...), append(suffix, ss...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		seenA := false
		for _, piece := range p.Single {
			switch {
			case piece.Sequence != nil:
				seenA = true
			case piece.SpecialToken != nil:
				st, ok := p.SpecialTokens[piece.SpecialToken.ID]
				if !ok || len(st.IDs) == 0 {
					return nil, nil, fmt.Errorf("post_processor: special token %q has no ids", piece.SpecialToken.ID)
				}
				if seenA {
					suffix = append(suffix, st.IDs...)
				} else {
					prefix = append(prefix, st.IDs...)
				}
			}
		}
		return prefix, suffix, nil
	case "BertProcessing", "RobertaProcessing":
		return nil, nil, fmt.Errorf("post_processor type %s is not supported", p.Type)
	}
	return nil, nil, nil // ByteLevel and others add no tokens
}
