package gguf

import (
	"fmt"

	"github.com/macpool/macpool/engine/tokenizer"
)

// TokenizerSpec builds the tokenizer description from the tokenizer.ggml.*
// metadata (model "gpt2": byte-level BPE, as llama.cpp's converter writes
// Qwen vocabularies). Control tokens (type 3) become special added tokens and
// user-defined ones (type 4) plain added tokens, as tokenizer.New documents.
func (f *File) TokenizerSpec() (tokenizer.Spec, error) {
	var spec tokenizer.Spec
	model, ok := f.String("tokenizer.ggml.model")
	if !ok {
		return spec, fmt.Errorf("gguf %s: no tokenizer.ggml.model", f.path)
	}
	if model != "gpt2" {
		return spec, fmt.Errorf("gguf %s: tokenizer model %q is not supported (want gpt2, byte-level BPE)", f.path, model)
	}
	if spec.Tokens, ok = f.Strings("tokenizer.ggml.tokens"); !ok {
		return spec, fmt.Errorf("gguf %s: no tokenizer.ggml.tokens string array", f.path)
	}
	if v, present := f.meta["tokenizer.ggml.token_type"]; present {
		types, ok := v.([]int32)
		if !ok {
			return spec, fmt.Errorf("gguf %s: tokenizer.ggml.token_type is %T, want an int32 array", f.path, v)
		}
		if len(types) != len(spec.Tokens) {
			return spec, fmt.Errorf("gguf %s: %d token types for %d tokens", f.path, len(types), len(spec.Tokens))
		}
		spec.TokenTypes = types
	}
	if v, present := f.meta["tokenizer.ggml.merges"]; present {
		if spec.Merges, ok = v.([]string); !ok {
			return spec, fmt.Errorf("gguf %s: tokenizer.ggml.merges is %T, want a string array", f.path, v)
		}
	}
	spec.Pre, _ = f.String("tokenizer.ggml.pre")
	for _, id := range f.eosIDs() {
		if id < 0 || id >= len(spec.Tokens) {
			return spec, fmt.Errorf("gguf %s: eos token id %d outside the vocabulary of %d", f.path, id, len(spec.Tokens))
		}
		spec.EOSTokenIDs = append(spec.EOSTokenIDs, id)
	}
	return spec, nil
}

// Tokenizer builds the file's tokenizer (see TokenizerSpec).
func (f *File) Tokenizer() (*tokenizer.Tokenizer, error) {
	spec, err := f.TokenizerSpec()
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.New(spec)
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", f.path, err)
	}
	return tok, nil
}
