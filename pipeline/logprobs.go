package pipeline

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/macpool/macpool/engine/sample"
	"github.com/macpool/macpool/runner"
)

// A sampled step that reports logprobs (or scores a best_of candidate) is
// drawn on the last stage like any sampled step, and the last stage
// computes its logprobs there (sample.Logprobs of the raw logits: the
// drawn token's and the TopLogprobs most likely ones'), so that a few
// numbers come back instead of the vocabulary-wide row of logits.

// sampleReq is a sampled sequence's entry in a data frame's payload, in
// frame order: its sampler's parameters and, when it reports logprobs, how
// many of the most likely tokens to report (nil: only the id comes back).
type sampleReq struct {
	sample.Params
	Logprobs *int `json:",omitempty"`
}

// wireChoice is a sample.Choice in a result frame's payload (one per
// sequence that asked, in frame order; its id is the sequence's token).
// Logprobs travel as float32 bits: exact, and -Inf survives.
type wireChoice struct {
	LP  uint32    `json:"lp"`
	Top []wireTop `json:"top,omitempty"`
}

type wireTop struct {
	ID int    `json:"id"`
	LP uint32 `json:"lp"`
}

func toWire(c sample.Choice) wireChoice {
	w := wireChoice{LP: math.Float32bits(c.Logprob)}
	for _, t := range c.Top {
		w.Top = append(w.Top, wireTop{ID: t.ID, LP: math.Float32bits(t.Logprob)})
	}
	return w
}

func (w wireChoice) choice(id int) sample.Choice {
	c := sample.Choice{ID: id, Logprob: math.Float32frombits(w.LP)}
	for _, t := range w.Top {
		c.Top = append(c.Top, sample.TokenLogprob{ID: t.ID, Logprob: math.Float32frombits(t.LP)})
	}
	return c
}

// fillChoices stores the result payload's logprobs in the pass's Choice
// slots (sampled sequences that asked, in order), toks being the drawn ids.
func fillChoices(payload []byte, pass []runner.PassSeq, toks []int) error {
	var want int
	for _, p := range pass {
		if p.Sample != nil && p.Choice != nil {
			want++
		}
	}
	if want == 0 {
		return nil
	}
	var ws []wireChoice
	if err := json.Unmarshal(payload, &ws); err != nil {
		return fmt.Errorf("logprobs from the last stage: %w", err)
	}
	if len(ws) != want {
		return fmt.Errorf("logprobs from the last stage: %d for %d sequences", len(ws), want)
	}
	k := 0
	for i, p := range pass {
		if p.Sample != nil && p.Choice != nil {
			*p.Choice = ws[k].choice(toks[i])
			k++
		}
	}
	return nil
}
