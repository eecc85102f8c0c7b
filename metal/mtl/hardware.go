package mtl

// HardwareInfo is what the cluster gossips about a Mac's GPU.
type HardwareInfo struct {
	Chip          string // Metal device name, e.g. "Apple M2 Pro"
	GPUCores      int    // IORegistry AGXAccelerator "gpu-core-count" (0 if unknown)
	UnifiedMemory uint64 // bytes of RAM shared by CPU and GPU (hw.memsize)
	// RecommendedMaxWorkingSet is MTLDevice.recommendedMaxWorkingSetSize:
	// how many bytes the GPU can use without hurting performance.
	RecommendedMaxWorkingSet uint64
	HasUnifiedMemory         bool
}
