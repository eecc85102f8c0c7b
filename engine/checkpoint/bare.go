package checkpoint

import (
	"strings"

	"github.com/macpool/macpool/engine/safetensors"
)

// Base-model layout: a checkpoint saved from the decoder without its LM head
// (transformers' Qwen3Model / Qwen2Model, as the Qwen3-Embedding models are
// published) stores `embed_tokens.weight`, `layers.N.…` and `norm.weight`
// with no `model.` prefix and no `lm_head.weight`. Such names get the prefix
// so that the canonical names are the same as for the causal-LM layout; the
// missing head is the model code's business (an embedding model needs none).

// bareLayout reports whether set holds a prefix-less base-model checkpoint.
func bareLayout(set *safetensors.Set) bool {
	return set.Has("embed_tokens.weight") && !set.Has("model.embed_tokens.weight")
}

// bareModelPrefixes are the base-model tensor names that get `model.`.
var bareModelPrefixes = []string{"embed_tokens.", "layers.", "norm."}

// withModelPrefix gives a prefix-less base-model name its `model.` prefix.
func withModelPrefix(name string) string {
	for _, p := range bareModelPrefixes {
		if strings.HasPrefix(name, p) {
			return "model." + name
		}
	}
	return name
}
