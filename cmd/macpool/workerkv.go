package main

// Worker KV-cache flags (--kv-bytes, --no-prefix-cache, --kv-f32, --kv-cache).

import (
	"flag"

	"github.com/macpool/macpool/runner"
)

// kvFlags configure the engine's paged KV cache.
type kvFlags struct {
	bytes         runner.Bytes
	noPrefixCache bool
	f32           bool
	cache         runner.KVCache
}

func (f *kvFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.bytes, "kv-bytes", "KV cache budget, e.g. 2GiB or 512MiB (default: metal/auto: the backend's own budget; cpu on a Mac: the GPU's recommended working set minus the weights; elsewhere the engine's default, 2GiB at most)")
	fs.BoolVar(&f.noPrefixCache, "no-prefix-cache", false, "do not reuse cached prompt prefixes (the KV cache is still paged)")
	fs.BoolVar(&f.f32, "kv-f32", false, "keep the cpu backend's KV cache in float32 (default: half precision, as llama.cpp: half the memory and the bytes attention reads, ~1e-3 relative difference)")
	fs.Var(&f.cache, "kv-cache", runner.KVCacheHelp+"; overrides --kv-f32")
}

// settings are the worker's engine settings for every model it loads.
func (f *workerFlags) settings() runner.Settings {
	return runner.Settings{Backend: f.backend, Threads: f.threads, Slots: f.slots,
		KVBytes: int64(f.kv.bytes), NoPrefixCache: f.kv.noPrefixCache, KVF32: f.kv.f32, KVCache: f.kv.cache}
}
