package runner

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSettingsConfig(t *testing.T) {
	dir := t.TempDir()
	for name, size := range map[string]int{"model-00001.safetensors": 3000, "model-00002.safetensors": 1000, "config.json": 500} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := WeightBytes(dir); got != 4000 {
		t.Errorf("WeightBytes = %d, want 4000 (safetensors only)", got)
	}
	if got := kvBudgetFrom(48<<30, 16<<30); got != 31<<30 {
		t.Errorf("kvBudgetFrom(48GiB, 16GiB) = %d, want 31GiB", got)
	}
	if got := kvBudgetFrom(8<<30, 9<<30); got != minKVBytes {
		t.Errorf("kvBudgetFrom(8GiB, 9GiB) = %d, want the minimum %d", got, int64(minKVBytes))
	}

	cfg := Settings{Backend: "cpu", KVBytes: 512 << 20, NoPrefixCache: true, Slots: 3, Threads: 2}.Config(dir, "m")
	if cfg.KVBytes != 512<<20 || !cfg.NoPrefixCache || cfg.MaxSeqs != 3 || cfg.Threads != 2 || !cfg.KVF16 || cfg.ModelDir != dir || cfg.ModelName != "m" {
		t.Errorf("explicit settings: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if cfg = (Settings{Backend: "cpu"}).Config(dir, "m"); cfg.NoPrefixCache || cfg.KVBytes != defaultKVBytes(4000) || cfg.MaxSeqs != DefaultConfig().MaxSeqs {
		t.Errorf("cpu defaults: KVBytes %d (want %d) NoPrefixCache %v MaxSeqs %d", cfg.KVBytes, defaultKVBytes(4000), cfg.NoPrefixCache, cfg.MaxSeqs)
	}
	if cfg = (Settings{Backend: "cpu", KVF32: true}).Config(dir, "m"); cfg.KVF16 {
		t.Error("KVF32 still gives a half-precision cache")
	}
	for _, be := range []string{"metal", "auto"} {
		if cfg = (Settings{Backend: be}).Config(dir, "m"); cfg.KVBytes != 0 {
			t.Errorf("%s without a budget: KVBytes %d, want 0 (the backend budgets itself)", be, cfg.KVBytes)
		}
	}
}

// --kv-cache names the engine's KV storage and overrides --kv-f32; bad
// names are refused when the flag is set.
func TestKVCacheSetting(t *testing.T) {
	for _, tc := range []struct {
		cache   KVCache
		f32     bool
		f16, q8 bool
	}{
		{"", false, true, false}, {"", true, false, false}, {"f32", false, false, false},
		{"f16", true, true, false}, {"q8_0", false, false, true}, {"q8_0", true, false, true},
	} {
		cfg := Settings{Backend: "cpu", KVF32: tc.f32, KVCache: tc.cache, KVBytes: 1 << 20}.Config("m", "m")
		if cfg.KVF16 != tc.f16 || cfg.KVQ8 != tc.q8 {
			t.Errorf("kv cache %q, kv-f32 %v: KVF16 %v KVQ8 %v, want %v %v", tc.cache, tc.f32, cfg.KVF16, cfg.KVQ8, tc.f16, tc.q8)
		}
	}
	var k KVCache
	if err := k.Set("q4_0"); err == nil {
		t.Error("kv cache q4_0 accepted")
	}
}
