package pipeline

// Placement: which worker runs which contiguous layers of a model too big
// for one of them. A pure function of the model's sizes and the workers'
// free memory (a worker's --memory-limit, or what it reports), so the
// coordinator can compute it in its leader loop and store the result as Raft
// state.

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/macpool/macpool/engine/checkpoint"
)

// ModelSize is what placement knows of a model, in bytes.
type ModelSize struct {
	// Layers is the weight bytes of each decoder layer.
	Layers []int64
	// Embed is the token embedding (first stage); Head the final norm and
	// LM head (last stage; the embedding again when tied).
	Embed, Head int64
	// KVPerToken is, per layer, the KV cache bytes of one cached position
	// (0 for linear-attention layers); StatePerSeq the recurrent state of
	// one sequence (0 for attention layers).
	KVPerToken, StatePerSeq []int64
}

// SizeOf is the ModelSize of a whole checkpoint with a KV cache of
// kvValueBytes per value (4: float32, 2: f16) and float32 recurrent state.
func SizeOf(ck *checkpoint.Checkpoint, kvValueBytes int) ModelSize {
	layers, embed, head := ck.LayerBytes()
	return SizeOfConfig(ck.Config(), layers, embed, head, kvValueBytes)
}

// SizeOfConfig is SizeOf from a model's Config and its weight bytes by
// layer, embedding and head (e.g. from checkpoint.TensorRanges, without
// opening the weights).
func SizeOfConfig(c *checkpoint.Config, layers []int64, embed, head int64, kvValueBytes int) ModelSize {
	s := ModelSize{Layers: layers, Embed: embed, Head: head,
		KVPerToken: make([]int64, len(layers)), StatePerSeq: make([]int64, len(layers))}
	kvHeads, headDim := c.NumKeyValueHeads, c.HeadDim
	if kvHeads == 0 {
		kvHeads = c.NumAttentionHeads
	}
	if headDim == 0 && c.NumAttentionHeads > 0 {
		headDim = c.HiddenSize / c.NumAttentionHeads
	}
	for i := range layers {
		if c.IsLinearAttention(i) {
			conv := int64(2*c.LinearNumKeyHeads*c.LinearKeyHeadDim+c.LinearNumValueHeads*c.LinearValueHeadDim) * int64(max(0, c.LinearConvKernelDim-1))
			delta := int64(c.LinearNumValueHeads * c.LinearKeyHeadDim * c.LinearValueHeadDim)
			s.StatePerSeq[i] = 4 * (conv + delta)
		} else {
			s.KVPerToken[i] = int64(2 * kvHeads * headDim * kvValueBytes)
		}
	}
	return s
}

// Budget is the least a stage must hold besides its weights: the KV cache
// of Tokens positions and the recurrent state of Seqs sequences of its own
// layers, plus Overhead bytes (activations, runtime).
type Budget struct {
	Tokens, Seqs int
	Overhead     int64
}

// Worker is a placement candidate.
type Worker struct {
	Name string
	Free int64 // bytes it may use for this model
	// Bandwidth is its memory bandwidth in bytes per second (0: unknown).
	Bandwidth int64
}

// Assignment is one stage of a plan: the worker and its layers.
type Assignment struct {
	Worker string
	Stage  checkpoint.Stage // resolved: Last is set
	Need   int64            // weights + budget of the stage
	Free   int64            // the worker's free memory
}

// ErrNoFit is wrapped by Place when the workers cannot hold the model.
var ErrNoFit = errors.New("placement: model does not fit")

