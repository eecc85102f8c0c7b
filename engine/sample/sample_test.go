package sample

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func mustNew(t *testing.T, p Params) *Sampler {
	t.Helper()
	s, err := New(p)
	if err != nil {
		t.Fatalf("New(%+v): %v", p, err)
	}
	return s
}

// draws samples n times at distinct steps and returns how often each id came up.
func draws(t *testing.T, p Params, logits []float32, prompt []int, n int) []int {
	t.Helper()
	s := mustNew(t, p)
	counts := make([]int, len(logits))
	gen := make([]int, 0, n)
	for i := range n {
		// Steps differ through len(generated); the tokens themselves are
		// negative ids, which penalties ignore, so only the step changes.
		gen = gen[:i]
		id := s.Sample(logits, prompt, gen)
		counts[id]++
		gen = append(gen, -1)
	}
	return counts
}

func softmax(l []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range l {
		m = max(m, v)
	}
	out := make([]float64, len(l))
	var s float64
	for i, v := range l {
		out[i] = math.Exp(v - m)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

// checkDist asserts observed frequencies are within 5 standard deviations
// (binomial) of want, and zero where want is zero.
func checkDist(t *testing.T, counts []int, want []float64) {
	t.Helper()
	n := 0
	for _, c := range counts {
		n += c
	}
	for i, p := range want {
		got := float64(counts[i]) / float64(n)
		if p == 0 {
			if counts[i] != 0 {
				t.Errorf("token %d: drawn %d times, want never", i, counts[i])
			}
			continue
		}
		sd := math.Sqrt(p * (1 - p) / float64(n))
		if math.Abs(got-p) > 5*sd+1e-9 {
			t.Errorf("token %d: frequency %.4f, want %.4f ± %.4f", i, got, p, 5*sd)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{Temperature: -0.1}, "temperature must be in [0, 2]"},
		{Params{Temperature: 2.5}, "temperature must be in [0, 2]"},
		{Params{Temperature: float32(math.NaN())}, "temperature"},
		{Params{TopP: 1.5}, "top_p must be in (0, 1]"},
		{Params{MinP: -1}, "min_p must be in [0, 1]"},
		{Params{TopK: -2}, "top_k"},
		{Params{RepetitionPenalty: 3}, "repetition_penalty"},
		{Params{PresencePenalty: 2.1}, "presence_penalty must be in [-2, 2]"},
		{Params{FrequencyPenalty: -3}, "frequency_penalty must be in [-2, 2]"},
		{Params{LogitBias: map[int]float32{5: 101}}, "logit_bias for token 5"},
		{Params{LogitBias: map[int]float32{-1: 1}}, "logit_bias token id"},
	} {
		_, err := New(tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) error %v, want containing %q", tc.p, err, tc.want)
		}
	}
	ok := Params{Temperature: 2, TopP: 1, MinP: 1, TopK: -1, RepetitionPenalty: 2,
		PresencePenalty: -2, FrequencyPenalty: 2, LogitBias: map[int]float32{0: -100}}
	if _, err := New(ok); err != nil {
		t.Errorf("New(%+v): %v", ok, err)
	}
}

func TestGreedy(t *testing.T) {
	s := mustNew(t, Params{})
	logits := []float32{0.1, 3, -2, 3, 1}
	for step := range 5 {
		if got := s.Sample(logits, nil, make([]int, step)); got != 1 {
			t.Fatalf("greedy step %d: got %d, want 1 (first of the tied maxima)", step, got)
		}
	}
	orig := []float32{0.1, 3, -2, 3, 1}
	for i := range logits {
		if logits[i] != orig[i] {
			t.Fatalf("Sample modified its input: %v", logits)
		}
	}
}

func TestTemperatureDistribution(t *testing.T) {
	logits := []float32{1, 2, 0, -1, 2.5}
	for _, temp := range []float32{0.5, 1, 1.7} {
		l := make([]float64, len(logits))
		for i, v := range logits {
			l[i] = float64(v) / float64(temp)
		}
		counts := draws(t, Params{Temperature: temp, Seed: 42}, logits, nil, 20000)
		checkDist(t, counts, softmax(l))
	}
}

func TestTopK(t *testing.T) {
	logits := []float32{1, 2, 0, -1, 2.5}
	counts := draws(t, Params{Temperature: 1, TopK: 2, Seed: 7}, logits, nil, 20000)
	two := softmax([]float64{2, 2.5})
	checkDist(t, counts, []float64{0, two[0], 0, 0, two[1]})
}

func TestTopP(t *testing.T) {
	// Probabilities 0.5, 0.3, 0.15, 0.05 (as logs).
	logits := []float32{float32(math.Log(0.15)), float32(math.Log(0.5)), float32(math.Log(0.05)), float32(math.Log(0.3))}
	// top_p 0.7: 0.5 alone is short of 0.7, 0.5+0.3 reaches it: keep {1, 3}.
	counts := draws(t, Params{Temperature: 1, TopP: 0.7, Seed: 3}, logits, nil, 20000)
	checkDist(t, counts, []float64{0, 0.5 / 0.8, 0, 0.3 / 0.8})
	// top_p 0.4: the single most likely token.
	counts = draws(t, Params{Temperature: 1, TopP: 0.4, Seed: 3}, logits, nil, 500)
	checkDist(t, counts, []float64{0, 1, 0, 0})
}

func TestTopPLargeVocabulary(t *testing.T) {
	// A flat tail forces the threshold search to go down several times.
	logits := make([]float32, 5000)
	logits[17] = 5
	counts := draws(t, Params{Temperature: 1, TopP: 0.99, Seed: 1}, logits, nil, 2000)
	total := 0
	for _, c := range counts {
		total += c
	}
	if total != 2000 || counts[17] == 0 {
		t.Fatalf("bad draws: token 17 drawn %d times of %d", counts[17], total)
	}
}

func TestMinP(t *testing.T) {
	logits := []float32{float32(math.Log(0.15)), float32(math.Log(0.5)), float32(math.Log(0.05)), float32(math.Log(0.3))}
	// min_p 0.25: cut at 0.125 keeps {0, 1, 3}.
	counts := draws(t, Params{Temperature: 1, MinP: 0.25, Seed: 11}, logits, nil, 20000)
	checkDist(t, counts, []float64{0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95})
}

func TestRepetitionPenalty(t *testing.T) {
	// HF: positive logits divided, negative multiplied; each id once even if repeated.
	logits := []float32{2, 1.9, -1, -1.2}
	s := mustNew(t, Params{RepetitionPenalty: 1.5})
	if got := s.Sample(logits, []int{0, 0}, []int{0}); got != 1 {
		t.Errorf("got %d, want 1 (2/1.5 < 1.9)", got)
	}
	// -1*1.5 = -1.5 < -1.2 → with 0,1 heavily biased away, 3 wins.
	s = mustNew(t, Params{RepetitionPenalty: 1.5, LogitBias: map[int]float32{0: -100, 1: -100}})
	if got := s.Sample(logits, []int{2}, nil); got != 3 {
		t.Errorf("got %d, want 3", got)
	}
}

func TestPresenceFrequencyPenalty(t *testing.T) {
	logits := []float32{3, 2.5, 0}
	// Presence only counts generated tokens, not the prompt.
	s := mustNew(t, Params{PresencePenalty: 1})
	if got := s.Sample(logits, []int{0}, nil); got != 0 {
		t.Errorf("prompt tokens penalised: got %d, want 0", got)
	}
	if got := s.Sample(logits, nil, []int{0}); got != 1 {
		t.Errorf("presence: got %d, want 1", got)
	}
	// Frequency: 3 - 0.2×2 = 2.6 > 2.5; 3 - 0.2×3 = 2.4 < 2.5.
	s = mustNew(t, Params{FrequencyPenalty: 0.2})
	if got := s.Sample(logits, nil, []int{0, 0}); got != 0 {
		t.Errorf("frequency ×2: got %d, want 0", got)
	}
	if got := s.Sample(logits, nil, []int{0, 0, 0}); got != 1 {
		t.Errorf("frequency ×3: got %d, want 1", got)
	}
	// Negative penalties encourage repetition.
	s = mustNew(t, Params{PresencePenalty: -1})
	if got := s.Sample([]float32{3, 2.5, 2.2}, nil, []int{2, 2}); got != 2 {
		t.Errorf("negative presence: got %d, want 2", got)
	}
}

func TestLogitBias(t *testing.T) {
	logits := []float32{1, 0, 0}
	s := mustNew(t, Params{LogitBias: map[int]float32{2: 5, 99: 100}})
	if got := s.Sample(logits, nil, nil); got != 2 {
		t.Errorf("got %d, want 2", got)
	}
	counts := draws(t, Params{Temperature: 1, LogitBias: map[int]float32{0: -100}, Seed: 5}, logits, nil, 2000)
	if counts[0] != 0 {
		t.Errorf("token banned with -100 drawn %d times", counts[0])
	}
}

func TestReproducibleAcrossSamplers(t *testing.T) {
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*1.3)) * 3
	}
	p := Params{Temperature: 0.9, TopP: 0.95, TopK: 50, MinP: 0.01, RepetitionPenalty: 1.1,
		PresencePenalty: 0.3, FrequencyPenalty: 0.2, Seed: 0xfeed}
	prompt := []int{1, 2, 3}
	// Machine A generates 40 tokens.
	a := mustNew(t, p)
	var gen []int
	for range 40 {
		gen = append(gen, a.Sample(logits, prompt, gen))
	}
	// Machine B takes over at step 25 with a fresh sampler.
	b := mustNew(t, p)
	cont := append([]int(nil), gen[:25]...)
	for len(cont) < 40 {
		cont = append(cont, b.Sample(logits, prompt, cont))
	}
	for i := range gen {
		if gen[i] != cont[i] {
			t.Fatalf("step %d: machine A drew %d, machine B %d", i, gen[i], cont[i])
		}
	}
	// A different seed gives a different sequence.
	p.Seed++
	c := mustNew(t, p)
	var other []int
	for range 40 {
		other = append(other, c.Sample(logits, prompt, other))
	}
	same := 0
	for i := range gen {
		if gen[i] == other[i] {
			same++
		}
	}
	if same == len(gen) {
		t.Errorf("seeds %d and %d gave the same 40 tokens", p.Seed-1, p.Seed)
	}
}

