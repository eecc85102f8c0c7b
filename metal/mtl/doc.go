// Package mtl is the real Metal device behind metal/gpu on macOS (Apple
// silicon), driven through the Objective-C runtime with purego (no cgo):
// MTLDevice, shared-storage buffers (weights wrapped in place with
// newBufferWithBytesNoCopy over their page-aligned mapping), a library
// compiled at run time from MSL source (newLibraryWithSource, fast math
// off), cached pipelines, and one compute encoder per command buffer.
// It also reads the hardware facts the cluster gossips (Hardware).
package mtl
