package qwen_test

import (
	"path/filepath"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/internal/reftest"
)

// kvQ8Bounds are the stated accuracy cost of the 8-bit KV cache
// (engine.Options.KVQ8): the largest relative L2 error of any position's
// logits against a float32 cache (exact matrix products, so that only the
// cache differs). Measured (64 positions): dense qwen3 0.019, GGUF
// qwen3-q8_0 0.015, the hybrids 0.003-0.005 (a quarter of their layers
// attend), qwen3_moe 0.37 (a tiny random MoE: a changed expert choice
// moves a position's logits whole); the f16 cache ≤ 7.5e-4 on the same
// runs. llama.cpp's own q8_0 cache on qwen3-q8_0.gguf: 0.036 against its
// f16 cache (anchor logits dump, testdata/gguf/ref.json's ids).
var kvQ8Bounds = map[string]float64{
	"qwen3": 0.03, "gguf:qwen3-q8_0": 0.03, "qwen3_moe": 0.5,
	"qwen3_next": 0.01, "qwen3_5": 0.01, "qwen3_5_moe": 0.01,
}

// TestKVQ8Accuracy runs each fixture's reference prompt through the
// contiguous and the paged cache, a prompt pass of 40 tokens and 24
// one-token decode steps (each step stores and reads its position through
// the 8-bit path), with the 8-bit KV cache and with a float32 one, and holds
// every position's logits to its kvQ8Bounds entry.
func TestKVQ8Accuracy(t *testing.T) {
	for _, name := range []string{"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe", "gguf:qwen3-q8_0"} {
		bound := kvQ8Bounds[name]
		dir := hybridDir(name)
		if n, ok := cutGGUF(name); ok {
			dir = filepath.Join("..", "..", "testdata", "gguf", n+".gguf")
		}
		for _, paged := range []bool{false, true} {
			kind := "contiguous"
			if paged {
				kind = "paged"
			}
			t.Run(name+"/"+kind, func(t *testing.T) {
				run := func(o engine.Options) []float32 {
					o.Threads, o.ExactMatMul = 2, true
					m, err := engine.Load(dir, o)
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					c := newCache(t, m)
					if paged {
						c = pagedCache(t, newPool(t, m, 16, 64))
					}
					ids := randomIDs(11, 64, m.VocabSize())
					out := allLogits(t, m, c, ids[:40])
					for _, id := range ids[40:] {
						out = append(out, fwd(t, m, engine.Seq{Cache: c, Tokens: []int{id}})[0]...)
					}
					return out
				}
				f32, q8, f16 := run(engine.Options{}), run(engine.Options{KVQ8: true}), run(engine.Options{KVF16: true})
				vocab := len(f32) / 64
				e, e16 := reftest.MaxRelL2(q8, f32, vocab), reftest.MaxRelL2(f16, f32, vocab)
				t.Logf("%s %s: 8-bit KV vs float32 KV: max rel-L2 %.3g over 64 positions (f16 KV: %.3g)", name, kind, e, e16)
				if e > bound || e == 0 {
					t.Errorf("8-bit KV cache: max rel-L2 %.3g against the float32 cache, want (0, %g]", e, bound)
				}
			})
		}
	}
}

func cutGGUF(name string) (string, bool) {
	const p = "gguf:"
	if len(name) > len(p) && name[:len(p)] == p {
		return name[len(p):], true
	}
	return "", false
}
