package metal

import "github.com/macpool/macpool/engine"

var _ engine.KVBudgeter = (*Backend)(nil)

// workingSetter is implemented by devices that know how much memory the GPU
// should use (metal/mtl: recommendedMaxWorkingSetSize); the emulator does not.
type workingSetter interface {
	RecommendedMaxWorkingSet() uint64
}

// minKVBudget is the smallest KV budget reported when the weights leave
// (almost) nothing of the working set: the model still serves short
// sequences (more memory pressure, not a failure).
const minKVBudget = 64 << 20

// KVBudgetBytes implements engine.KVBudgeter: the device's recommended
// working set less the uploaded weights and an eighth kept for activations
// and scratch; 0 (the engine's default) when the device does not say.
func (b *Backend) KVBudgetBytes() int64 {
	ws, ok := b.dev.(workingSetter)
	if !ok {
		return 0
	}
	total := int64(ws.RecommendedMaxWorkingSet())
	if total <= 0 {
		return 0
	}
	return max(total-b.weightBytes.Load()-total/8, minKVBudget)
}
