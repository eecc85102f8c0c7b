// Package sample picks the next token from a model's logits: greedy
// (temperature 0), temperature, top-k, top-p, min-p, repetition penalty
// (Hugging Face style), presence and frequency penalties (OpenAI style),
// logit bias, and a seeded random draw.
//
// The random draw for step i depends only on (Params.Seed, i): it comes from a
// counter-based generator (splitmix64 of seed and step), not from a stream
// whose state advances. A generation stopped on one machine and continued on
// another with the same prompt, the same tokens so far and the same seed
// therefore draws the same uniform number at every step. The probabilities it
// is compared against are computed in float64 in a fixed order; they can differ
// in the last bit only between CPU architectures whose math.Exp differ
// (and of course if the logits differ), which changes a choice only when the
// draw lands within ~1e-15 of a boundary.
package sample

import (
	"fmt"
	"math"
	"slices"
)

// Params configures a Sampler. The zero value is greedy decoding with no
// penalties. Zero means "off" for TopP, MinP, TopK and RepetitionPenalty (the
// neutral values 1, 0, 0 and 1).
type Params struct {
	Temperature float32 // 0 = greedy; otherwise in (0, 2]
	TopP        float32 // nucleus mass in (0, 1]; 0 = off
	MinP        float32 // in [0, 1]: drop tokens below MinP × max probability; 0 = off
	TopK        int     // keep the K most likely tokens; 0 or -1 = off

	RepetitionPenalty float32 // HF style over prompt+generated, in (0, 2]; 0 or 1 = off
	PresencePenalty   float32 // OpenAI style over generated tokens, in [-2, 2]
	FrequencyPenalty  float32 // OpenAI style over generated tokens, in [-2, 2]

	LogitBias map[int]float32 // token id → bias added to its logit, each in [-100, 100]
	Seed      uint64
}

// DefaultParams returns greedy decoding with no penalties.
func DefaultParams() Params { return Params{} }

// Validate reports the first parameter outside its range; the message names it.
func (p Params) Validate() error {
	bad := func(v float32) bool { return math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) }
	switch {
	case bad(p.Temperature) || p.Temperature < 0 || p.Temperature > 2:
		return fmt.Errorf("temperature must be in [0, 2], got %v", p.Temperature)
	case bad(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("top_p must be in (0, 1], got %v", p.TopP)
	case bad(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return fmt.Errorf("min_p must be in [0, 1], got %v", p.MinP)
	case p.TopK < -1:
		return fmt.Errorf("top_k must be -1, 0 (off) or positive, got %d", p.TopK)
	case bad(p.RepetitionPenalty) || p.RepetitionPenalty < 0 || p.RepetitionPenalty > 2:
		return fmt.Errorf("repetition_penalty must be in (0, 2], got %v", p.RepetitionPenalty)
	case bad(p.PresencePenalty) || p.PresencePenalty < -2 || p.PresencePenalty > 2:
		return fmt.Errorf("presence_penalty must be in [-2, 2], got %v", p.PresencePenalty)
	case bad(p.FrequencyPenalty) || p.FrequencyPenalty < -2 || p.FrequencyPenalty > 2:
		return fmt.Errorf("frequency_penalty must be in [-2, 2], got %v", p.FrequencyPenalty)
	}
	for id, b := range p.LogitBias {
		if id < 0 {
			return fmt.Errorf("logit_bias token id must be >= 0, got %d", id)
		}
		if bad(b) || b < -100 || b > 100 {
			return fmt.Errorf("logit_bias for token %d must be in [-100, 100], got %v", id, b)
		}
	}
	return nil
}

// Sampler applies Params to one sequence's logits. It keeps scratch buffers,
// so a Sampler must not be used by two goroutines at once; it holds no state
// that affects results between calls.
type Sampler struct {
	p    Params
	work []float64 // processed logits, then probabilities
	vals []float64 // scratch for top-k selection
	idx  []int     // candidate token ids
	// Per-token marks for penalties, valid where stamp[id] == epoch, so
	// that no per-call clearing of a vocabulary-sized array is needed.
	stamp []uint32
	count []int32
	epoch uint32
	ids   []int // ids marked in this call
}

// New validates p and returns a Sampler.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{p: p}, nil
}

// Params returns the sampler's parameters.
func (s *Sampler) Params() Params { return s.p }

// TokenLogprob is one token with its log-probability.
type TokenLogprob struct {
	ID      int
	Logprob float32
}

