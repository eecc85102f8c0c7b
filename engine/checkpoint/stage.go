package checkpoint

// Pipeline stages: a model split by decoder layers over several processes.
// A stage holds the decoder layers [First, Last), the token embedding when it
// is the first stage and the final norm and LM head when it is the last. Every
// other tensor is left out of the stage's checkpoint, so nothing above the
// checkpoint can bind (and no GGUF transform can copy) another stage's weights.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/macpool/macpool/engine/tensor"
)

// Stage is a contiguous range of decoder layers [First, Last). Last 0 means
// NumHiddenLayers, so the zero value is the whole model. The stage that ends
// the layers also holds the final norm and LM head unless NoHead leaves them
// to a head-only stage [NumHiddenLayers, NumHiddenLayers) after it (a large
// vocabulary's head can be a stage of its own; it also lets a two-layer
// model run as three stages).
type Stage struct {
	First, Last int
	NoHead      bool
}

// Resolve returns the stage with Last filled in for a model of layers
// decoder layers, and checks 0 ≤ First ≤ Last ≤ layers, that only a
// head-only stage holds no layer, and that NoHead is set only on a stage
// ending the layers.
func (s Stage) Resolve(layers int) (Stage, error) {
	if s.Last == 0 {
		s.Last = layers
	}
	switch {
	case s.First < 0 || s.First > s.Last || s.Last > layers:
		return s, fmt.Errorf("stage layers [%d,%d) must lie within [0,%d) with first ≤ last", s.First, s.Last, layers)
	case s.NoHead && s.Last != layers:
		return s, fmt.Errorf("stage layers [%d,%d): no_head applies only to the stage ending the %d layers", s.First, s.Last, layers)
	case s.First == s.Last && (s.Last != layers || s.NoHead):
		return s, fmt.Errorf("stage layers [%d,%d) holds nothing; only a head-only stage [%d,%d) may hold no layer", s.First, s.Last, layers, layers)
	}
	return s, nil
}

// IsFirst says whether the resolved stage embeds tokens.
func (s Stage) IsFirst() bool { return s.First == 0 }

// IsLast says whether the resolved stage of a model of layers layers ends
// with the final norm and LM head.
func (s Stage) IsLast(layers int) bool { return s.Last == layers && !s.NoHead }

// String is "layers [First,Last)", with " without head" for NoHead.
func (s Stage) String() string {
	if s.NoHead {
		return fmt.Sprintf("layers [%d,%d) without head", s.First, s.Last)
	}
	return fmt.Sprintf("layers [%d,%d)", s.First, s.Last)
}

// LayerIndex is the decoder layer of a canonical tensor name
// (model.layers.N.…); ok is false for tensors outside the layers
// (embedding, final norm, LM head).
func LayerIndex(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// Holds says whether the resolved stage s of a model of layers layers holds
// the canonical tensor name. hasHead says whether the checkpoint has an
// lm_head.weight: without one the embedding is the head (tied), so the last
// stage keeps it too.
func (s Stage) Holds(name string, layers int, hasHead bool) bool {
	if i, ok := LayerIndex(name); ok {
		return i >= s.First && i < s.Last
	}
	first, last := s.IsFirst(), s.IsLast(layers)
	switch name {
	case "model.embed_tokens.weight":
		return first || (last && !hasHead)
	case "model.norm.weight", "lm_head.weight":
		return last
	}
	// Nothing else is mapped today; an unknown top-level tensor goes with
	// the last stage so that a whole model (first and last) keeps it.
	return last
}

// OpenStage is Open keeping only the tensors of stage s (see Stage): the
// decoder layers [First, Last), model.embed_tokens.weight on the first stage
// (and on the last when there is no lm_head.weight: tied embeddings),
// model.norm.weight and lm_head.weight on the last. The Config is the whole model's. For GGUF the
// tensors of other stages are never materialised (hybrid files transform
// tensors on the heap); safetensors tensors are views of the mapping, so
// the left-out ones cost address space only.
func OpenStage(path string, s Stage) (*Checkpoint, error) {
	if s == (Stage{}) {
		return Open(path)
	}
	if IsGGUF(path) {
		return openGGUFStage(path, &s)
	}
	ck, err := Open(path)
	if err != nil {
		return nil, err
	}
	if err := ck.restrict(s); err != nil {
		ck.Close()
		return nil, err
	}
	return ck, nil
}

// restrict drops every tensor stage s does not hold.
func (ck *Checkpoint) restrict(s Stage) error {
	r, err := s.Resolve(ck.cfg.NumHiddenLayers)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", ck.dir, err)
	}
	hasHead := ck.Has("lm_head.weight")
	kept := ck.names[:0:0]
	for _, n := range ck.names {
		if r.Holds(n, ck.cfg.NumHiddenLayers, hasHead) {
			kept = append(kept, n)
		} else {
			delete(ck.tensors, n)
		}
	}
	ck.names = kept
	ck.stage = r
	return nil
}

// Stage is the stage the checkpoint holds (resolved: [0, NumHiddenLayers)
// for a whole model).
func (ck *Checkpoint) Stage() Stage {
	if ck.stage == (Stage{}) {
		return Stage{First: 0, Last: ck.cfg.NumHiddenLayers}
	}
	return ck.stage
}

// Bytes is the size of the tensors the checkpoint holds as stored (packed
// weights with their MLX scales and biases).
func (ck *Checkpoint) Bytes() int64 {
	var n int64
	for _, h := range ck.tensors {
		n += storedBytes(h)
	}
	return n
}

// storedBytes is one tensor's stored size with its MLX scales and biases.
func storedBytes(h *tensor.Host) int64 {
	n := int64(len(h.Data))
	for _, p := range []*tensor.Host{h.Scales, h.Biases} {
		if p != nil {
			n += int64(len(p.Data))
		}
	}
	return n
}

// Files lists, ascending, the files the held tensors' bytes come from: for
// a stage of a sharded checkpoint, the shards it needs (besides config.json
// and the tokenizer files), so a model store can fetch only those.
func (ck *Checkpoint) Files() []string {
	seen := map[string]bool{}
	var out []string
	add := func(h *tensor.Host) {
		if h != nil && h.Source != "" && !seen[h.Source] {
			seen[h.Source] = true
			out = append(out, h.Source)
		}
	}
	for _, h := range ck.tensors {
		add(h)
		add(h.Scales)
		add(h.Biases)
	}
	sort.Strings(out)
	return out
}

// LayerBytes is the stored size of the tensors of each decoder layer
// ([NumHiddenLayers], zero for layers the checkpoint does not hold), of the
// token embedding and of the final norm with the LM head (the embedding
// again when the head is tied): what placing the model as stages needs.
func (ck *Checkpoint) LayerBytes() (layers []int64, embed, head int64) {
	layers = make([]int64, ck.cfg.NumHiddenLayers)
	for name, h := range ck.tensors {
		n := storedBytes(h)
		if i, ok := LayerIndex(name); ok {
			if i < len(layers) {
				layers[i] += n
			}
			continue
		}
		switch name {
		case "model.embed_tokens.weight":
			embed = n
		default: // model.norm.weight, lm_head.weight
			head += n
		}
	}
	if _, ok := ck.tensors["lm_head.weight"]; !ok {
		head += embed
	}
	return layers, embed, head
}
