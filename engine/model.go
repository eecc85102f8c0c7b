// Package engine is the model-facing API of macpool's inference engine: the
// Backend interface that compute backends implement (engine/cpu, later
// metal), the registry of model architectures (engine/qwen registers its
// model types), batched Forward over sequences that each own a Cache, and
// the generation loop. See docs/engine.md for the design.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/tensor"
)

// Config is the model configuration as engine/checkpoint parses it.
type Config = checkpoint.Config

// Source is where an architecture binds its weights: an opened checkpoint
// (canonical HF tensor names) or an in-memory set for tests and benchmarks.
type Source interface {
	Config() *Config
	Tensor(name string) (*tensor.Host, error)
	Has(name string) bool
}

// Batch is one forward pass as an architecture sees it. The new tokens of
// all sequences are concatenated as rows; Seqs[i] covers rows
// [Row, Row+N) at positions [Pos, Pos+N) of its own cache.
type Batch struct {
	Tokens    []int
	Positions []int // absolute position of every row
	Seqs      []BatchSeq
	Outputs   []int // rows whose logits are wanted, in this order
}

// BatchSeq is one sequence of a Batch with its per-layer caches (as made by
// Arch.NewCache).
type BatchSeq struct {
	Layers []LayerCache
	Row    int
	N      int
	Pos    int
	// GEMMRows is AttnSeq.GEMMRows for this sequence's rows (from
	// Seq.PromptEnd; -1 without one).
	GEMMRows int
}

// Arch is a loaded model architecture bound to a backend.
type Arch interface {
	// NewCache allocates the per-layer state of one sequence.
	NewCache() ([]LayerCache, error)
	// Forward runs the batch and returns logits [len(b.Outputs), VocabSize].
	// The caller releases the returned tensor.
	Forward(b *Batch) (Tensor, error)
	VocabSize() int
	// Close releases the uploaded weights.
	Close() error
}

// ArchFunc binds the weights of src on be.
type ArchFunc func(be Backend, src Source) (Arch, error)

// BackendFunc creates a backend from load options.
type BackendFunc func(opts Options) (Backend, error)

var (
	regMu     sync.Mutex
	archs     = map[string]ArchFunc{}
	backends  = map[string]BackendFunc{}
	errClosed = errors.New("engine: model closed")
)

// Register makes an architecture available by its config.json model_type.
// It is meant for init functions and panics on a duplicate.
func Register(modelType string, fn ArchFunc) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := archs[modelType]; dup {
		panic("engine: duplicate architecture " + modelType)
	}
	archs[modelType] = fn
}

// RegisterBackend makes a backend available by name ("cpu"). It is meant
// for init functions and panics on a duplicate.
func RegisterBackend(name string, fn BackendFunc) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := backends[name]; dup {
		panic("engine: duplicate backend " + name)
	}
	backends[name] = fn
}

func registered(m map[string]ArchFunc) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// Options configure Load.
type Options struct {
	Backend string // registered backend name; "" means "cpu"
	Threads int    // backend worker threads; 0 means runtime.NumCPU()
	// Quantize converts float weight matrices at load: "" (keep), "q8"
	// (Q8_0) or "q4" (Q4_0); see docs/engine.md, "CPU backend and kernels".
	Quantize string
	// ExactMatMul multiplies quantized weights with float32 activations
	// (exact up to rounding: matches the dequantized references to ~1e-6).
	// The default quantizes activations to int8 per block of 32 for integer
	// SIMD dot products, as llama.cpp does (logits within ~1e-2 rel-L2).
	ExactMatMul bool
	// KVF16 stores the paged KV cache in half precision where the backend
	// can (CPU): half the memory and half the bytes attention reads, as
	// llama.cpp's default f16 cache; attention then differs from a float32
	// cache by ~1e-3 relative.
	KVF16 bool
	// KVQ8 stores the KV cache in 8-bit blocks where the backend can (CPU:
	// int8 values, a scale per 32; llama.cpp's -ctk/-ctv q8_0), taking
	// precedence over KVF16: 1.125 bytes per value.
	KVQ8 bool
	// PreciseHybrid keeps float32 activations for the hybrid models'
	// linear-attention projections and the MoE routers where the backend
	// quantizes activations (CPU): less drift from the exact result, slower
	// decode (docs/engine.md, "Fast-path accuracy").
	PreciseHybrid bool
	// Stage loads one pipeline stage of the model: decoder layers
	// [First, Last) and only their tensors (see stage.go). The zero value
	// loads the whole model.
	Stage Stage
}

