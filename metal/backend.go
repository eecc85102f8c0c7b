// Package metal is the Apple GPU backend: an engine.Backend whose ops encode
// Metal compute dispatches (kernels from metal/kernels) into one command
// buffer per forward pass, on any metal/gpu device: the real GPU (metal/mtl,
// darwin, registered as "metal") or the emulator (metal/emu, Linux,
// registered as "metal-emulated", for verification). Activations are float32
// in shared memory; weights stay in their stored format, wrapped in place
// where the device allows it. Only Read waits for the GPU.
package metal

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/tensor"
	"github.com/macpool/macpool/metal/gpu"
	"github.com/macpool/macpool/metal/kernels"
)

// Config configures a Backend.
type Config struct {
	// Device runs the kernels (mtl.New on a Mac, emu.New on Linux).
	Device gpu.Device
	// Name is what Backend.Name reports ("metal", "metal-emulated").
	Name string
	// SplitDispatches: after this many dispatches the current command
	// buffer is committed without waiting and encoding goes on in a new
	// one (same queue: they run in order), so the GPU works on the first
	// layers while the CPU still encodes the rest of the pass. 0 means
	// DefaultSplitDispatches; negative, one command buffer per sync.
	SplitDispatches int
	// NoFusion encodes every op as its own dispatch (metal/fuse.go: the
	// fused kernels give the same bits; tests compare both).
	NoFusion bool
}

// DefaultSplitDispatches is Config.SplitDispatches' default: a few
// command buffers per forward pass of a real model (Qwen3-0.6B decode
// encodes ~450 dispatches), each large enough that its commit costs little.
const DefaultSplitDispatches = 64

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Device == nil {
		return fmt.Errorf("metal: config without a device")
	}
	return nil
}

// Weight storage formats, as FMT_* in common.h.
const (
	fmtF32 = iota
	fmtF16
	fmtBF16
	fmtQ8_0
	fmtQ4_0
	fmtMLX
	fmtQ4_K
	fmtQ6_K
	fmtQ5_K
)

// Backend implements engine.Backend on a gpu.Device. Not safe for
// concurrent use (one forward pass at a time), as engine.Backend says.
type Backend struct {
	name  string
	dev   gpu.Device
	pipes map[string]gpu.Pipeline
	// missing explains kernels that did not compile (ops using them panic).
	missing map[string]error
	cb      gpu.CommandBuffer
	ncb     int        // dispatches in cb
	split   int        // Config.SplitDispatches resolved (0: never)
	flight  []inflight // committed, not yet waited for (in order)
	seq     int        // command buffers committed so far (flight entries are numbered by it)
	syncs   int        // syncs that waited for work (tests)
	held    *heldOp    // an op held back for fusion with the next (fuse.go)
	heads   []*heldOp  // per-head norms held back for rmsnorm_rope (fuse.go)
	noFuse  bool       // Config.NoFusion
	// tok is the ring of device token slots (devtok.go).
	tok [tokSlots]tokSlot
	// attnChunk is the positions per split of split (flash-decoding)
	// paged attention (a multiple of 32; tests lower it).
	attnChunk int
	// Reused device scratch (no buffer allocation per layer or token):
	// split attention's partial results, shared by every layer of a pass
	// (dispatches run serially), and Argmax's output ids.
	attnPart, argOut gpu.Buffer
	moeIdx, moeWts   gpu.Buffer // MoE routing (expert ids, weights) of the current layer
	// pending holds buffers that the current command buffer may still use
	// (released tensors, staging uploads, outgrown KV buffers); they are
	// freed after the next sync.
	pending []gpu.Buffer
	// retired holds buffers of caches freed from other goroutines (a
	// serving loop frees a finished sequence's cache while the next pass
	// runs); released after the next sync like pending. Guarded by rmu.
	rmu     sync.Mutex
	retired []gpu.Buffer
	dummy   gpu.Buffer
	moe     map[*engine.MoEWeights]*moeTables
	closed  bool
	// weightBytes is the device memory of the uploaded weights (KV budget).
	weightBytes atomic.Int64
	// Dispatch trace (StartTrace): records, and the command buffer count.
	tracing bool
	trace   []DispatchRecord
	traceCB int
}

var _ engine.Backend = (*Backend)(nil)

