package moe

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

func TestRoute(t *testing.T) {
	tests := []struct {
		name      string
		logits    []float32
		k         int
		normalize bool
		wantIdx   []int
	}{
		{"distinct", []float32{0.1, 2, -1, 1.5}, 2, true, []int{1, 3}},
		{"ties go to the lower index", []float32{1, 3, 3, 0, 3}, 2, false, []int{1, 2}},
		{"all equal", []float32{0, 0, 0, 0}, 3, true, []int{0, 1, 2}},
		{"k equals n", []float32{-2, 5, 1}, 3, false, []int{1, 2, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx := make([]int, tc.k)
			w := make([]float32, tc.k)
			Route(tc.logits, tc.k, tc.normalize, idx, w)
			if !slices.Equal(idx, tc.wantIdx) {
				t.Fatalf("experts %v, want %v", idx, tc.wantIdx)
			}
			// Softmax probabilities computed in float64.
			var sum, sel float64
			for _, v := range tc.logits {
				sum += math.Exp(float64(v))
			}
			for _, e := range idx {
				sel += math.Exp(float64(tc.logits[e])) / sum
			}
			for s, e := range idx {
				want := math.Exp(float64(tc.logits[e])) / sum
				if tc.normalize {
					want /= sel
				}
				if math.Abs(float64(w[s])-want) > 1e-6 {
					t.Errorf("weight %d = %g, want %g", s, w[s], want)
				}
			}
		})
	}
}

func TestByExpert(t *testing.T) {
	r := Routing{K: 2, Experts: []int{3, 0, 0, 2, 3, 1}, Weights: make([]float32, 6)}
	got := r.ByExpert(5)
	want := []Assignment{
		{Expert: 0, Tokens: []int{0, 1}, Slots: []int{1, 0}},
		{Expert: 1, Tokens: []int{2}, Slots: []int{1}},
		{Expert: 2, Tokens: []int{1}, Slots: []int{1}},
		{Expert: 3, Tokens: []int{0, 2}, Slots: []int{0, 0}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d assignments, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Expert != want[i].Expert || !slices.Equal(got[i].Tokens, want[i].Tokens) || !slices.Equal(got[i].Slots, want[i].Slots) {
			t.Errorf("assignment %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestSwiGLUAndGate(t *testing.T) {
	h := make([]float32, 2)
	SwiGLU(h, []float32{1, -2}, []float32{3, 0.5})
	want := []float64{1 / (1 + math.Exp(-1)) * 3, -2 / (1 + math.Exp(2)) * 0.5}
	for i := range h {
		if math.Abs(float64(h[i])-want[i]) > 1e-6 {
			t.Errorf("swiglu[%d] = %g, want %g", i, h[i], want[i])
		}
	}
	if g := SharedGate(0); g != 0.5 {
		t.Errorf("SharedGate(0) = %g, want 0.5", g)
	}
}

// Route picks the same experts as a stable sort by descending probability, on random
// logits with many exact ties.
func TestRouteMatchesStableSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 500; trial++ {
		n := 1 + r.IntN(40)
		k := 1 + r.IntN(n)
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(r.IntN(5)) // few distinct values: ties
		}
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return logits[order[a]] > logits[order[b]] })
		idx, w := make([]int, k), make([]float32, k)
		Route(logits, k, true, idx, w)
		if !slices.Equal(idx, order[:k]) {
			t.Fatalf("logits %v k=%d: experts %v, want %v", logits, k, idx, order[:k])
		}
		var sum float64
		for _, v := range w {
			sum += float64(v)
		}
		if math.Abs(sum-1) > 1e-6 {
			t.Fatalf("normalised weights sum to %g", sum)
		}
	}
}

// topKScan is the selection Route made before topK: k scans for the largest remaining
// probability (the first of equal ones), the reference topK must match.
func topKScan(p []float32, idx []int, w []float32) {
	p = slices.Clone(p)
	for s := range idx {
		best := -1
		for e := range p {
			if p[e] < 0 {
				continue
			}
			if best < 0 || p[e] > p[best] {
				best = e
			}
		}
		idx[s], w[s] = best, p[best]
		p[best] = -1
	}
}

// TestTopKMatchesScan: topK chooses the experts and weights of k scans, bit for bit, on
// softmaxes of random logits (few distinct values: ties; 128 and 256 experts as the
// models have), k up to n, and on the all-NaN softmax of a NaN or infinite logit.
func TestTopKMatchesScan(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 2000; trial++ {
		n := []int{1 + r.IntN(40), 128, 256}[trial%3]
		k := 1 + r.IntN(min(n, 16))
		if trial%7 == 0 {
			k = n
		}
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(r.NormFloat64())
			if trial%2 == 0 {
				logits[i] = float32(r.IntN(4))
			}
		}
		switch trial % 11 {
		case 1:
			logits[r.IntN(n)] = float32(math.NaN())
		case 2:
			logits[r.IntN(n)] = float32(math.Inf(1))
		}
		p := softmaxInto(make([]float32, n), logits)
		gi, gw := make([]int, k), make([]float32, k)
		wi, ww := make([]int, k), make([]float32, k)
		topK(p, gi, gw)
		topKScan(p, wi, ww)
		if !slices.Equal(gi, wi) || !slices.EqualFunc(gw, ww, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
			t.Fatalf("n=%d k=%d logits %v: topK %v %v, scan %v %v", n, k, logits, gi, gw, wi, ww)
		}
	}
}

// BenchmarkRouteInto routes one token of qwen3.6-35b-a3b's router (256 experts, top 8).
func BenchmarkRouteInto(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	logits := make([]float32, 256)
	for i := range logits {
		logits[i] = float32(r.NormFloat64())
	}
	idx, w, p := make([]int, 8), make([]float32, 8), make([]float32, 256)
	for b.Loop() {
		RouteInto(logits, 8, true, idx, w, p)
	}
}
