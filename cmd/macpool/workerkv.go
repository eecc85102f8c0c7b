package main

// Worker KV-cache flags (--kv-bytes, --no-prefix-cache, --kv-f32).

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/macpool/macpool/runner"
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

// settings are the worker's engine settings for every model it loads.
func (f *workerFlags) settings() runner.Settings {
	return runner.Settings{Backend: f.backend, Threads: f.threads, Slots: f.slots,
		KVBytes: int64(f.kv.bytes), NoPrefixCache: f.kv.noPrefixCache, KVF32: f.kv.f32}
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
