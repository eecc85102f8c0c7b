// Package gpu is the device interface the metal backend is written against:
// buffers in memory shared by CPU and GPU, a library compiled at run time from
// Metal Shading Language source, compute pipelines by kernel name, and command
// buffers holding many dispatches that run in order with no CPU round trip.
//
// Two implementations exist: metal/mtl (Apple GPU through the Objective-C
// runtime, darwin only) and metal/emu (Linux: the same .metal sources compiled
// as C++ and run on the CPU with threadgroup and SIMD-group semantics, for
// verification in CI).
package gpu

// Device creates buffers, libraries and command buffers. It is safe for
// concurrent use; command buffers are not.
type Device interface {
	// Name is the device name ("Apple M2 Pro", "metal-emulated").
	Name() string
	// NewBuffer allocates size bytes of shared (CPU-visible) memory, zeroed.
	NewBuffer(size int) (Buffer, error)
	// WrapBytes makes host memory visible to kernels. When b lies in a
	// page-aligned mapping the device may use it in place (no copy); the
	// caller must keep b alive and unmodified until the buffer is released.
	// The returned buffer's contents start at Offset() within it.
	WrapBytes(b []byte) (Buffer, error)
	// Compile builds a library from one self-contained MSL source (no
	// #include of files: metal/kernels.Source inlines them).
	Compile(src string) (Library, error)
	// NewCommandBuffer starts an empty command buffer.
	NewCommandBuffer() CommandBuffer
	// Close frees the device's resources; idempotent.
	Close() error
}

// Buffer is device memory visible to the host through Bytes.
type Buffer interface {
	// Bytes is the buffer's usable memory (len = Len(), from Offset()). Writing it while a command
	// buffer that uses the buffer runs is a data race.
	Bytes() []byte
	// Len is the usable size in bytes, counted from Offset.
	Len() int
	// Offset is where the usable bytes start within the underlying device
	// buffer (non-zero for WrapBytes of an unaligned slice: the device maps
	// the enclosing pages). Arg.Off is absolute, so bind wrapped bytes at
	// Off = Offset() + position.
	Offset() int
	// GPUAddress is the device address of the start of the underlying
	// buffer (Metal 3 gpuAddress; the host address in the emulator), for
	// pointer tables read by kernels (MoE expert weights). Buffers reached
	// this way must be declared with CommandBuffer.Use.
	GPUAddress() uint64
	// Release frees the buffer; idempotent.
	Release()
}

// Library is compiled kernel code.
type Library interface {
	// Pipeline returns the (cached) compute pipeline of a kernel function.
	Pipeline(name string) (Pipeline, error)
}

// Pipeline is one compiled kernel.
type Pipeline interface {
	Name() string
	// MaxThreads is the largest threadgroup this pipeline can run.
	MaxThreads() int
}

// Arg is one kernel argument, bound at [[buffer(i)]] for Args[i]: either a
// buffer range (Buf at byte offset Off) or small inline constant bytes
// (setBytes; copied at Dispatch time).
type Arg struct {
	Buf   Buffer
	Off   int
	Bytes []byte
}

// CommandBuffer records dispatches; Commit submits them and Wait blocks until
// they have run. Dispatches run in recording order, each seeing the memory
// writes of the ones before it.
type CommandBuffer interface {
	// Dispatch runs groups[0]×groups[1]×groups[2] threadgroups of
	// threads[0]×threads[1]×threads[2] threads each.
	Dispatch(p Pipeline, groups, threads [3]int, args ...Arg)
	// Use makes buffers that kernels reach through pointer tables (not as
	// arguments) resident for the dispatches that follow (useResource:usage:).
	Use(bufs ...Buffer)
	// Commit submits the recorded dispatches; no more may be added.
	Commit()
	// Wait blocks until a committed buffer has finished and returns the
	// first execution error.
	Wait() error
}