// KVValueSizer is implemented by backends whose paged KV blocks store
// values in other than 4 bytes (KVPool sizes its budget with it).
type KVValueSizer interface {
	KVValueBytes() float64 // bytes per value, scales included (8-bit: 1.125)
}

// Model is a loaded model: architecture + backend (+ the checkpoint it was
// loaded from). Forward calls are serialised; batch sequences instead of
// calling Forward concurrently.
type Model struct {
	mu      sync.Mutex
	be      Backend
	arch    Arch
	cfg     *Config
	stage   Stage // resolved; [0, NumHiddenLayers) for a whole model
	closers []io.Closer
	closed  bool
	tokSlot int // next device token slot of LaunchGreedy (devicetoken.go)
}

// Load opens the checkpoint in dir and binds it on a new backend.
func Load(dir string, opts Options) (*Model, error) {
	name := opts.Backend
	if name == "" {
		name = "cpu"
	}
	regMu.Lock()
	bf := backends[name]
	regMu.Unlock()
	if bf == nil {
		return nil, fmt.Errorf("load %s: backend %q not registered (import engine/%s)", dir, name, name)
	}
	ck, err := checkpoint.OpenStage(dir, opts.Stage)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	be, err := bf(opts)
	if err != nil {
		ck.Close()
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	m, err := New(be, ck)
	if err != nil {
		be.Close()
		ck.Close()
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	m.closers = append(m.closers, backendCloser{be}, ck)
	return m, nil
}

type backendCloser struct{ Backend }

func (b backendCloser) Close() error { return b.Backend.Close() }

// New binds the weights of src on be. The caller keeps ownership of be and
// src (Model.Close does not close them); Load is the usual entry point.
func New(be Backend, src Source) (*Model, error) {
	cfg := src.Config()
	regMu.Lock()
	fn := archs[cfg.ModelType]
	known := registered(archs)
	regMu.Unlock()
	if fn == nil {
		return nil, fmt.Errorf("model_type %q not supported (registered: %v)", cfg.ModelType, known)
	}
	arch, err := fn(be, src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	return &Model{be: be, arch: arch, cfg: cfg, stage: StageOf(src)}, nil
}

// Config is the model's configuration.
func (m *Model) Config() *Config { return m.cfg }

// VocabSize is the number of logits per position.
func (m *Model) VocabSize() int { return m.arch.VocabSize() }

// EOSTokenIDs are the end-of-sequence ids from config.json and
// generation_config.json.
func (m *Model) EOSTokenIDs() []int { return append([]int(nil), m.cfg.EOSTokenIDs...) }

// Backend is the backend the model runs on.
func (m *Model) Backend() Backend { return m.be }

// Close releases weights, the backend and the checkpoint (those Load made).
// Caches must not be used afterwards. Safe to call twice.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	errs := []error{m.arch.Close()}
	for _, c := range m.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Cache is the state of one sequence: a KV cache per attention layer (and
// recurrent state per linear-attention layer) holding Len positions.
// A Cache belongs to one goroutine at a time: do not Truncate or Free it
// while a Forward that includes it runs.
type Cache struct {
	m      *Model
	layers []LayerCache
	n      int
	freed  bool
	paged  *pagedCache // nil: per-sequence KV caches (Backend.NewKV)
}

// NewCache allocates an empty cache for one sequence.
func (m *Model) NewCache() (*Cache, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	layers, err := m.arch.NewCache()
	if err != nil {
		return nil, err
	}
	return &Cache{m: m, layers: layers}, nil
}

// Len is the number of positions the cache holds.
func (c *Cache) Len() int { return c.n }

// Truncate keeps the first n positions (prefix reuse, failover resume).
func (c *Cache) Truncate(n int) error {
	if n < 0 || n > c.n {
		return fmt.Errorf("truncate cache to %d: cache holds %d positions", n, c.n)
	}
	for i, l := range c.layers {
		if tc, ok := l.(TruncateChecker); ok {
			if err := tc.CanTruncate(n); err != nil {
				return fmt.Errorf("truncate cache layer %d to %d: %w", i, n, err)
			}
		}
	}
	if c.paged != nil {
		if err := c.paged.truncate(n); err != nil {
			return err
		}
	}
	for i, l := range c.layers {
		if err := l.Truncate(n); err != nil {
			return fmt.Errorf("truncate cache layer %d to %d: %w", i, n, err)
		}
	}
	c.n = n
	return nil
}

// Free releases the cache's memory; safe to call twice.
func (c *Cache) Free() {
	if c.freed {
		return
	}
	c.freed = true
	for _, l := range c.layers {
		l.Free()
	}
	if c.paged != nil {
		c.paged.free()
	}
	c.layers = nil
	c.n = 0
}

// Seq is one sequence of a Forward batch: its cache and its new tokens,
// which take positions [Cache.Len(), Cache.Len()+len(Tokens)).
type Seq struct {
	Cache     *Cache
	Tokens    []int
	AllLogits bool // logits of every new token instead of only the last
	// Greedy says that only the argmax of the last token's logits is
	// needed (ForwardGreedy; ignored with AllLogits and by Forward).
	Greedy bool
	// PromptEnd, if > 0, is the position where generation began: tokens at
	// positions ≥ PromptEnd are computed as decode steps compute them even
	// when they are prefilled together (a failover resume), so their
	// logits are the same bits. 0: no such guarantee (AttnSeq.GEMMRows -1).
	PromptEnd int
}

// Forward appends each sequence's tokens to its cache in one batched pass
// and returns, per sequence, row-major logits [n × VocabSize] with n = 1
// (last token) or len(Tokens) (AllLogits). On error the caches are left as
// they were before the call.
func (m *Model) Forward(ctx context.Context, seqs []Seq) ([][]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !m.whole() {
		return nil, m.stageErr("forward")
	}
	return m.runBatch(seqs, "forward", m.arch.VocabSize(), m.arch.Forward)
}

// runBatch is the pass behind Forward and Embed: runBatchRead reading
// width floats per output row. The entry points differ only in the op that
// produces the output tensor, its row width and the error prefix op, so
// they share one copy of the cache bookkeeping and rollback.
func (m *Model) runBatch(seqs []Seq, op string, width int, run func(*Batch) (Tensor, error)) ([][]float32, error) {
	out, _, err := m.runBatchGreedy(seqs, op, width, false, run)
	return out, err
}

// runBatchGreedy is runBatch that, with greedy set, also returns per
// sequence the argmax of its output row (-1 for sequences without
// Seq.Greedy), computed on the device when the backend implements
// ArgmaxOps (the row's logits are then not read: nil).
func (m *Model) runBatchGreedy(seqs []Seq, op string, width int, greedy bool, run func(*Batch) (Tensor, error)) ([][]float32, []int, error) {
	var out [][]float32
	var toks []int
	err := m.runBatchRead(seqs, op, run, func(res Tensor, b *Batch) error {
		var err error
		out, toks, err = m.readOutputs(res, seqs, len(b.Outputs), width, greedy)
		return err
	})
	return out, toks, err
}

// runBatchRows is runBatch for an op that returns every row of the batch
// (a pipeline stage that is not the last): it returns them flat, [T × width].
func (m *Model) runBatchRows(seqs []Seq, op string, width int, run func(*Batch) (Tensor, error)) ([]float32, error) {
	var flat []float32
	err := m.runBatchRead(seqs, op, run, func(res Tensor, b *Batch) error {
		if res.Rows() != len(b.Tokens) || res.Cols() != width {
			return fmt.Errorf("stage output is [%d, %d], want [%d, %d]", res.Rows(), res.Cols(), len(b.Tokens), width)
		}
		flat = make([]float32, len(b.Tokens)*width)
		return m.be.Read(res, flat)
	})
	return flat, err
}

// runBatchRead is the one body of every batched pass: it validates the
// sequences, packs them into one Batch, reserves paged blocks, runs run
// under m.mu, hands the result to read (still under m.mu; the result is
// released afterwards) and commits the tokens to the caches, or rolls the
// caches back when run or read fails.
func (m *Model) runBatchRead(seqs []Seq, op string, run func(*Batch) (Tensor, error), read func(Tensor, *Batch) error) error {
	vocab := m.arch.VocabSize()
	b := &Batch{Seqs: make([]BatchSeq, len(seqs))}
	seen := make(map[*Cache]bool, len(seqs))
	for i, s := range seqs {
		switch {
		case s.Cache == nil || s.Cache.freed:
			return fmt.Errorf("%s: sequence %d has no cache (nil or freed)", op, i)
		case s.Cache.m != m:
			return fmt.Errorf("%s: sequence %d: cache belongs to another model", op, i)
		case seen[s.Cache]:
			return fmt.Errorf("%s: sequence %d: cache used twice in one batch", op, i)
		case len(s.Tokens) == 0:
			return fmt.Errorf("%s: sequence %d has no tokens", op, i)
		}
		seen[s.Cache] = true
		for _, id := range s.Tokens {
			if id < 0 || id >= vocab {
				return fmt.Errorf("%s: sequence %d: token id %d out of range [0,%d)", op, i, id, vocab)
			}
		}
		row, pos := len(b.Tokens), s.Cache.n
		b.Seqs[i] = BatchSeq{Layers: s.Cache.layers, Row: row, N: len(s.Tokens), Pos: pos, GEMMRows: gemmRows(s.PromptEnd, pos, len(s.Tokens))}
		b.Tokens = append(b.Tokens, s.Tokens...)
		for j := range s.Tokens {
			b.Positions = append(b.Positions, pos+j)
		}
		if s.AllLogits {
			for j := range s.Tokens {
				b.Outputs = append(b.Outputs, row+j)
			}
		} else {
			b.Outputs = append(b.Outputs, row+len(s.Tokens)-1)
		}
	}

	// Paged caches get their blocks before any op runs (ops cannot fail).
	for i, s := range seqs {
		if err := s.Cache.Reserve(len(s.Tokens)); err != nil {
			for _, r := range seqs[:i] {
				if r.Cache.paged != nil {
					r.Cache.paged.trimBlocks(r.Cache.n)
				}
			}
			return fmt.Errorf("%s: sequence %d: %w", op, i, err)
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	res, err := run(b)
	if err == nil {
		err = read(res, b)
		m.be.Release(res)
	}
	if err != nil {
		for i, s := range seqs {
			for _, l := range b.Seqs[i].Layers {
				l.Truncate(s.Cache.n) // undo partial writes; best effort
			}
			if s.Cache.paged != nil {
				s.Cache.paged.trimBlocks(s.Cache.n)
			}
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	for _, s := range seqs {
		s.Cache.n += len(s.Tokens)
		if s.Cache.paged != nil {
			s.Cache.paged.appended(s.Tokens)
		}
	}
	return nil
}

// gemmRows is how many of n rows starting at position pos lie before
// promptEnd (-1 when promptEnd is not set).
func gemmRows(promptEnd, pos, n int) int {
	if promptEnd <= 0 {
		return -1
	}
	return min(n, max(0, promptEnd-pos))
}
