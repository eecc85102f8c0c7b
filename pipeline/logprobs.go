package pipeline

import (
	"encoding/json"
	"fmt"
	"math"
	"sync"

	"github.com/macpool/macpool/engine/sample"
	"github.com/macpool/macpool/runner"
)

// The last stage draws the tokens of a data frame's sampled sequences (and
// their logprobs), each in its own goroutine: a draw over a vocabulary of
// 150k costs milliseconds (a softmax, the filters; the logprobs another
// log-softmax), and done one after the other for 8 sequences they held the
// ring turn (the head's runner, which drew them before, draws in each
// sequence's goroutine).
//
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

// serialDraws makes draw run the draws one after the other (benchmarks
// compare).
var serialDraws = false

// draw draws the next token of every sampled sequence of seqs (the stage's
// sts, their sampler parameters params in order, logits their rows): drawn
// is indexed like seqs, lps holds the logprobs of those that asked, in
// order.
func draw(seqs []Seq, sts []*stageSeq, params samplerParams, logits [][]float32) (drawn []int, lps []wireChoice, err error) {
	drawn = make([]int, len(seqs))
	top := make([]*int, len(seqs)) // the top-N of those that asked for logprobs
	var jobs []int                 // the sampled sequences
	k := 0
	for i, s := range seqs {
		if !s.Sample {
			continue
		}
		if k >= len(params) {
			return nil, nil, fmt.Errorf("sequence %d: no sampler parameters", s.ID)
		}
		st, sp := sts[i], params[k]
		k++
		if st.sampler == nil {
			if st.sampler, err = sample.New(sp.Params); err != nil {
				return nil, nil, err
			}
		}
		jobs, top[i] = append(jobs, i), sp.Logprobs
	}
	choices := make([]sample.Choice, len(seqs))
	one := func(i int) {
		st := sts[i]
		pe := min(seqs[i].PromptEnd, len(st.hist))
		drawn[i] = st.sampler.Sample(logits[i], st.hist[:pe], st.hist[pe:])
		if top[i] != nil {
			choices[i] = sample.Logprobs(logits[i], drawn[i], *top[i])
		}
	}
	if len(jobs) == 1 || serialDraws {
		for _, i := range jobs {
			one(i)
		}
	} else {
		var wg sync.WaitGroup
		for _, i := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				one(i)
			}()
		}
		wg.Wait()
	}
	for _, i := range jobs {
		if top[i] != nil {
			lps = append(lps, toWire(choices[i]))
		}
	}
	return drawn, lps, nil
}
