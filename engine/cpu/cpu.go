// Package cpu is the CPU backend of the engine: it implements
// engine.Backend (and the paged-KV, hybrid, MoE and argmax extensions) in Go
// with SIMD kernels in Go assembly (engine/cpu/kernels: AVX2, AVX-512 VNNI,
// NEON; no cgo), parallel across cores through a worker pool owned by the
// Backend. Quantized weights are packed for the kernels at upload (Q8_0,
// Q4_0, K-quants, MLX affine; float matrices optionally quantized); matmuls
// quantize activations to int8 blocks as llama.cpp does unless exact mode
// is asked for, and fall back to the reference row decoder
// (tensor.Host.DecodeRow) for formats without a kernel. Activations are
// float32; the KV cache is float32 or half precision.
package cpu

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
	"github.com/macpool/macpool/engine/tensor"
)

func init() {
	engine.RegisterBackend("cpu", func(o engine.Options) (engine.Backend, error) {
		cfg := DefaultConfig()
		if o.Threads > 0 {
			cfg.Threads = o.Threads
		}
		cfg.ExactMatMul = o.ExactMatMul
		cfg.KVF16 = o.KVF16
		cfg.KVQ8 = o.KVQ8
		cfg.PreciseHybrid = o.PreciseHybrid
		switch o.Quantize {
		case "":
		case "q8", "q8_0":
			cfg.Quantize = tensor.Q8_0
		case "q4", "q4_0":
			cfg.Quantize = tensor.Q4_0
		default:
			return nil, fmt.Errorf("quantize %q: want q8 or q4", o.Quantize)
		}
		return New(cfg)
	})
}

// Config configures the CPU backend.
type Config struct {
	// Threads is the number of goroutines computing in parallel (the
	// calling goroutine counts as one).
	Threads int
	// Quantize, if Q8_0 or Q4_0, converts float matrices (F32/F16/BF16,
	// rows of whole 32-blocks) to that format at upload (see
	// docs/engine.md, "CPU backend and kernels" for which tensors). Zero keeps formats.
	Quantize tensor.Format
	// ExactMatMul multiplies quantized weights with float32 activations
	// (exact up to float32 rounding, slower). The default quantizes
	// activations to int8 blocks as llama.cpp does.
	ExactMatMul bool
	// KVF16 stores the KV caches (paged NewKVBlocks and contiguous NewKV)
	// in IEEE half precision: half the memory and half the bytes attention
	// reads, as llama.cpp's default cache. Attention then differs from the
	// float32 cache by ~1e-3 relative.
	KVF16 bool
	// KVQ8 stores the KV caches in 8-bit blocks (int8 per value, a float32
	// scale per 32 values of a head vector; kvq8.go), as llama.cpp's
	// q8_0 cache: 1.125 bytes per value. It takes precedence over KVF16.
	KVQ8 bool
	// PreciseHybrid gives the hybrid models' linear-attention projections
	// and every MoE router float32 activations (MatMulPrecise) while the
	// rest quantizes them: closer to the exact result (qwen3_5 fixture
	// 0.23 → 0.10 max rel. L2), at a decode cost (those matrices run the
	// exact kernels; docs/engine.md, "Fast-path accuracy").
	PreciseHybrid bool
	// RowAttention runs paged attention of sequences without a prompt
	// boundary (AttnSeq.GEMMRows -1) with the per-row decode kernels only:
	// slower prefill, but every position gets the bits a decode step gives
	// it. Sequences with a boundary (engine.Seq.PromptEnd) get that
	// guarantee for their generated positions either way.
	RowAttention bool
}

// DefaultConfig uses every core.
func DefaultConfig() Config { return Config{Threads: runtime.NumCPU()} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Threads < 1 {
		return fmt.Errorf("cpu threads %d must be at least 1", c.Threads)
	}
	if c.Quantize != 0 && c.Quantize != tensor.Q8_0 && c.Quantize != tensor.Q4_0 {
		return fmt.Errorf("cpu quantize %v must be Q8_0 or Q4_0", c.Quantize)
	}
	return nil
}

// Backend is the CPU implementation of engine.Backend. Ops run
// synchronously on the calling goroutine plus Threads-1 workers.
type Backend struct {
	threads int
	// Worker pool (pool.go): the current job, its sequence number, and
	// per-worker park state and wake channels (w >= 1; worker 0 is the caller).
	cur           atomic.Pointer[job]
	seq           atomic.Uint64
	closed        atomic.Bool
	busy          atomic.Bool // a parallel loop is running
	state         []atomic.Int32
	wake          []chan struct{}
	doneCh        chan struct{} // wakes a parked caller
	wg            sync.WaitGroup
	scratch       [][]float32 // per worker
	once          sync.Once
	quantize      tensor.Format // Config.Quantize
	exact         bool          // Config.ExactMatMul
	rowAttn       bool          // Config.RowAttention
	kvF16         bool          // Config.KVF16
	kvQ8          bool          // Config.KVQ8
	preciseHybrid bool          // Config.PreciseHybrid
	rope          ropeCache     // the last Rope call's angles (ops.go)
	tensors       tensorPool    // released activations' memory (tensorpool.go)
}

