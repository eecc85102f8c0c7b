// Package testmodel writes a tiny random-weight Qwen3 checkpoint folder in
// the Hugging Face layout (config.json, generation_config.json,
// model.safetensors) together with the real Qwen3 tokenizer and chat
// template, so that tests and demos can run the whole serving path
// (template → tokenizer → engine → sampling → detokenizer) in well under a
// second per request. The weights are random (seeded): the text is
// gibberish, but it is real Qwen3 tokens that detokenize.
package testmodel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/safetensors"
	"github.com/macpool/macpool/engine/tensor"
)

// VocabSize is the embedding size of the written model (Qwen3's 151936;
// the tokenizer knows 151669 of those ids).
const VocabSize = 151936

// Options shape the model. Zero values take the defaults below.
type Options struct {
	Seed         uint64 // weight seed (default 1)
	HiddenSize   int    // default 32
	Layers       int    // default 2
	Heads        int    // default 2
	KVHeads      int    // default 1
	HeadDim      int    // default 16
	Intermediate int    // default 64
	MaxPositions int    // max_position_embeddings, default 4096
	// Scale is the standard deviation of the random matrices (default 0.5:
	// large enough that the output depends visibly on the input).
	Scale float64
	// TokenizerDir holds tokenizer.json and tokenizer_config.json; default
	// testdata/tokenizers/qwen3 of this repository.
	TokenizerDir string
	// ChatTemplate, if set, is written as chat_template.jinja and overrides
	// the template in tokenizer_config.json (e.g. the Qwen3.5 or
	// Qwen3-Coder template from testdata/templates for XML tool calls).
	ChatTemplate string
	// EOSBias, if > 0, scales the embedding row of <|im_end|> (tied to the
	// output head) by this factor, so that its logit dwarfs the others
	// wherever it is positive: the random model then ends its turn within
	// a few tokens instead of running to max_tokens. Agents (Codex, Claude
	// Code) treat a turn cut by the token limit as an error, so an agent
	// run on a random-weight model needs turns that end.
	EOSBias float64
}

func (o *Options) defaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	def(&o.HiddenSize, 32)
	def(&o.Layers, 2)
	def(&o.Heads, 2)
	def(&o.KVHeads, 1)
	def(&o.HeadDim, 16)
	def(&o.Intermediate, 64)
	def(&o.MaxPositions, 4096)
	if o.Scale == 0 {
		o.Scale = 0.5
	}
	if o.TokenizerDir == "" {
		o.TokenizerDir = filepath.Join(RepoRoot(), "testdata", "tokenizers", "qwen3")
	}
}

// RepoRoot is the root of this source tree (found from this file's path),
// for locating testdata.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "."
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Template reads testdata/templates/<name> of this repository (e.g.
// "Qwen3.5-4B.jinja", "Qwen3-Coder.jinja").
func Template(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "testdata", "templates", name))
	return string(b), err
}

// EOS ids written to config.json and generation_config.json
// (<|im_end|>, <|endoftext|>).
var EOS = []int{151645, 151643}

// Write creates dir (if needed) and writes the checkpoint into it.
func Write(dir string, opts Options) error {
	opts.defaults()
	if opts.Heads%opts.KVHeads != 0 {
		return fmt.Errorf("testmodel: heads %d must be a multiple of kv heads %d", opts.Heads, opts.KVHeads)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("testmodel: %w", err)
	}
	cfg := map[string]any{
		"architectures":           []string{"Qwen3ForCausalLM"},
		"model_type":              "qwen3",
		"attention_bias":          false,
		"bos_token_id":            nil,
		"eos_token_id":            EOS,
		"head_dim":                opts.HeadDim,
		"hidden_act":              "silu",
		"hidden_size":             opts.HiddenSize,
		"intermediate_size":       opts.Intermediate,
		"max_position_embeddings": opts.MaxPositions,
		"num_attention_heads":     opts.Heads,
		"num_hidden_layers":       opts.Layers,
		"num_key_value_heads":     opts.KVHeads,
		"rms_norm_eps":            1e-6,
		"rope_theta":              1000000.0,
		"tie_word_embeddings":     true,
		"torch_dtype":             "bfloat16",
		"vocab_size":              VocabSize,
	}
	gen := map[string]any{"eos_token_id": EOS, "do_sample": true, "temperature": 0.6, "top_p": 0.95, "top_k": 20}
	cfgJSON, _ := json.MarshalIndent(cfg, "", "  ")
	genJSON, _ := json.MarshalIndent(gen, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfgJSON, 0o644); err != nil {
		return fmt.Errorf("testmodel: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), genJSON, 0o644); err != nil {
		return fmt.Errorf("testmodel: %w", err)
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := copyFile(filepath.Join(opts.TokenizerDir, name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("testmodel: %w", err)
		}
	}
	tmplPath := filepath.Join(dir, "chat_template.jinja")
	if opts.ChatTemplate != "" {
		if err := os.WriteFile(tmplPath, []byte(opts.ChatTemplate), 0o644); err != nil {
			return fmt.Errorf("testmodel: %w", err)
		}
	} else if err := os.Remove(tmplPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("testmodel: %w", err)
	}

	c, err := checkpoint.ParseConfig("config.json", cfgJSON, genJSON)
	if err != nil {
		return fmt.Errorf("testmodel: %w", err)
	}
	shapes := c.TensorShapes()
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	rng := rand.New(rand.NewPCG(opts.Seed, 0x7e57))
	var ts []safetensors.WriteTensor
	for _, n := range names {
		shape := shapes[n]
		numel := 1
		for _, d := range shape {
			numel *= d
		}
		data := make([]byte, 2*numel)
		norm := strings.HasSuffix(n, "norm.weight")
		// Rows [eosLo, eosHi) of the tied embedding are <|im_end|>'s.
		eosLo, eosHi := -1, -1
		if n == "model.embed_tokens.weight" && opts.EOSBias > 0 && len(shape) == 2 {
			eosLo, eosHi = EOS[0]*shape[1], (EOS[0]+1)*shape[1]
		}
		for i := 0; i < numel; i++ {
			v := rng.NormFloat64() * opts.Scale
			if norm {
				v = 1 + 0.1*v
			}
			if i >= eosLo && i < eosHi {
				v *= opts.EOSBias
			}
			binary.LittleEndian.PutUint16(data[2*i:], tensor.F32ToBF16(float32(v)))
		}
		ts = append(ts, safetensors.WriteTensor{Name: n, DType: "BF16", Shape: shape, Data: data})
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("testmodel: %w", err)
	}
	return nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