var pipelineNames = []string{"embed", "matmul", "matmul_gate_up", "rmsnorm", "rope", "store_kv", "attention", "swiglu", "sigmoid_mul", "add", "copy2d", "deinterleave", "gather",
	"dn_conv", "dn_conv_state", "dn_rule", "dn_gated_norm", "moe_route", "moe_matmul", "moe_gate_up", "moe_combine", "moe_down_combine", "argmax",
	"store_kv_paged", "attention_paged", "attention_paged_part", "attention_combine",
	"rmsnorm_matmul", "matmul_add", "embed_ref", "rmsnorm_rope", "matmul_multi", "dn_conv_both", "moe_route_gate_up", "attention_gated", "dn_step", "rmsnorm_rope_kv"}

// maxGroupThreads is the largest threadgroup any op dispatches (the
// elementwise kernels' 256).
const maxGroupThreads = 256

// New compiles the kernel library on cfg.Device and prepares its pipelines.
// The backend owns the device from here on (Close closes it).
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = "metal"
	}
	files, err := kernels.Files()
	if err != nil {
		return nil, err
	}
	b := &Backend{name: cfg.Name, dev: cfg.Device, pipes: map[string]gpu.Pipeline{}, missing: map[string]error{}, noFuse: cfg.NoFusion}
	b.attnChunk = defaultAttnChunk
	switch {
	case cfg.SplitDispatches == 0:
		b.split = DefaultSplitDispatches
	case cfg.SplitDispatches > 0:
		b.split = cfg.SplitDispatches
	}
	// One library per .metal file: the dense path must compile; a hybrid
	// file that fails only disables its ops (they panic naming the error).
	var libs []gpu.Library
	libErr := map[string]error{}
	for _, f := range files {
		lib, err := cfg.Device.Compile(f.Source)
		if err != nil {
			if f.Name == "dense.metal" {
				return nil, fmt.Errorf("metal: compile %s: %w", f.Name, err)
			}
			libErr[f.Name] = fmt.Errorf("compile %s: %w", f.Name, err)
			continue
		}
		libs = append(libs, lib)
	}
	for _, n := range pipelineNames {
		for _, lib := range libs {
			if p, err := lib.Pipeline(n); err == nil {
				b.pipes[n] = p
				break
			}
		}
		if b.pipes[n] == nil {
			b.missing[n] = fmt.Errorf("kernel %s not in any library (%v)", n, libErr)
		}
	}
	for n, p := range b.pipes {
		if p.MaxThreads() < maxGroupThreads {
			return nil, fmt.Errorf("metal: kernel %s allows %d threads per threadgroup; the backend dispatches up to %d", n, p.MaxThreads(), maxGroupThreads)
		}
	}
	if b.dummy, err = b.dev.NewBuffer(64); err != nil {
		return nil, err
	}
	return b, nil
}

// Name implements engine.Backend.
func (b *Backend) Name() string { return b.name }

// Device is the device the backend runs on.
func (b *Backend) Device() gpu.Device { return b.dev }

// Close waits for pending work and frees the device; idempotent.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	err := b.sync()
	b.closed = true
	for _, t := range b.moe {
		for _, x := range []*moeTable{t.gate, t.up, t.down} {
			x.table.Release()
		}
	}
	b.dummy.Release()
	for _, s := range b.tok {
		if s.buf != nil {
			s.buf.Release()
		}
	}
	for _, x := range []gpu.Buffer{b.attnPart, b.argOut, b.moeIdx, b.moeWts} {
		if x != nil {
			x.Release()
		}
	}
	if cerr := b.dev.Close(); err == nil {
		err = cerr
	}
	return err
}

// Tensor is a float32 activation in a device buffer.
type Tensor struct {
	rows, cols int
	buf        gpu.Buffer
}

func (t *Tensor) Rows() int { return t.rows }
func (t *Tensor) Cols() int { return t.cols }

func tt(t engine.Tensor) *Tensor { return t.(*Tensor) }

// NewTensor implements engine.Backend.
func (b *Backend) NewTensor(rows, cols int) engine.Tensor {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("metal: tensor [%d, %d]", rows, cols))
	}
	buf, err := b.dev.NewBuffer(4 * max(rows*cols, 1))
	if err != nil {
		panic(fmt.Sprintf("metal: allocate tensor [%d, %d]: %v", rows, cols, err))
	}
	return &Tensor{rows: rows, cols: cols, buf: buf}
}