// Place splits the model into contiguous stages, each holding at least one
// layer and fitting its worker's free memory. The result is deterministic
// for the same inputs (it is Raft state, computed by the leader).
//
// Without every candidate's bandwidth (one is 0: all are taken as equal)
// it uses as few workers as can hold the model (one if one can: a whole
// model), taking them by free memory, largest first (ties by name), and
// sizes the stages, in that order, to minimise the largest share of a
// worker's memory a stage needs, so every stage keeps about the same
// headroom for its KV cache beyond the budget.
//
// With every bandwidth known it sizes the stages by speed (placeBandwidth):
// decode is memory-bound, a stage's step takes its weight bytes / its
// worker's bandwidth, and a pipeline runs at the pace of its slowest stage.
func Place(m ModelSize, b Budget, workers []Worker) ([]Assignment, error) {
	n := len(m.Layers)
	switch {
	case n == 0:
		return nil, errors.New("placement: model has no layers")
	case len(m.KVPerToken) != n || len(m.StatePerSeq) != n:
		return nil, fmt.Errorf("placement: %d layers but %d KV and %d state sizes", n, len(m.KVPerToken), len(m.StatePerSeq))
	case b.Tokens < 0 || b.Seqs < 0 || b.Overhead < 0:
		return nil, fmt.Errorf("placement: budget %+v must not be negative", b)
	}
	ws := slices.Clone(workers)
	slices.SortStableFunc(ws, func(a, b Worker) int {
		if c := cmp.Compare(b.Free, a.Free); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	for len(ws) > 0 && ws[len(ws)-1].Free <= 0 {
		ws = ws[:len(ws)-1]
	}
	// need[i] is layer i's bytes with its share of the budget.
	need := make([]int64, n)
	for i := range need {
		need[i] = m.Layers[i] + int64(b.Tokens)*m.KVPerToken[i] + int64(b.Seqs)*m.StatePerSeq[i]
	}
	known := len(ws) > 0
	for _, w := range ws {
		known = known && w.Bandwidth > 0
	}
	if known {
		if as := placeBandwidth(m, b, need, ws); as != nil {
			return as, nil
		}
	} else {
		for k := 1; k <= min(len(ws), n); k++ {
			if cuts := split(m, b, need, ws[:k], 1, nil); cuts != nil {
				best := refine(m, b, need, ws[:k], cuts, nil)
				return assignments(m, b, need, ws[:k], best), nil
			}
		}
	}
	var total, free int64
	for _, x := range need {
		total += x
	}
	total += m.Embed + m.Head + b.Overhead
	for _, w := range ws {
		free += w.Free
	}
	return nil, fmt.Errorf("%w: needs about %d bytes (weights + budget), %d workers have %d free", ErrNoFit, total, len(ws), free)
}

// split is the greedy contiguous partition of the layers over ws in order
// when each worker may use ratio × its free memory and, if read is set,
// read[j] bytes of weights per step (its time limit × its bandwidth):
// every worker but the last takes as many layers as fit, the last the rest
// with the head. It returns the stage ends (len(ws) of them, the last n),
// or nil when that does not fit. Both limits only tighten as a stage grows,
// so taking as many layers as fit early leaves the least for later: if any
// partition in this order fits, this one does.
func split(m ModelSize, b Budget, need []int64, ws []Worker, ratio float64, read []int64) []int {
	n := len(need)
	cuts := make([]int, 0, len(ws))
	first := 0
	for j, w := range ws {
		limit := int64(ratio * float64(w.Free))
		rlimit := int64(1) << 62
		if read != nil {
			rlimit = read[j]
		}
		used, weights := b.Overhead, int64(0)
		if j == 0 {
			used += m.Embed // one row read per token: memory, not time
		}
		last := j == len(ws)-1
		i := first
		if last {
			for ; i < n; i++ {
				used += need[i]
				weights += m.Layers[i]
			}
			if used+m.Head > limit || weights+m.Head > rlimit || i == first {
				return nil
			}
		} else {
			// Leave at least one layer for every later worker.
			for i < n-(len(ws)-1-j) && used+need[i] <= limit && weights+m.Layers[i] <= rlimit {
				used += need[i]
				weights += m.Layers[i]
				i++
			}
			if i == first {
				return nil
			}
		}
		cuts = append(cuts, i)
		first = i
	}
	return cuts
}

// refine finds, by bisection on the ratio, the partition over ws with the
// smallest largest share of a worker's memory (starting from cuts, which
// fit at ratio 1), within the per-step reads read (nil: none).
func refine(m ModelSize, b Budget, need []int64, ws []Worker, cuts []int, read []int64) []int {
	lo, hi := 0.0, 1.0
	for range 60 {
		mid := (lo + hi) / 2
		if c := split(m, b, need, ws, mid, read); c != nil {
			hi, cuts = mid, c
		} else {
			lo = mid
		}
	}
	return cuts
}

func assignments(m ModelSize, b Budget, need []int64, ws []Worker, cuts []int) []Assignment {
	out := make([]Assignment, len(ws))
	first := 0
	for j, w := range ws {
		a := Assignment{Worker: w.Name, Free: w.Free, Stage: checkpoint.Stage{First: first, Last: cuts[j]}, Need: b.Overhead}
		for i := first; i < cuts[j]; i++ {
			a.Need += need[i]
		}
		if j == 0 {
			a.Need += m.Embed
		}
		if j == len(ws)-1 {
			a.Need += m.Head
		}
		out[j] = a
		first = cuts[j]
	}
	return out
}

// stageGain is how much an extra stage must save for placeBandwidth to
// take one more worker: the round time (below) must fall to stageGain of
// the fewer stages' at most (1.25× the throughput), because a stage also
// costs a hop per step, a worker's memory and one more machine that can
// fail.
const stageGain = 0.8

// placeBandwidth is Place when every worker's bandwidth is known: for each
// number of stages k it finds the split whose slowest stage (weight bytes
// read per step / bandwidth; the last stage reads the head too, the first
// only one embedding row per token) is fastest, subject to every stage
// fitting its memory. Among the k it prefers the fewest workers that hold
// the model, and takes one more only while that cuts the round time k ×
// slowest stage by stageGain: with k micro-batches in flight, one per
// scheduler lane, every stage moves at the slowest one's pace, so a
// sequence gets a token every k × slowest step (never less than the sum of
// the stages' steps, its single-stream time). When decode is memory-bound
// that rarely pays: more stages of the same speed leave the round time as
// it is. Within the chosen time it then balances memory shares as the
// memory rule does. nil: no number of workers holds the model.
func placeBandwidth(m ModelSize, b Budget, need []int64, ws []Worker) []Assignment {
	var best *bwPlan
	for k := 1; k <= min(len(ws), len(need)); k++ {
		p := fastest(m, b, need, ws, k)
		if p == nil {
			continue
		}
		if best == nil || float64(k)*p.step <= stageGain*(float64(len(best.ws))*best.step) {
			best = p
		}
	}
	if best == nil {
		return nil
	}
	read := reads(best.ws, best.t)
	cuts := refine(m, b, need, best.ws, best.cuts, read)
	return assignments(m, b, need, best.ws, cuts)
}

// bwPlan is a split over workers ws (in stage order) whose slowest stage
// takes step seconds, found within the time limit t (step ≤ t).
type bwPlan struct {
	ws      []Worker
	cuts    []int
	step, t float64
}

// fastest is the k-stage split with the least slowest-stage time, by
// bisection on that time T. At a given T, worker j can take at most
// min(its free memory, T × its bandwidth) of weights; the k workers with
// the most of that are chosen (ties: faster, then by name) and tried in
// bandwidth order, slowest first, so the fastest takes the last stage and
// its head (read every step); if that order does not fit, in memory order
// (largest first, as the memory rule). nil: k workers cannot hold it.
func fastest(m ModelSize, b Budget, need []int64, ws []Worker, k int) *bwPlan {
	var weights int64
	for _, x := range m.Layers {
		weights += x
	}
	weights += m.Head
	slowest := ws[0].Bandwidth
	for _, w := range ws {
		slowest = min(slowest, w.Bandwidth)
	}
	// At hi every worker can read the whole model in a step: only memory
	// binds. (The explicit conversion keeps the compiler from fusing the
	// multiply and add, which would round differently on some CPUs: the
	// plan must not depend on the leader's architecture.)
	lo, hi := 0.0, float64(float64(weights)/float64(slowest)*1.01)+1e-9
	try := func(t float64) *bwPlan {
		set := chooseSet(ws, k, t, b.Overhead)
		for _, order := range [][]Worker{byBandwidth(set), byMemory(set)} {
			if cuts := split(m, b, need, order, 1, reads(order, t)); cuts != nil {
				return &bwPlan{ws: order, cuts: cuts, t: t}
			}
		}
		return nil
	}
	p := try(hi)
	if p == nil {
		return nil
	}
	for range 60 {
		mid := (lo + hi) / 2
		if q := try(mid); q != nil {
			hi, p = mid, q
		} else {
			lo = mid
		}
	}
	p.step = stepTime(m, p.ws, p.cuts)
	return p
}

// reads is, per worker, the weight bytes it reads in t seconds.
func reads(ws []Worker, t float64) []int64 {
	r := make([]int64, len(ws))
	for j, w := range ws {
		r[j] = int64(t * float64(w.Bandwidth))
	}
	return r
}

// stepTime is the slowest stage's time per step of a split (seconds).
func stepTime(m ModelSize, ws []Worker, cuts []int) float64 {
	var worst float64
	first := 0
	for j, w := range ws {
		var bytes int64
		for i := first; i < cuts[j]; i++ {
			bytes += m.Layers[i]
		}
		if j == len(ws)-1 {
			bytes += m.Head
		}
		worst = max(worst, float64(bytes)/float64(w.Bandwidth))
		first = cuts[j]
	}
	return worst
}

// chooseSet is the k workers that can read the most weights in t seconds
// within their memory (less the per-stage overhead).
func chooseSet(ws []Worker, k int, t float64, overhead int64) []Worker {
	score := func(w Worker) int64 { return min(w.Free-overhead, int64(t*float64(w.Bandwidth))) }
	c := slices.Clone(ws)
	slices.SortStableFunc(c, func(a, b Worker) int {
		if x := cmp.Compare(score(b), score(a)); x != 0 {
			return x
		}
		if x := cmp.Compare(b.Bandwidth, a.Bandwidth); x != 0 {
			return x
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return c[:k]
}

// byBandwidth orders workers slowest first (ties: less memory, then by
// name), so the fastest holds the last stage.
func byBandwidth(ws []Worker) []Worker {
	c := slices.Clone(ws)
	slices.SortStableFunc(c, func(a, b Worker) int {
		if x := cmp.Compare(a.Bandwidth, b.Bandwidth); x != 0 {
			return x
		}
		if x := cmp.Compare(a.Free, b.Free); x != 0 {
			return x
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return c
}

// byMemory orders workers as the memory rule does: largest first, ties by
// name.
func byMemory(ws []Worker) []Worker {
	c := slices.Clone(ws)
	slices.SortStableFunc(c, func(a, b Worker) int {
		if x := cmp.Compare(b.Free, a.Free); x != 0 {
			return x
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return c
}
