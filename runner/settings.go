package runner

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Settings are a worker's engine settings, the same for every model it
// serves (its -model and the models placed on it later). Config is the one
// place a runner Config is built from them.
type Settings struct {
	Backend string // engine backend name: auto, cpu, metal, metal-emulated
	Threads int    // 0: every core
	Slots   int    // sequences decoded at once
	// KVBytes is the KV cache budget; 0 derives it (see Config).
	KVBytes       int64
	NoPrefixCache bool
	KVF32         bool // keep the cpu backend's KV cache in float32
	// KVCache is the cpu backend's KV cache storage; it overrides KVF32
	// when set.
	KVCache KVCache
}

// KVCache is a KV cache storage type, as llama.cpp's -ctk/-ctv name them:
// "f16" (the default), "f32" or "q8_0" (engine.Options.KVQ8); "" leaves
// the default. It is a flag.Value.
type KVCache string

// KVCacheHelp describes the values of a --kv-cache flag.
const KVCacheHelp = "cpu backend KV cache storage: f16 (default, as llama.cpp), f32, or q8_0 (8-bit blocks as llama.cpp's -ctk/-ctv q8_0: 56% of f16's memory, logits ~1e-2 rel. L2 from f32; docs/engine.md)"

func (k *KVCache) String() string { return string(*k) }

func (k *KVCache) Set(s string) error {
	switch s {
	case "f16", "f32", "q8_0":
		*k = KVCache(s)
		return nil
	}
	return fmt.Errorf("kv cache %q: want f16, f32 or q8_0", s)
}

// Apply sets f16 and q8 (engine.Options.KVF16, KVQ8) as k says; "" keeps
// them.
func (k KVCache) Apply(f16, q8 *bool) {
	switch k {
	case "f16":
		*f16, *q8 = true, false
	case "f32":
		*f16, *q8 = false, false
	case "q8_0":
		*f16, *q8 = false, true
	}
}

// Config returns the runner configuration of the model at modelDir served
// as name. Without a KV budget the cpu backend's is derived here from the
// machine and the weights (defaultKVBytes); the other backends (metal, and
// auto, which is metal on a Mac with a GPU) budget themselves
// (engine.KVBudgeter: the working set less the uploaded weights) or take
// the engine's default.
func (s Settings) Config(modelDir, name string) Config {
	return s.config(modelDir, name, func() int64 { return WeightBytes(modelDir) })
}

// StageConfig is Config for a pipeline stage of the model at modelDir
// whose own weights are weights bytes: the same flags and rules, the
// derived KV budget from the stage's weights (the memory the stage leaves
// on this machine), not the whole model's.
func (s Settings) StageConfig(modelDir, name string, weights int64) Config {
	return s.config(modelDir, name, func() int64 { return weights })
}

func (s Settings) config(modelDir, name string, weights func() int64) Config {
	cfg := DefaultConfig()
	cfg.ModelDir = modelDir
	cfg.ModelName = name
	cfg.Backend = s.Backend
	cfg.Threads = s.Threads
	if s.Slots > 0 {
		cfg.MaxSeqs = s.Slots
	}
	cfg.NoPrefixCache = s.NoPrefixCache
	cfg.KVF16 = !s.KVF32
	s.KVCache.Apply(&cfg.KVF16, &cfg.KVQ8)
	cfg.KVBytes = s.KVBytes
	if cfg.KVBytes == 0 && cfg.Backend == "cpu" {
		cfg.KVBytes = defaultKVBytes(weights())
	}
	return cfg
}

// kvHeadroom is memory left for activations and scratch buffers when the
// KV budget is derived from the machine's memory; minKVBytes is the least
// budget derived that way.
const (
	kvHeadroom = 1 << 30
	minKVBytes = 256 << 20
)

// kvBudgetFrom is the KV budget on a machine whose accelerator may use
// workingSet bytes, for weights of the given size: what is left after the
// weights and kvHeadroom, at least minKVBytes.
func kvBudgetFrom(workingSet, weights int64) int64 {
	return max(workingSet-weights-kvHeadroom, minKVBytes)
}

// WeightBytes is the size of the checkpoint's weight files (safetensors,
// GGUF) at path, a folder or a file; 0 if unknown.
func WeightBytes(path string) int64 {
	var n int64
	filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if p != path {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := strings.ToLower(filepath.Ext(p)); ext == ".safetensors" || ext == ".gguf" || ext == ".bin" {
			if st, err := os.Stat(p); err == nil { // follows the HF cache's symlinks
				n += st.Size()
			}
		}
		return nil
	})
	return n
}
