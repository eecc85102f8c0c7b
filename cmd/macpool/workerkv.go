package main

// Worker KV-cache flags (--kv-bytes, --no-prefix-cache) and the worker's
// prefix summary for prefix-aware routing (owner: routing; docs/cluster.md,
// "Prefix-aware routing").

import (
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/engine/serve"
)

// kvFlags configure the engine's paged KV cache.
type kvFlags struct {
	bytes         byteSize
	noPrefixCache bool
	f32           bool
}

func (f *kvFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.bytes, "kv-bytes", "KV cache budget, e.g. 2GiB or 512MiB (default: metal/auto: the backend's own budget; cpu on a Mac: the GPU's recommended working set minus the weights; elsewhere the engine's default, 2GiB at most)")
	fs.BoolVar(&f.noPrefixCache, "no-prefix-cache", false, "do not reuse cached prompt prefixes (the KV cache is still paged)")
	fs.BoolVar(&f.f32, "kv-f32", false, "keep the cpu backend's KV cache in float32 (default: half precision, as llama.cpp: half the memory and the bytes attention reads, ~1e-3 relative difference)")
}

// apply sets the KV budget and prefix cache of cfg, whose ModelDir and
// Backend are set. Without --kv-bytes the budget of the cpu backend is
// derived here (defaultKVBytes); the others (metal, and auto, which is
// metal on a Mac with a GPU) budget themselves (engine.KVBudgeter: the
// working set less the uploaded weights) or take the engine's default.
func (f *kvFlags) apply(cfg *serve.Config) {
	cfg.NoPrefixCache = f.noPrefixCache
	cfg.KVF16 = !f.f32
	cfg.KVBytes = int64(f.bytes)
	if cfg.KVBytes == 0 && cfg.Backend == "cpu" {
		cfg.KVBytes = defaultKVBytes(weightBytes(cfg.ModelDir))
	}
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

// weightBytes is the size of the checkpoint's weight files (safetensors,
// GGUF) at path, a folder or a file; 0 if unknown.
func weightBytes(path string) int64 {
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

// byteSize is a flag value in bytes written as a number with an optional
// unit: B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers of 1024).
type byteSize int64

func (b *byteSize) String() string {
	if b == nil || *b == 0 {
		return "0"
	}
	return formatByteSize(int64(*b))
}

func (b *byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

var byteUnits = []struct {
	suffix string
	scale  float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// parseByteSize parses "2GiB", "512MiB", "1.5GB", "1048576".
func parseByteSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	scale := 1.0
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, scale = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.scale
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (e.g. 2GiB, 512MiB)", s)
	}
	if v < 0 || math.IsNaN(v) || v*scale > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: out of range", s)
	}
	return int64(v * scale), nil
}

func formatByteSize(n int64) string {
	for _, u := range []struct {
		suffix string
		scale  int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.scale && n%u.scale == 0 {
			return fmt.Sprintf("%d%s", n/u.scale, u.suffix)
		}
	}
	return strconv.FormatInt(n, 10)
}

// RoutingSummary implements worker.PrefixSummarizer: the prefix keys the
// serve engine recorded and its KV pool's room.
func (e serveEngine) RoutingSummary(max int) cluster.PrefixSummary {
	s := e.Engine.PrefixSummary(max)
	return cluster.PrefixSummary{Keys: s.Keys, BlockSize: s.BlockSize, Blocks: s.Blocks, FreeBlocks: s.FreeBlocks}
}