// Choice is a sampled token with log-probabilities for OpenAI "logprobs".
//
// Logprobs are the log-softmax of the model's raw logits, before penalties,
// logit bias, temperature and the top-k/top-p/min-p filters: this is what vLLM
// V1 reports by default (logprobs_mode "raw_logprobs") and what OpenAI
// documents as the model's log probability of the token. A token removed by a
// filter therefore still has a finite logprob.
type Choice struct {
	ID      int
	Logprob float32        // of ID
	Top     []TokenLogprob // the TopN most likely tokens, most likely first (ties: lower id first)
}

// Sample returns the next token id for logits (one float per vocabulary id;
// not modified). prompt and generated are the token ids so far; the step
// number is len(generated).
func (s *Sampler) Sample(logits []float32, prompt, generated []int) int {
	return s.pick(logits, prompt, generated)
}

// SampleLogprobs is Sample plus the log-probabilities of the chosen token and
// the topN most likely alternatives (see Choice).
func (s *Sampler) SampleLogprobs(logits []float32, prompt, generated []int, topN int) Choice {
	id := s.pick(logits, prompt, generated)
	return Logprobs(logits, id, topN)
}

// Logprobs computes the raw log-softmax of logits and returns the logprob of
// id and the topN most likely tokens.
func Logprobs(logits []float32, id, topN int) Choice {
	maxv := math.Inf(-1)
	for _, v := range logits {
		if float64(v) > maxv {
			maxv = float64(v)
		}
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - maxv)
	}
	lse := maxv + math.Log(sum)
	c := Choice{ID: id, Logprob: float32(math.Inf(-1))}
	if id >= 0 && id < len(logits) {
		c.Logprob = float32(float64(logits[id]) - lse)
	}
	if topN <= 0 {
		return c
	}
	topN = min(topN, len(logits))
	// Insertion into a short sorted list: O(vocab × topN) worst case but
	// O(vocab) in practice, topN being at most 20 for OpenAI.
	top := make([]int, 0, topN+1)
	for i, v := range logits {
		if len(top) == topN && v <= logits[top[len(top)-1]] {
			continue
		}
		j := len(top)
		for j > 0 && logits[top[j-1]] < v {
			j--
		}
		top = slices.Insert(top, j, i)
		if len(top) > topN {
			top = top[:topN]
		}
	}
	c.Top = make([]TokenLogprob, len(top))
	for k, i := range top {
		c.Top[k] = TokenLogprob{ID: i, Logprob: float32(float64(logits[i]) - lse)}
	}
	return c
}

func (s *Sampler) pick(logits []float32, prompt, generated []int) int {
	n := len(logits)
	if n == 0 {
		return -1
	}
	p := s.p
	w := slices.Grow(s.work[:0], n)[:n]
	s.work = w
	for i, v := range logits {
		w[i] = float64(v)
	}

	// Penalties and bias, in vLLM's order: repetition, then frequency and
	// presence, then logit bias.
	if rp := float64(p.RepetitionPenalty); rp != 0 && rp != 1 {
		s.mark(n)
		for _, ids := range [2][]int{prompt, generated} {
			for _, id := range ids {
				if id < 0 || id >= n || s.stamp[id] == s.epoch {
					continue
				}
				s.stamp[id] = s.epoch
				if w[id] > 0 {
					w[id] /= rp
				} else {
					w[id] *= rp
				}
			}
		}
	}
	if p.PresencePenalty != 0 || p.FrequencyPenalty != 0 {
		s.mark(n)
		s.ids = s.ids[:0]
		for _, id := range generated {
			if id < 0 || id >= n {
				continue
			}
			if s.stamp[id] != s.epoch {
				s.stamp[id], s.count[id] = s.epoch, 0
				s.ids = append(s.ids, id)
			}
			s.count[id]++
		}
		for _, id := range s.ids {
			w[id] -= float64(p.FrequencyPenalty)*float64(s.count[id]) + float64(p.PresencePenalty)
		}
	}
	for id, b := range p.LogitBias {
		if id < n {
			w[id] += float64(b)
		}
	}

	if p.Temperature == 0 {
		return argmax(w)
	}

	inv := 1 / float64(p.Temperature)
	for i := range w {
		w[i] *= inv
	}

	// Candidates: all ids, or the top-k.
	idx := s.idx[:0]
	if k := p.TopK; k > 0 && k < n {
		idx = s.topK(w, k, idx)
	} else {
		for i := range n {
			idx = append(idx, i)
		}
	}
	s.idx = idx

	// Softmax over the candidates (w becomes probabilities for them; others
	// are ignored from here on).
	maxv := math.Inf(-1)
	for _, i := range idx {
		maxv = max(maxv, w[i])
	}
	if math.IsInf(maxv, -1) || math.IsNaN(maxv) {
		return argmax(w)
	}
	var sum float64
	for _, i := range idx {
		e := math.Exp(w[i] - maxv)
		w[i] = e
		sum += e
	}
	pmax := 0.0
	for _, i := range idx {
		w[i] /= sum
		pmax = max(pmax, w[i])
	}

	if tp := float64(p.TopP); tp > 0 && tp < 1 {
		idx = topP(w, idx, tp, pmax)
	}
	if mp := float64(p.MinP); mp > 0 {
		cut := mp * pmax
		kept := idx[:0]
		for _, i := range idx {
			if w[i] >= cut {
				kept = append(kept, i)
			}
		}
		idx = kept
	}

	// Draw: walk the surviving candidates in increasing id order so that the
	// result does not depend on how they were selected.
	slices.Sort(idx)
	var total float64
	for _, i := range idx {
		total += w[i]
	}
	u := Uniform(p.Seed, uint64(len(generated))) * total
	var acc float64
	for _, i := range idx {
		acc += w[i]
		if u < acc {
			return i
		}
	}
	return idx[len(idx)-1]
}