// Release implements engine.Backend; the memory is freed after the next sync.
func (b *Backend) Release(t engine.Tensor) {
	x := tt(t)
	switch {
	case x.buf == nil:
	case !b.busy(): // nothing in flight can use it
		x.buf.Release()
	default:
		b.pending = append(b.pending, x.buf)
	}
	x.buf = nil
}

// Write implements engine.Backend: the values are staged and copied in
// command order, so Write may follow ops that still use t.
func (b *Backend) Write(t engine.Tensor, src []float32) {
	x := tt(t)
	n := x.rows * x.cols
	if len(src) != n {
		panic(fmt.Sprintf("metal: write %d values into [%d, %d]", len(src), x.rows, x.cols))
	}
	if n == 0 {
		return
	}
	if !b.busy() { // nothing in flight: write in place
		copy(f32s(x.buf.Bytes()), src)
		return
	}
	st, err := b.dev.NewBuffer(4 * n)
	if err != nil {
		panic(fmt.Sprintf("metal: staging buffer: %v", err))
	}
	copy(f32s(st.Bytes()), src)
	b.pending = append(b.pending, st)
	b.copy2d(x.buf, x.cols, 0, 0, st, x.cols, 0, 0, x.rows, x.cols)
}

// Read implements engine.Backend: submits what is enqueued, waits, copies.
func (b *Backend) Read(t engine.Tensor, dst []float32) error {
	x := tt(t)
	if len(dst) != x.rows*x.cols {
		panic(fmt.Sprintf("metal: read [%d, %d] into %d values", x.rows, x.cols, len(dst)))
	}
	if err := b.sync(); err != nil {
		return err
	}
	copy(dst, f32s(x.buf.Bytes()))
	return nil
}

// inflight is a committed command buffer with the buffers that may be
// freed once it has completed (those released while it or an earlier one
// was being encoded).
type inflight struct {
	cb   gpu.CommandBuffer
	seq  int // its number: 1 for the first command buffer committed
	free []gpu.Buffer
}

// busy says whether encoded work may not have run yet.
func (b *Backend) busy() bool {
	return b.cb != nil || len(b.flight) > 0 || b.held != nil || len(b.heads) > 0
}

// commit submits the current command buffer without waiting; the buffers
// pending so far are freed once it has completed.
func (b *Backend) commit() {
	b.flush()
	if b.cb == nil {
		return
	}
	b.cb.Commit()
	b.seq++
	b.flight = append(b.flight, inflight{cb: b.cb, seq: b.seq, free: b.pending})
	b.pending = nil
	b.cb, b.ncb = nil, 0
	if b.tracing {
		b.traceCB++
	}
}

// sync commits the current command buffer, waits for every committed one
// (in order; the first error wins) and frees pending buffers.
func (b *Backend) sync() error {
	if b.busy() {
		b.syncs++
	}
	b.commit()
	err := b.waitThrough(b.seq)
	for _, p := range b.pending { // released with nothing in flight
		p.Release()
	}
	b.pending = b.pending[:0]
	b.rmu.Lock()
	retired := b.retired
	b.retired = nil
	b.rmu.Unlock()
	for _, p := range retired {
		p.Release()
	}
	return err
}

// waitThrough waits for the committed command buffers numbered up to seq
// (in order; the first error wins), not for later ones, and frees what
// they held. Buffers retired from other goroutines meanwhile are handed
// to the command buffer being encoded (freed after it completes), since
// later command buffers still in flight may use them.
func (b *Backend) waitThrough(seq int) error {
	var err error
	n := 0
	for _, f := range b.flight {
		if f.seq > seq {
			break
		}
		if werr := f.cb.Wait(); werr != nil && err == nil {
			err = werr
		}
		for _, p := range f.free {
			p.Release()
		}
		n++
	}
	clear(b.flight[:n])
	b.flight = append(b.flight[:0], b.flight[n:]...)
	if len(b.flight) > 0 {
		b.rmu.Lock()
		b.pending = append(b.pending, b.retired...)
		b.retired = nil
		b.rmu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("metal: %w", err)
	}
	return nil
}

