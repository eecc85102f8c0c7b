package prefix

import (
	"container/list"
	"sync"

	"github.com/macpool/macpool/job"
)

// Of returns the keys of a job's prefixes (none for embeddings).
func Of(j *job.Job) []uint64 {
	switch {
	case j.Chat != nil:
		return Chat(j.Chat)
	case j.Completion != nil:
		return Completion(j.Completion)
	}
	return nil
}

// Recent is a bounded set of keys, most recently added last: the keys of
// the requests a worker served most recently. Safe for concurrent use.
type Recent struct {
	mu  sync.Mutex
	max int
	l   *list.List // front = oldest
	els map[uint64]*list.Element
}

// NewRecent returns a set that keeps the max most recently added keys.
func NewRecent(max int) *Recent {
	return &Recent{max: max, l: list.New(), els: map[uint64]*list.Element{}}
}

// Add records keys in order (a chain's deepest key last, so it is the most
// recent); a key already present moves to the back.
func (r *Recent) Add(keys []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if el := r.els[k]; el != nil {
			r.l.MoveToBack(el)
			continue
		}
		r.els[k] = r.l.PushBack(k)
		if r.l.Len() > r.max {
			old := r.l.Front()
			delete(r.els, old.Value.(uint64))
			r.l.Remove(old)
		}
	}
}

// Latest returns up to max keys, most recent first.
func (r *Recent) Latest(max int) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []uint64{}
	for el := r.l.Back(); el != nil && len(out) < max; el = el.Prev() {
		out = append(out, el.Value.(uint64))
	}
	return out
}

// Summary is what a worker advertises about one model's prefix cache: the
// keys of the requests it served most recently and how much KV room it has
// (and what the model is, which the status shows).
// Summaries travel over NATS, not gossip: 64 keys are ~1.4 KB, well over
// memberlist's 512-byte metadata. The engine fills Keys and the KV fields;
// the worker fills in Node and Model.
type Summary struct {
	Node       string   `json:"node"`
	Model      string   `json:"model"`
	Keys       []uint64 `json:"keys"`                  // most recent first
	BlockSize  int      `json:"block_size,omitempty"`  // KV positions per block (0: no paged pool)
	Blocks     int      `json:"blocks,omitempty"`      // KV pool size
	FreeBlocks int      `json:"free_blocks,omitempty"` // free or evictable now
	BlockBytes int64    `json:"block_bytes,omitempty"` // memory of one block (all layers)

	// The model as the engine serves it, for the cluster status (0 or ""
	// where the engine does not say): the most prompt + completion tokens
	// of a sequence, the weights' format (safetensors, mlx, gguf) and
	// quantization or storage type (q8_0, 4bit, bf16), their bytes on disk.
	Context      int    `json:"context,omitempty"`
	Format       string `json:"format,omitempty"`
	Quantization string `json:"quantization,omitempty"`
	Size         int64  `json:"size,omitempty"`
}
