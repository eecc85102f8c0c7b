package qwen_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/macpool/macpool/engine"
)

// TestBatchInvariantLogits for the hybrid models (Gated DeltaNet + full
// attention): with engine.Seq.PromptEnd, a sequence's logits at the last
// prompt position and at every generated position are the same bits
// whether (a) the prompt was prefilled in one call or in calls cut at
// multiples of engine.DeltaNetChunk (the serving scheduler's cuts) and the
// tokens decoded one per pass, (b) prompt and generated tokens were
// prefilled together (a failover resume) in one or several calls, possibly
// from a prefix-cache snapshot, or (c) recomputed after a preemption,
// whatever else shares the batch. The prompt (134 tokens) spans two full
// delta-rule chunks and a partial one. Also with the worker's f16 KV cache
// and weights quantized at load (int8-activation kernels).
func TestHybridBatchInvariantLogits(t *testing.T) {
	const prompt, total = 134, 164
	for _, tc := range []struct {
		name string
		opts engine.Options
	}{
		{"qwen3_next", engine.Options{}},
		{"qwen3_5", engine.Options{}},
		{"qwen3_5_moe", engine.Options{}},
		// As a worker runs them: f16 KV cache, weights quantized at load
		// (int8 activation kernels).
		{"qwen3_5", engine.Options{KVF16: true, Quantize: "q4"}},
		{"qwen3_5_moe", engine.Options{KVF16: true, Quantize: "q8"}},
	} {
		name := tc.name
		t.Run(fmt.Sprintf("%s/kvf16=%v/quantize=%q", name, tc.opts.KVF16, tc.opts.Quantize), func(t *testing.T) {
			tc.opts.Threads = 2
			m, err := engine.Load(hybridDir(name), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			V := m.VocabSize()
			ids := randomIDs(12, total, V)
			p := newPool(t, m, 16, 160)
			seq := func(c *engine.Cache, toks []int, all bool) engine.Seq {
				return engine.Seq{Cache: c, Tokens: toks, PromptEnd: prompt, AllLogits: all}
			}
			// other is another sequence's prefill sharing the pass.
			other := func(n int) engine.Seq {
				return engine.Seq{Cache: pagedCache(t, p), Tokens: randomIDs(uint64(n), 3+n%50, V)}
			}
			// run is fwd that frees the other sequences' caches afterwards.
			run := func(seqs ...engine.Seq) [][]float32 {
				out := fwd(t, m, seqs...)
				for _, s := range seqs {
					if s.PromptEnd == 0 {
						s.Cache.Free()
					}
				}
				return out
			}
			// decodeFrom decodes ids[pos:] one token per pass (beside others'
			// prefills when busy) and returns the logits of positions
			// [pos-1, total) given those of pos-1.
			decodeFrom := func(c *engine.Cache, last []float32, busy bool) [][]float32 {
				out := [][]float32{last}
				for pos := c.Len(); pos < total; pos++ {
					seqs := []engine.Seq{seq(c, ids[pos:pos+1], false)}
					if busy {
						seqs = append(seqs, other(pos))
					}
					out = append(out, run(seqs...)[0])
				}
				return out
			}
			// rows returns the per-position logits of an AllLogits call over
			// positions [from, to) from position prompt-1 on.
			rows := func(all []float32, from, to int) [][]float32 {
				var out [][]float32
				for pos := max(from, prompt-1); pos < to; pos++ {
					out = append(out, all[(pos-from)*V:(pos-from+1)*V])
				}
				return out
			}

			// (a) The reference: the prompt in the scheduler's cuts (64 + 64 +
			// 6) beside other prefills, then decoded beside other prefills.
			ref := pagedCache(t, p)
			run(seq(ref, ids[:64], false), other(1))
			run(other(2), seq(ref, ids[64:128], false))
			want := decodeFrom(ref, run(seq(ref, ids[128:prompt], false), other(3))[0], true)

			type variant struct {
				name string
				got  [][]float32
			}
			var vs []variant
			// (a) Prompt in one call, decoded alone.
			c := pagedCache(t, p)
			vs = append(vs, variant{"prompt in one call", decodeFrom(c, run(seq(c, ids[:prompt], false))[0], false)})
			// (a) Prompt cut 128 + 6.
			c = pagedCache(t, p)
			run(seq(c, ids[:128], false))
			vs = append(vs, variant{"prompt cut 128 + 6", decodeFrom(c, run(seq(c, ids[128:prompt], false), other(4))[0], false)})
			// (b) Resume: prompt and generated tokens in one call.
			c = pagedCache(t, p)
			vs = append(vs, variant{"resume in one call", rows(run(seq(c, ids, true))[0], 0, total)})
			// (b) Resume in calls 64 | 80 (across the prompt's end) | 20,
			// beside other sequences.
			c = pagedCache(t, p)
			run(other(5), seq(c, ids[:64], false))
			got := rows(run(seq(c, ids[64:144], true), other(6))[0], 64, 144)
			got = append(got, rows(run(other(7), seq(c, ids[144:], true))[1], 144, total)...)
			vs = append(vs, variant{"resume in calls 64 + 80 + 20", got})
			// (b) Resume from a prefix-cache snapshot at 128 (taken by a
			// sequence that had the same prompt), then a generated-only piece.
			// (A pool of its own: the prompt's blocks are registered in p.)
			p2 := newPool(t, m, 16, 40)
			snap := pagedCache(t, p2)
			run(seq(snap, ids[:128], false))
			if !snap.SaveSnapshot() {
				t.Fatal("snapshot at 128 refused")
			}
			c = pagedCache(t, p2)
			if n, err := c.Attach(ids[:prompt+1]); err != nil || n != 128 {
				t.Fatalf("attach: %d positions (%v), want 128", n, err)
			}
			got = rows(run(seq(c, ids[128:150], true))[0], 128, 150)
			got = append(got, rows(run(seq(c, ids[150:], true), other(8))[0], 150, total)...)
			vs = append(vs, variant{"resume from a snapshot", got})
			// (c) Recompute after a preemption: the first 10 generated tokens
			// prefilled with the prompt (cut 64 + 80), then decoded.
			c = pagedCache(t, p)
			run(seq(c, ids[:64], false), other(9))
			last := run(seq(c, ids[64:prompt+10], true))[0]
			got = rows(last, 64, prompt+10)
			vs = append(vs, variant{"recompute then decode", append(got[:len(got)-1], decodeFrom(c, got[len(got)-1], true)...)})

			for _, v := range vs {
				if len(v.got) != len(want) {
					t.Fatalf("%s: %d positions, want %d", v.name, len(v.got), len(want))
				}
				for i := range want {
					if bad := diffBits(v.got[i], want[i]); bad > 0 {
						t.Errorf("%s: position %d: %d of %d logits differ from the decoded run (max |diff| %.3g)",
							v.name, prompt-1+i, bad, V, maxAbsDiff(v.got[i], want[i]))
						break
					}
				}
			}
		})
	}
}

func diffBits(a, b []float32) int {
	bad := 0
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			bad++
		}
	}
	return bad
}

func maxAbsDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}