// scratchBuf returns *p if it holds size bytes, else a new buffer of at
// least size bytes in *p (the old one is freed after the next sync: work in
// flight may still use it). Contents are undefined.
func (b *Backend) scratchBuf(p *gpu.Buffer, size int) gpu.Buffer {
	if *p != nil && (*p).Len() >= size {
		return *p
	}
	if *p != nil {
		b.pending = append(b.pending, *p)
		size = max(size, 2*(*p).Len())
	}
	nb, err := b.dev.NewBuffer(size)
	if err != nil {
		panic(fmt.Sprintf("metal: scratch buffer of %d bytes: %v", size, err))
	}
	*p = nb
	return nb
}

// retire frees cache buffers after the next sync; unlike the other ops it
// may be called from any goroutine (Cache.Free of a finished sequence).
func (b *Backend) retire(bufs ...gpu.Buffer) {
	b.rmu.Lock()
	b.retired = append(b.retired, bufs...)
	b.rmu.Unlock()
}

func (b *Backend) dispatch(name string, groups, threads [3]int, args ...gpu.Arg) {
	b.flush()
	b.encode(name, groups, threads, args...)
}

// encode is dispatch without flushing held ops first (a fused op that
// took its held op and leaves other, independent ones held).
func (b *Backend) encode(name string, groups, threads [3]int, args ...gpu.Arg) {
	p := b.pipes[name]
	if p == nil {
		panic(fmt.Sprintf("metal: %v", b.missing[name]))
	}
	if b.cb == nil {
		b.cb = b.dev.NewCommandBuffer()
	}
	b.cb.Dispatch(p, groups, threads, args...)
	if b.tracing {
		b.record(name, groups, threads, args)
	}
	// Split only after a dispatch: a Use before it stays in its buffer.
	if b.ncb++; b.split > 0 && b.ncb >= b.split {
		b.commit()
	}
}

// maxInlineBytes bounds inline kernel data: Apple documents
// setBytes:length:atIndex: for data smaller than 4 KiB (a 512-row paged
// table is exactly 4096 bytes and must take a buffer).
const maxInlineBytes = 4096 - 1

// hostArg passes small host data inline (setBytes) and larger data through
// a staging buffer freed after the next sync.
func (b *Backend) hostArg(data []byte) gpu.Arg {
	if len(data) <= maxInlineBytes {
		return gpu.Arg{Bytes: data}
	}
	st, err := b.dev.NewBuffer(len(data))
	if err != nil {
		panic(fmt.Sprintf("metal: staging buffer: %v", err))
	}
	copy(st.Bytes(), data)
	b.pending = append(b.pending, st)
	return gpu.Arg{Buf: st}
}

func buf(x gpu.Buffer) gpu.Arg { return gpu.Arg{Buf: x} }

// pack lays out uint32/int/float32 values as a constant struct of 4-byte fields.
func pack(vals ...any) []byte {
	out := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		switch v := v.(type) {
		case int:
			out = binary.LittleEndian.AppendUint32(out, uint32(v))
		case uint32:
			out = binary.LittleEndian.AppendUint32(out, v)
		case float32:
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
		default:
			panic(fmt.Sprintf("metal: pack %T", v))
		}
	}
	return out
}

func ints32(v []int) []byte {
	out := make([]byte, 0, 4*len(v))
	for _, x := range v {
		out = binary.LittleEndian.AppendUint32(out, uint32(int32(x)))
	}
	return out
}

