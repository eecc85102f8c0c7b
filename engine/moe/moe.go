// Package moe is the reference maths of the sparse mixture-of-experts block of the Qwen
// MoE models (Qwen3-MoE, Qwen3-Next, Qwen3.5/3.6-MoE) on float32 slices: router softmax
// over all experts, top-k with torch.topk's order, optional renormalisation, and the
// weighted combination of expert outputs. docs/hybrid-models.md gives the formulas.
package moe

import (
	"fmt"
	"math"
)

// Route turns one token's router logits (one per expert) into its top-k experts and their
// weights: p = softmax(logits) in float32, the k largest p in descending order (equal
// values: lower expert index first, which is what torch.topk gives on CPU), and, if
// normalize, w_i = p_i / sum_j p_j over the chosen k. idx and w must have length k.
func Route(logits []float32, k int, normalize bool, idx []int, w []float32) {
	RouteInto(logits, k, normalize, idx, w, make([]float32, len(logits)))
}

// RouteInto is Route with p, of at least len(logits) values, as its scratch (a batch
// routes its tokens without allocating).
func RouteInto(logits []float32, k int, normalize bool, idx []int, w []float32, p []float32) {
	n := len(logits)
	if k <= 0 || k > n || len(idx) < k || len(w) < k || len(p) < n {
		panic(fmt.Sprintf("moe: Route k=%d with %d experts", k, n))
	}
	p = softmaxInto(p[:n], logits)
	topK(p, idx[:k], w[:k])
	if normalize {
		var sum float32
		for s := 0; s < k; s++ {
			sum += w[s]
		}
		for s := 0; s < k; s++ {
			w[s] /= sum
		}
	}
}

// topK sets idx, w (length k) to the k largest of p in descending order, equal values
// lower index first. p is a softmax: all NaN (a NaN or infinite logit; then the experts
// 0..k-1 are chosen, as a scan for the largest does) or all finite. One pass keeps the
// best k sorted: a later expert enters only above a strictly smaller value, so of equal
// values the lower index stays first. Every token's routing costs one compare per expert
// where k scans over all of them cost k (~1% of a qwen3.6-35b-a3b prefill: 256 experts,
// k = 8).
func topK(p []float32, idx []int, w []float32) {
	k := len(idx)
	if p[0] != p[0] {
		for s := range idx {
			idx[s], w[s] = s, p[s]
		}
		return
	}
	have := 0
	for e, v := range p {
		if have == k && !(v > w[k-1]) {
			continue
		}
		j := min(have, k-1) // the slot it takes; a full list drops its last
		for ; j > 0 && w[j-1] < v; j-- {
			idx[j], w[j] = idx[j-1], w[j-1]
		}
		idx[j], w[j] = e, v
		have = min(have+1, k)
	}
}

// softmaxInto is torch's float32 softmax, exp(x - max) / sum, written to p (len(x)).
func softmaxInto(p, x []float32) []float32 {
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	var sum float32
	for i, v := range x {
		p[i] = float32(math.Exp(float64(v - m)))
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// Routing is the expert choice of a batch of tokens: token t uses experts
// Experts[t*K : (t+1)*K] with weights Weights[t*K : (t+1)*K].
type Routing struct {
	K       int
	Experts []int
	Weights []float32
}

// RouteBatch routes n tokens whose router logits are logits [n, numExperts].
func RouteBatch(logits []float32, n, numExperts, k int, normalize bool) Routing {
	r := Routing{K: k, Experts: make([]int, n*k), Weights: make([]float32, n*k)}
	for t := 0; t < n; t++ {
		Route(logits[t*numExperts:(t+1)*numExperts], k, normalize, r.Experts[t*k:(t+1)*k], r.Weights[t*k:(t+1)*k])
	}
	return r
}

// Assignment lists the tokens that one expert processes: Tokens[i] is a token index and
// Slots[i] its position (0..K-1) among that token's chosen experts.
type Assignment struct {
	Expert int
	Tokens []int
	Slots  []int
}

// ByExpert groups the routing by expert, in increasing expert order (the order in which
// transformers runs the experts), so each expert can run once over all its tokens.
// Experts with no tokens are left out.
func (r Routing) ByExpert(numExperts int) []Assignment {
	lists := make([]Assignment, numExperts)
	for i, e := range r.Experts {
		lists[e].Tokens = append(lists[e].Tokens, i/r.K)
		lists[e].Slots = append(lists[e].Slots, i%r.K)
	}
	var out []Assignment
	for e := range lists {
		if len(lists[e].Tokens) > 0 {
			lists[e].Expert = e
			out = append(out, lists[e])
		}
	}
	return out
}

// Accumulate adds weight * y to out (both of the hidden size): the per-token expert
// combination y_t = sum_i w_i f_{e_i}(x_t).
func Accumulate(out []float32, weight float32, y []float32) {
	y = y[:len(out)]
	for i := range out {
		out[i] += weight * y[i]
	}
}

// SwiGLU computes h = silu(gate) * up element-wise into h (which may alias gate or up):
// the activation inside every expert and the shared expert.
func SwiGLU(h, gate, up []float32) {
	for i := range h {
		g := gate[i]
		h[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}

// SharedGate is sigmoid(logit), the scalar weight of the shared expert's output
// (shared_expert_gate is a [1, hidden] linear).
func SharedGate(logit float32) float32 {
	return 1 / (1 + float32(math.Exp(float64(-logit))))
}