// mark starts a new marking round over a vocabulary of n ids.
func (s *Sampler) mark(n int) {
	if len(s.stamp) < n {
		s.stamp = make([]uint32, n)
		s.count = make([]int32, n)
		s.epoch = 0
	}
	s.epoch++
	if s.epoch == 0 { // wrapped: old stamps could collide
		clear(s.stamp)
		s.epoch = 1
	}
}

// argmax returns the index of the largest value, the lowest index on ties.
func argmax(w []float64) int {
	best := 0
	for i, v := range w {
		if v > w[best] {
			best = i
		}
	}
	return best
}

// better orders tokens by value descending, then id ascending.
func better(w []float64, a, b int) int {
	switch {
	case w[a] > w[b]:
		return -1
	case w[a] < w[b]:
		return 1
	}
	return a - b
}

// topK appends to dst the k ids with the largest w (ties broken by lower id).
// It finds the k-th largest value by selection, O(n) on average, instead of
// sorting the vocabulary.
func (s *Sampler) topK(w []float64, k int, dst []int) []int {
	vals := append(s.vals[:0], w...)
	s.vals = vals
	thr := nthLargest(vals, k)
	above := 0
	for _, v := range w {
		if v > thr {
			above++
		}
	}
	ties := k - above // how many ids equal to thr to keep, lowest first
	for i, v := range w {
		switch {
		case v > thr:
			dst = append(dst, i)
		case v == thr && ties > 0:
			dst = append(dst, i)
			ties--
		}
	}
	return dst
}

// nthLargest returns the k-th largest value of vals (1-based), reordering vals.
func nthLargest(vals []float64, k int) float64 {
	lo, hi := 0, len(vals)-1
	target := k - 1
	for lo < hi {
		// Median of three as pivot; three-way partition handles runs of equal values.
		mid := lo + (hi-lo)/2
		a, b, c := vals[lo], vals[mid], vals[hi]
		pivot := max(min(a, b), min(max(a, b), c))
		lt, i, gt := lo, lo, hi
		for i <= gt {
			switch v := vals[i]; {
			case v > pivot:
				vals[lt], vals[i] = vals[i], vals[lt]
				lt++
				i++
			case v < pivot:
				vals[gt], vals[i] = vals[i], vals[gt]
				gt--
			default:
				i++
			}
		}
		switch {
		case target < lt:
			hi = lt - 1
		case target > gt:
			lo = gt + 1
		default:
			return pivot
		}
	}
	return vals[target]
}

// topP keeps the smallest set of most likely candidates whose mass reaches
// tp (always at least one). To avoid sorting the whole vocabulary it first
// finds a threshold t such that the tokens with probability >= t already hold
// mass >= tp: the nucleus is a prefix of that set, so only it is sorted.
func topP(w []float64, idx []int, tp, pmax float64) []int {
	t := pmax
	var cand []int
	for range 60 {
		cand = cand[:0]
		var mass float64
		for _, i := range idx {
			if w[i] >= t {
				cand = append(cand, i)
				mass += w[i]
			}
		}
		if mass >= tp {
			break
		}
		t /= 4
	}
	if t < pmax*math.Pow(0.25, 59) {
		cand = append(cand[:0], idx...)
	}
	slices.SortFunc(cand, func(a, b int) int { return better(w, a, b) })
	var cum float64
	for k, i := range cand {
		cum += w[i]
		if cum >= tp {
			cand = cand[:k+1]
			break
		}
	}
	return append(idx[:0], cand...)
}

// Uniform returns the random number in [0, 1) used at step of a generation
// seeded with seed. It is a pure function of (seed, step).
func Uniform(seed, step uint64) float64 {
	x := splitmix64(seed ^ splitmix64(step+0x632be59bd9b4e019))
	return float64(x>>11) * (1.0 / (1 << 53))
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