func TestUniform(t *testing.T) {
	// Mean and pairwise independence over steps, roughly.
	const n = 100000
	var sum, sumSq float64
	buckets := make([]int, 10)
	for i := range n {
		u := Uniform(1234, uint64(i))
		if u < 0 || u >= 1 {
			t.Fatalf("Uniform out of [0,1): %v", u)
		}
		sum += u
		sumSq += u * u
		buckets[int(u*10)]++
	}
	if mean := sum / n; math.Abs(mean-0.5) > 0.005 {
		t.Errorf("mean %v, want 0.5", mean)
	}
	for b, c := range buckets {
		if math.Abs(float64(c)-n/10) > 5*math.Sqrt(n*0.1*0.9) {
			t.Errorf("bucket %d has %d draws, want ~%d", b, c, n/10)
		}
	}
	if Uniform(1, 5) != Uniform(1, 5) || Uniform(1, 5) == Uniform(2, 5) {
		t.Errorf("Uniform is not a function of (seed, step)")
	}
}

func TestLogprobs(t *testing.T) {
	logits := []float32{1, 3, 2, 3}
	// Penalties and filters must not change the reported (raw) logprobs.
	s := mustNew(t, Params{Temperature: 1.5, TopK: 1, LogitBias: map[int]float32{0: 50}})
	c := s.SampleLogprobs(logits, nil, nil, 3)
	if c.ID != 0 {
		t.Fatalf("chosen %d, want 0 (biased)", c.ID)
	}
	lse := math.Log(math.Exp(1) + 2*math.Exp(3) + math.Exp(2))
	if math.Abs(float64(c.Logprob)-(1-lse)) > 1e-6 {
		t.Errorf("logprob %v, want %v", c.Logprob, 1-lse)
	}
	wantIDs := []int{1, 3, 2}
	if len(c.Top) != 3 {
		t.Fatalf("top has %d entries, want 3", len(c.Top))
	}
	for k, tl := range c.Top {
		if tl.ID != wantIDs[k] {
			t.Errorf("top[%d] id %d, want %d", k, tl.ID, wantIDs[k])
		}
		if want := float64(logits[tl.ID]) - lse; math.Abs(float64(tl.Logprob)-want) > 1e-6 {
			t.Errorf("top[%d] logprob %v, want %v", k, tl.Logprob, want)
		}
	}
}

