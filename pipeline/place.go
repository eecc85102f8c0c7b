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

// Place splits the model into contiguous stages over as few workers as
// can hold it (one if one can: a whole model), taking workers by free
// memory, largest first (ties by name). Among those workers, in that order,
// it sizes the stages to minimise the largest share of a worker's memory a
// stage needs, so every stage keeps about the same headroom for its KV
// cache beyond the budget. Each stage holds at least one layer. The result
// is deterministic for the same inputs.
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
	for k := 1; k <= min(len(ws), n); k++ {
		if cuts := split(m, b, need, ws[:k], 1); cuts != nil {
			best := refine(m, b, need, ws[:k], cuts)
			return assignments(m, b, need, ws[:k], best), nil
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
// when each worker may use ratio × its free memory: every worker but the
// last takes as many layers as fit, the last the rest with the head. It
// returns the stage ends (len(ws) of them, the last n), or nil when that does
// not fit. Taking as many layers as fit early leaves the least for later, so
// if any partition in this order fits, this one does.
func split(m ModelSize, b Budget, need []int64, ws []Worker, ratio float64) []int {
	n := len(need)
	cuts := make([]int, 0, len(ws))
	first := 0
	for j, w := range ws {
		limit := int64(ratio * float64(w.Free))
		used := b.Overhead
		if j == 0 {
			used += m.Embed
		}
		last := j == len(ws)-1
		i := first
		if last {
			for ; i < n; i++ {
				used += need[i]
			}
			if used+m.Head > limit || i == first {
				return nil
			}
		} else {
			// Leave at least one layer for every later worker.
			for i < n-(len(ws)-1-j) && used+need[i] <= limit {
				used += need[i]
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
// fit at ratio 1).
func refine(m ModelSize, b Budget, need []int64, ws []Worker, cuts []int) []int {
	lo, hi := 0.0, 1.0
	for range 60 {
		mid := (lo + hi) / 2
		if c := split(m, b, need, ws, mid); c != nil {
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
