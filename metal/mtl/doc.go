// Package mtl is the real Metal device behind metal/gpu, driven through the
// Objective-C runtime with purego (no cgo): MTLDevice (Apple-silicon GPUs
// with Metal 3 only), shared-storage buffers (weights wrapped in place with
// newBufferWithBytesNoCopy over their page-aligned mapping), a library
// compiled at run time from MSL source (language version and math mode
// pinned), cached pipelines (32-wide SIMD-groups checked), one compute
// encoder per command buffer, autorelease pools around every batch of
// messages. It also reads the hardware facts the cluster gossips (Hardware).
//
// The same host code builds on Linux against metal/mtl/fake, a fake
// Objective-C runtime and Metal device whose kernels run in the emulator,
// so CI executes every message a Mac would send.
package mtl