func BenchmarkSampleTopP(b *testing.B) {
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*0.7)) * 8
	}
	s, _ := New(Params{Temperature: 0.7, TopP: 0.8, TopK: 20, Seed: 1})
	s2, _ := New(Params{Temperature: 0.7, TopP: 0.95, Seed: 1})
	b.Run("topk20", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			s.Sample(logits, nil, make([]int, i%8))
		}
	})
	b.Run("toponly", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			s2.Sample(logits, nil, make([]int, i%8))
		}
	})
}

func TestTopKSelection(t *testing.T) {
	s := mustNew(t, Params{Temperature: 1, TopK: 3})
	// Ties at the threshold keep the lower ids.
	w := []float64{1, 5, 3, 3, 3, 0}
	got := s.topK(w, 3, nil)
	if want := []int{1, 2, 3}; !equalInts(got, want) {
		t.Errorf("topK ties: got %v, want %v", got, want)
	}
	// Against a sort on pseudo-random values with many duplicates.
	vals := make([]float64, 2000)
	for i := range vals {
		vals[i] = math.Floor(Uniform(9, uint64(i)) * 50)
	}
	for _, k := range []int{1, 2, 17, 500, 1999, 2000} {
		got := s.topK(vals, k, nil)
		sorted := make([]int, len(vals))
		for i := range sorted {
			sorted[i] = i
		}
		slices.SortFunc(sorted, func(a, b int) int { return better(vals, a, b) })
		want := slices.Clone(sorted[:k])
		slices.Sort(want)
		if !equalInts(got, want) {
			t.Errorf("k=%d: topK differs from sort", k)
		}
	}
}

func equalInts(a, b []int) bool { return slices.Equal(a, b) }