var _ engine.Backend = (*Backend)(nil)

// New starts a backend with cfg.Threads-1 worker goroutines; Close stops them.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Backend{threads: cfg.Threads, scratch: make([][]float32, cfg.Threads), quantize: cfg.Quantize, exact: cfg.ExactMatMul, kvF16: cfg.KVF16, kvQ8: cfg.KVQ8, preciseHybrid: cfg.PreciseHybrid, rowAttn: cfg.RowAttention}
	b.state = make([]atomic.Int32, cfg.Threads)
	b.wake = make([]chan struct{}, cfg.Threads)
	b.doneCh = make(chan struct{}, 1)
	for w := 1; w < cfg.Threads; w++ {
		b.wake[w] = make(chan struct{}, 1)
		b.wg.Add(1)
		go b.worker(w)
	}
	return b, nil
}

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// Threads is the number of compute goroutines.
func (b *Backend) Threads() int { return b.threads }

// Close stops the workers and waits for them; safe to call twice.
func (b *Backend) Close() error {
	b.once.Do(func() {
		b.closed.Store(true)
		b.publish(nil)
		b.wg.Wait()
	})
	return nil
}

// scratchBuf returns worker w's scratch of at least n floats. It grows
// by a quarter more than asked: decode attention asks for a little more
// every token (its scratch follows the cache length), and a buffer of
// exactly n was reallocated, and its fresh pages faulted in, every step.
func (b *Backend) scratchBuf(w, n int) []float32 {
	if cap(b.scratch[w]) < n {
		b.scratch[w] = make([]float32, n, n+n/4)
	}
	return b.scratch[w][:n]
}

// Tensor is a CPU activation.
type Tensor struct {
	rows, cols int
	data       []float32
}

// Rows is the number of rows.
func (t *Tensor) Rows() int { return t.rows }

// Cols is the number of columns.
func (t *Tensor) Cols() int { return t.cols }

// Data exposes the values (row-major), for tests.
func (t *Tensor) Data() []float32 { return t.data }

func (t *Tensor) row(r int) []float32 { return t.data[r*t.cols : (r+1)*t.cols : (r+1)*t.cols] }

// NewTensor allocates a zeroed activation.
func (b *Backend) NewTensor(rows, cols int) engine.Tensor {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("cpu: tensor shape [%d, %d]", rows, cols))
	}
	return &Tensor{rows: rows, cols: cols, data: b.tensors.get(rows * cols)}
}

func tt(t engine.Tensor) *Tensor { return t.(*Tensor) }

// Write copies src into t.
func (b *Backend) Write(t engine.Tensor, src []float32) {
	d := tt(t)
	if len(src) != len(d.data) {
		panic(fmt.Sprintf("cpu: write %d values into [%d, %d]", len(src), d.rows, d.cols))
	}
	copy(d.data, src)
}

// Read copies t into dst.
func (b *Backend) Read(t engine.Tensor, dst []float32) error {
	s := tt(t)
	if len(dst) != len(s.data) {
		return fmt.Errorf("cpu: read [%d, %d] into %d values", s.rows, s.cols, len(dst))
	}
	copy(dst, s.data)
	return nil
}

// Release keeps the tensor's memory for a later NewTensor (tensorPool)
// or leaves it to the garbage collector.
func (b *Backend) Release(t engine.Tensor) {
	d := tt(t)
	b.tensors.put(d.data)
	d.data = nil
}

// Weight is a CPU-resident weight in its stored format.
type Weight struct {
	rows, cols int
	format     tensor.Format
	f32        []float32 // F32 matrices (view of the bytes), and every vector decoded
	u16        []uint16  // BF16/F16 matrices: view of the stored bytes
	host       *tensor.Host
	k          *kernels.Matrix // SIMD kernels' form of a matrix (matmul_kernels.go); nil: none
}

// Rows is out_features (1 for a vector).
func (w *Weight) Rows() int { return w.rows }

// Cols is in_features (the length of a vector).
func (w *Weight) Cols() int { return w.cols }

// Format is the stored format.
func (w *Weight) Format() tensor.Format { return w.format }

