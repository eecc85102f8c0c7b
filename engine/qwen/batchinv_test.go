package qwen_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/macpool/macpool/engine"
)

// Generated positions get the same logits, bit for bit, whether they were
// decoded one per pass or prefilled together after the prompt (a failover
// resume, or a recompute after preemption), however the prompt was chunked
// and whatever else shared the batch: a seeded or greedy continuation then
// equals the uninterrupted run. engine.Seq.PromptEnd marks where generation
// began. Dense and MoE attention models; the hybrid models (Gated DeltaNet)
// are checked by TestHybridBatchInvariantLogits (docs/engine.md, "Batch invariance").
func TestBatchInvariantLogits(t *testing.T) {
	const prompt = 30
	for _, tc := range []struct {
		name string
		f16  bool
	}{{"qwen3", false}, {"qwen3_moe", false}, {"qwen3", true}} {
		t.Run(fmt.Sprintf("%s/kvf16=%v", tc.name, tc.f16), func(t *testing.T) {
			m, err := engine.Load(hybridDir(tc.name), engine.Options{Threads: 2, KVF16: tc.f16})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			ids := randomIDs(11, 48, m.VocabSize())
			p := newPool(t, m, 16, 96)
			seq := func(c *engine.Cache, toks []int) engine.Seq {
				return engine.Seq{Cache: c, Tokens: toks, PromptEnd: prompt}
			}
			// Decoded: the prompt in one pass, then one token per pass next
			// to other sequences' prefills.
			dec := pagedCache(t, p)
			fwd(t, m, seq(dec, ids[:prompt]))
			var decoded []float32
			for pos := prompt; pos < len(ids); pos++ {
				other := pagedCache(t, p)
				decoded = fwd(t, m, seq(dec, ids[pos:pos+1]), engine.Seq{Cache: other, Tokens: ids[:5+pos%7]})[0]
				other.Free()
			}
			// Resumed: prompt and generated tokens in one prefill.
			one := fwd(t, m, seq(pagedCache(t, p), ids))[0]
			// Resumed in chunks (7 + 41) beside another sequence's prefill.
			ch, other := pagedCache(t, p), pagedCache(t, p)
			fwd(t, m, seq(ch, ids[:7]), engine.Seq{Cache: other, Tokens: ids[3:20]})
			chunked := fwd(t, m, seq(ch, ids[7:]), engine.Seq{Cache: other, Tokens: ids[20:23]})[0]
			// Prompt chunked differently (17 + 3 + 10: a small chunk past a
			// full block), then decoded.
			dec2 := pagedCache(t, p)
			fwd(t, m, seq(dec2, ids[:17]))
			fwd(t, m, seq(dec2, ids[17:20]))
			fwd(t, m, seq(dec2, ids[20:prompt]))
			var decoded2 []float32
			for pos := prompt; pos < len(ids); pos++ {
				decoded2 = fwd(t, m, seq(dec2, ids[pos:pos+1]))[0]
			}
			for _, c := range []struct {
				name string
				got  []float32
			}{{"one prefill", one}, {"chunked prefill", chunked}, {"decoded after another prompt chunking", decoded2}} {
				bad := 0
				for i := range c.got {
					if math.Float32bits(c.got[i]) != math.Float32bits(decoded[i]) {
						bad++
					}
				}
				if bad > 0 {
					t.Errorf("%s: %d of %d logits differ from the decoded run", c.name, bad, len(c.got))
				}
			}
		})
	}
}
