package engine

import (
	"context"
	"fmt"
)

// Sampler picks the next token from a row of logits. step = len(generated).
// *sample.Sampler (engine/sample) implements it.
type Sampler interface {
	Sample(logits []float32, prompt, generated []int) int
}

// Greedy is the argmax sampler (lowest id on ties, as torch.argmax).
type Greedy struct{}

// Sample returns the index of the largest logit.
func (Greedy) Sample(logits []float32, _, _ []int) int { return Argmax(logits) }

// Argmax is the index of the largest value, the first one on ties.
func Argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// PrefillChunk is the most prompt tokens Generate runs in one Forward.
const PrefillChunk = 512

// Generate prefills prompt into a fresh cache, then decodes one token at a
// time with the KV cache until maxTokens tokens, a stop id (emitted, then
// generation ends) or ctx's end. emit receives every generated token as soon
// as it is sampled; an error from emit stops generation and is returned.
// It returns the generated tokens.
func (m *Model) Generate(ctx context.Context, prompt []int, maxTokens int, s Sampler, stop []int, emit func(tok int) error) ([]int, error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("generate: empty prompt")
	}
	if s == nil {
		s = Greedy{}
	}
	c, err := m.NewCache()
	if err != nil {
		return nil, err
	}
	defer c.Free()
	if maxTokens <= 0 {
		return nil, nil
	}
	// Long prompts are prefilled in pieces so activations stay bounded
	// (the logits of a piece's last token are only needed for the last).
	for len(prompt)-c.Len() > PrefillChunk {
		piece := prompt[c.Len() : c.Len()+PrefillChunk]
		if _, err := m.Forward(ctx, []Seq{{Cache: c, Tokens: piece}}); err != nil {
			return nil, err
		}
	}
	var out []int
	next := prompt[c.Len():]
	// Greedy decoding on a backend that takes the argmax itself (a GPU)
	// reads back one id per token instead of the logits.
	_, greedy := s.(Greedy)
	if _, ok := m.be.(ArgmaxOps); !ok {
		greedy = false
	}
	for len(out) < maxTokens {
		var tok int
		if greedy {
			_, toks, err := m.ForwardGreedy(ctx, []Seq{{Cache: c, Tokens: next, Greedy: true}})
			if err != nil {
				return out, err
			}
			tok = toks[0]
		} else {
			logits, err := m.Forward(ctx, []Seq{{Cache: c, Tokens: next}})
			if err != nil {
				return out, err
			}
			tok = s.Sample(logits[0], prompt, out)
		}
		out = append(out, tok)
		if emit != nil {
			if err := emit(tok); err != nil {
				return out, err
			}
		}
		for _, id := range stop {
			if tok == id {
				return out, nil
			}
		}
		next = []int{tok}
	}
	return out, nil
}