func ww(w engine.Weight) *Weight { return w.(*Weight) }

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// vectorLimit is the largest tensor decoded to float32 at upload (norms,
// biases); larger ones stay in their stored format.
const vectorLimit = 1 << 16

// Upload wraps h without copying its bytes where the format has a kernel
// (F32, BF16, F16 on a little-endian host with aligned data); small vectors
// are decoded to float32. Other formats are read through DecodeRow.
func (b *Backend) Upload(h *tensor.Host) (engine.Weight, error) {
	if len(h.Shape) == 0 || len(h.Shape) > 2 {
		return nil, fmt.Errorf("cpu: upload %s: shape %v is not a vector or matrix", h.Name, h.Shape)
	}
	w := &Weight{rows: h.Rows(), cols: h.Cols(), format: h.Format, host: h}
	if w.rows == 0 || w.cols == 0 {
		return nil, fmt.Errorf("cpu: upload %s: empty shape %v", h.Name, h.Shape)
	}
	// Checks the format has a decoder and the byte length is right.
	row := make([]float32, w.cols)
	if err := h.DecodeRow(0, row); err != nil {
		return nil, fmt.Errorf("cpu: upload: %w", err)
	}
	if err := h.DecodeRow(w.rows-1, row); err != nil {
		return nil, fmt.Errorf("cpu: upload: %w", err)
	}
	if copied, err := b.uploadKernel(w, h); err != nil {
		return nil, fmt.Errorf("cpu: upload: %w", err)
	} else if copied {
		dropMapped(h)
		return w, nil
	}
	if h.Numel() <= vectorLimit {
		f, err := h.Float32s()
		if err != nil {
			return nil, fmt.Errorf("cpu: upload: %w", err)
		}
		w.f32 = f
		dropMapped(h)
		return w, nil
	}
	switch h.Format {
	case tensor.F32:
		if p, ok := view[float32](h.Data); ok {
			w.f32 = p
		}
	case tensor.BF16, tensor.F16:
		if p, ok := view[uint16](h.Data); ok {
			w.u16 = p
		}
	}
	return w, nil
}

// dropMapped releases the memory-mapped pages of a tensor the backend has
// copied (tensor.DropPages: only registered read-only file mappings), so a
// packed model is not resident twice.
func dropMapped(h *tensor.Host) {
	for _, x := range []*tensor.Host{h, h.Scales, h.Biases} {
		if x != nil {
			tensor.DropPages(x.Data)
		}
	}
}

// view reinterprets little-endian bytes as []T without copying, when the
// host is little-endian and the data aligned (else the caller decodes).
func view[T uint16 | float32](b []byte) ([]T, bool) {
	var z T
	size := int(unsafe.Sizeof(z))
	if !littleEndian || len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%uintptr(size) != 0 {
		return nil, false
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/size), true
}

// rowF32 returns row r of w as float32: a view for F32, else decoded into buf.
func (w *Weight) rowF32(r int, buf []float32) []float32 {
	c := w.cols
	switch {
	case w.f32 != nil:
		return w.f32[r*c : (r+1)*c : (r+1)*c]
	case w.u16 != nil && w.format == tensor.BF16:
		src := w.u16[r*c : (r+1)*c]
		for i, v := range src {
			buf[i] = tensor.BF16ToF32(v)
		}
		return buf
	case w.u16 != nil && w.format == tensor.F16:
		tab := f16Table()
		src := w.u16[r*c : (r+1)*c]
		for i, v := range src {
			buf[i] = tab[v]
		}
		return buf
	case w.k != nil:
		w.k.DecodeRow(r, buf)
		return buf
	default:
		if err := w.host.DecodeRow(r, buf); err != nil {
			panic(fmt.Sprintf("cpu: %v", err)) // validated at upload
		}
		return buf
	}
}

var (
	f16Once sync.Once
	f16Tab  []float32
)

func f16Table() []float32 {
	f16Once.Do(func() {
		f16Tab = make([]float32, 1<<16)
		for i := range f16Tab {
			f16Tab[i] = tensor.F16ToF32(uint16(i))
		}
	})
	return f16Tab
}

// ReleaseWeight drops the reference to the weight's bytes.
func (b *Backend) ReleaseWeight(w engine.Weight) {
	x := ww(w)
	x.f32, x.u16, x.host, x.k = nil, nil, nil, nil
}

// KVValueBytes is the size of one cached K or V value in the paged blocks
// (engine.KVValueSizer): 1.125 with Config.KVQ8 (a 4-byte scale per 32),
// 2 with Config.KVF16, else 4.
func (b *Backend) KVValueBytes() float64 {
	switch {
	case b.kvQ8:
		return 1 + 4.0/q8Block
	case b.kvF16:
		return 2
	}
	return 4
}