func f32s(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func ceil(a, b int) int { return (a + b - 1) / b }

// Weight is an uploaded weight: raw bytes in its stored format (matrices) or
// float32 (vectors and formats without a kernel).
type Weight struct {
	rows, cols     int
	format         tensor.Format
	fmt            int
	data           gpu.Buffer
	off            int // offset of the data within data (wrapped mappings)
	scales, biases gpu.Buffer
	soff, boff     int
	params         []byte // WeightParams
	bytes          int64  // device memory held
}

func (w *Weight) Rows() int             { return w.rows }
func (w *Weight) Cols() int             { return w.cols }
func (w *Weight) Format() tensor.Format { return w.format }

func ww(w engine.Weight) *Weight { return w.(*Weight) }

// Upload implements engine.Backend. Matrices in F32/F16/BF16/Q8_0/Q4_0/
// Q4_K/Q5_K/Q6_K and MLX affine 4/8-bit are wrapped as stored (no copy where
// the device can map them); vectors, and matrices in formats without a
// kernel (other MLX widths, K-quant rows not made of whole 256-blocks), are
// decoded to float32.
func (b *Backend) Upload(h *tensor.Host) (engine.Weight, error) {
	rows, cols := h.Rows(), h.Cols()
	w := &Weight{rows: rows, cols: cols, format: h.Format}
	var err error
	native := len(h.Shape) >= 2 && cols%8 == 0
	switch h.Format {
	case tensor.F32:
		w.fmt = fmtF32
	case tensor.F16:
		w.fmt = fmtF16
	case tensor.BF16:
		w.fmt = fmtBF16
	case tensor.Q8_0:
		w.fmt = fmtQ8_0
		native = native && cols%32 == 0
	case tensor.Q4_0:
		w.fmt = fmtQ4_0
		native = native && cols%32 == 0
	case tensor.Q4_K:
		w.fmt = fmtQ4_K
		native = native && cols%256 == 0
	case tensor.Q6_K:
		w.fmt = fmtQ6_K
		native = native && cols%256 == 0
	case tensor.Q5_K:
		w.fmt = fmtQ5_K
		native = native && cols%256 == 0
	case tensor.MLXAffine:
		w.fmt = fmtMLX
		native = native && (h.Bits == 4 || h.Bits == 8) && h.GroupSize%8 == 0 && h.Scales != nil && h.Biases != nil
	default:
		native = false
	}
	rowBytes := 0
	if native {
		rowBytes = len(h.Data) / max(rows, 1)
		if w.data, w.off, err = b.wrap(h.Data); err != nil {
			return nil, fmt.Errorf("metal: upload %s: %w", h.Name, err)
		}
		if w.fmt == fmtMLX {
			if w.scales, w.soff, err = b.wrap(h.Scales.Data); err != nil {
				return nil, fmt.Errorf("metal: upload %s scales: %w", h.Name, err)
			}
			if w.biases, w.boff, err = b.wrap(h.Biases.Data); err != nil {
				return nil, fmt.Errorf("metal: upload %s biases: %w", h.Name, err)
			}
		}
	} else {
		w.fmt = fmtF32
		rowBytes = 4 * cols
		if w.data, err = b.dev.NewBuffer(4 * rows * cols); err != nil {
			return nil, fmt.Errorf("metal: upload %s: %w", h.Name, err)
		}
		dst := f32s(w.data.Bytes())
		for r := 0; r < rows; r++ {
			if err := h.DecodeRow(r, dst[r*cols:(r+1)*cols]); err != nil {
				w.data.Release()
				return nil, fmt.Errorf("metal: upload %s: %w", h.Name, err)
			}
		}
	}
	w.params = pack(w.fmt, rows, cols, rowBytes, h.Bits, h.GroupSize, scalarFmt(h.Scales), scalarFmt(h.Biases))
	for _, x := range []gpu.Buffer{w.data, w.scales, w.biases} {
		if x != nil {
			w.bytes += int64(x.Len())
		}
	}
	b.weightBytes.Add(w.bytes)
	return w, nil
}

func scalarFmt(h *tensor.Host) int {
	if h == nil {
		return 0
	}
	switch h.Format {
	case tensor.F16:
		return fmtF16
	case tensor.BF16:
		return fmtBF16
	}
	return fmtF32
}

func (b *Backend) wrap(data []byte) (gpu.Buffer, int, error) {
	buf, err := b.dev.WrapBytes(data)
	if err != nil {
		return nil, 0, err
	}
	return buf, buf.Offset(), nil
}

// ReleaseWeight implements engine.Backend.
func (b *Backend) ReleaseWeight(w engine.Weight) {
	x := ww(w)
	for _, p := range []gpu.Buffer{x.data, x.scales, x.biases} {
		if p != nil {
			b.pending = append(b.pending, p)
		}
	}
	x.data, x.scales, x.biases = nil, nil, nil
	b.weightBytes.Add(-x.bytes)
	x.bytes = 0
}

// weightArgs are the (W, S, B, WeightParams) arguments of embed and matmul.
func (b *Backend) weightArgs(w *Weight) []gpu.Arg {
	s, bs := gpu.Arg{Buf: b.dummy}, gpu.Arg{Buf: b.dummy}
	if w.scales != nil {
		s, bs = gpu.Arg{Buf: w.scales, Off: w.soff}, gpu.Arg{Buf: w.biases, Off: w.boff}
	}
	return []gpu.Arg{{Buf: w.data, Off: w.off}, s, bs, {Bytes: w.params}}
}
