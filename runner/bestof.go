package runner

import (
	"cmp"
	"math"
	"slices"
	"sync"

	"github.com/macpool/macpool/job"
)

// bestOf holds the events of a best_of request's candidates until all are
// done, then sends those of the keep best of each prompt, renumbered: the
// r-th best candidate of prompt k becomes choice k*keep+r. Candidates rank
// by mean token logprob (the sum over the generated tokens, the EOS
// included, divided by their number), higher first; ties keep the
// candidate order, so a seeded request answers the same every time.
type bestOf struct {
	p      *plan
	mu     sync.Mutex // hold runs on the choices' goroutines
	events [][]heldEvent
}

type heldEvent struct {
	ev  *job.Event
	ids []int
}

func newBestOf(p *plan) *bestOf {
	return &bestOf{p: p, events: make([][]heldEvent, p.choices())}
}

// hold is the emit function of every candidate: the event and its token
// ids are owned by the callee from here on.
func (b *bestOf) hold(ev *job.Event, ids []int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events[ev.Choice] = append(b.events[ev.Choice], heldEvent{ev, ids})
	return nil
}

// meanLogprob is a candidate's score; one without tokens ranks last.
func meanLogprob(r choiceResult) float64 {
	if r.tokens == 0 {
		return math.Inf(-1)
	}
	return r.logprob / float64(r.tokens)
}

// release sends the chosen candidates' events through emit, after every
// candidate finished (results[i] is candidate i's).
func (b *bestOf) release(results []choiceResult, emit func(*job.Event, []int) error) error {
	p := b.p
	for k := range p.prompts {
		cands := make([]int, p.n)
		for j := range cands {
			cands[j] = k*p.n + j
		}
		slices.SortStableFunc(cands, func(a, c int) int { return cmp.Compare(meanLogprob(results[c]), meanLogprob(results[a])) })
		for r, c := range cands[:p.keep] {
			for _, h := range b.events[c] {
				h.ev.Choice = k*p.keep + r
				if err := emit(h.ev, h.ids); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
