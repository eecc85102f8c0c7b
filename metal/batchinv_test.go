//go:build linux || darwin

package metal

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/tensor"
)

// TestBatchInvariantLogits on Metal, as engine/qwen's tests for the CPU:
// with engine.Seq.PromptEnd a sequence's logits at the last prompt position
// and at every generated position are the same bits whether the prompt
// was prefilled in one call or in cuts at multiples of
// engine.DeltaNetChunk and the tokens decoded one per pass (alone or beside
// other prefills), or prompt and generated tokens were prefilled together
// (a failover resume) in one call, in several, or from a prefix-cache
// snapshot (hybrid models), or recomputed after a preemption. The context
// (142 positions) spans more than one split-attention chunk (128), so
// decode rows and prefill rows take the split kernels, also a decode row
// beside a 300-token prefill (1200 (head, row) pairs: once a reason to
// take the one-pass kernel); DeltaNet runs its recurrent rule for prompt
// and generated rows alike.
func TestBatchInvariantLogits(t *testing.T) {
	skipWithoutDevice(t)
	const prompt, total = 134, 142
	for _, name := range []string{"qwen3", "qwen3_5"} {
		t.Run(name, func(t *testing.T) {
			m, err := engine.Load(filepath.Join("..", "testdata", "hf", name), engine.Options{Backend: testBackendName, Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			hybrid := name != "qwen3"
			V := m.VocabSize()
			ids := randIDs(12, total, V)
			newPool := func(blocks int) *engine.KVPool {
				cfg := engine.DefaultKVPoolConfig()
				cfg.BlockSize, cfg.MaxBlocks = 16, blocks
				p, err := m.NewKVPool(cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				return p
			}
			p := newPool(160)
			cache := func(p *engine.KVPool) *engine.Cache {
				c, err := p.NewCache()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Free)
				return c
			}
			seq := func(c *engine.Cache, toks []int, all bool) engine.Seq {
				return engine.Seq{Cache: c, Tokens: toks, PromptEnd: prompt, AllLogits: all}
			}
			// other is another sequence's prefill sharing the pass (from the
			// same pool: metal stores a batch's paged rows in one dispatch).
			otherIn := func(p *engine.KVPool, n int) engine.Seq {
				return engine.Seq{Cache: cache(p), Tokens: randIDs(uint64(n), 3+n%50, V)}
			}
			other := func(n int) engine.Seq { return otherIn(p, n) }
			run := func(seqs ...engine.Seq) [][]float32 {
				out, err := m.Forward(context.Background(), seqs)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range seqs {
					if s.PromptEnd == 0 {
						s.Cache.Free()
					}
				}
				return out
			}
			// decodeFrom decodes ids[pos:] one token per pass, beside another
			// sequence's prefill of busy tokens (none if 0).
			decodeFrom := func(c *engine.Cache, last []float32, busy int) [][]float32 {
				out := [][]float32{last}
				for pos := c.Len(); pos < total; pos++ {
					seqs := []engine.Seq{seq(c, ids[pos:pos+1], false)}
					if busy > 0 {
						seqs = append(seqs, engine.Seq{Cache: cache(p), Tokens: randIDs(uint64(pos), busy, V)})
					}
					out = append(out, run(seqs...)[0])
				}
				return out
			}
			rows := func(all []float32, from, to int) [][]float32 {
				var out [][]float32
				for pos := max(from, prompt-1); pos < to; pos++ {
					out = append(out, all[(pos-from)*V:(pos-from+1)*V])
				}
				return out
			}
			// The reference: the prompt in the scheduler's cuts beside other
			// prefills, then decoded beside other prefills.
			ref := cache(p)
			run(seq(ref, ids[:64], false), other(1))
			run(other(2), seq(ref, ids[64:128], false))
			want := decodeFrom(ref, run(seq(ref, ids[128:prompt], false), other(3))[0], 5)

			type variant struct {
				name string
				got  [][]float32
			}
			var vs []variant
			c := cache(p)
			vs = append(vs, variant{"prompt in one call, decoded alone", decodeFrom(c, run(seq(c, ids[:prompt], false))[0], 0)})
			// One decode step beside a 300-token prefill (compared for the
			// positions it has).
			c = cache(p)
			last := run(seq(c, ids[:prompt], false))[0]
			step := run(seq(c, ids[prompt:prompt+1], false), engine.Seq{Cache: cache(p), Tokens: randIDs(99, 300, V)})[0]
			vs = append(vs, variant{"decoded beside a 300-token prefill", [][]float32{last, step}})
			c = cache(p)
			vs = append(vs, variant{"resume in one call", rows(run(seq(c, ids, true))[0], 0, total)})
			c = cache(p)
			run(other(5), seq(c, ids[:64], false))
			got := rows(run(seq(c, ids[64:138], true), other(6))[0], 64, 138)
			got = append(got, rows(run(other(7), seq(c, ids[138:], true))[1], 138, total)...)
			vs = append(vs, variant{"resume in calls 64 + 74 + 4", got})
			if hybrid {
				p2 := newPool(40)
				snap := cache(p2)
				run(seq(snap, ids[:128], false))
				if !snap.SaveSnapshot() {
					t.Fatal("snapshot at 128 refused")
				}
				c = cache(p2)
				if n, err := c.Attach(ids[:prompt+1]); err != nil || n != 128 {
					t.Fatalf("attach: %d positions (%v), want 128", n, err)
				}
				got = rows(run(seq(c, ids[128:138], true))[0], 128, 138)
				got = append(got, rows(run(seq(c, ids[138:], true), otherIn(p2, 8))[0], 138, total)...)
				vs = append(vs, variant{"resume from a snapshot", got})
			}
			c = cache(p)
			run(seq(c, ids[:64], false), other(9))
			got = rows(run(seq(c, ids[64:prompt+4], true))[0], 64, prompt+4)
			vs = append(vs, variant{"recompute then decode", append(got[:len(got)-1], decodeFrom(c, got[len(got)-1], 5)...)})

			for _, v := range vs {
				if len(v.got) != len(want) && len(v.got) != 2 {
					t.Fatalf("%s: %d positions, want %d", v.name, len(v.got), len(want))
				}
				for i := range v.got {
					if bad := diffBits(v.got[i], want[i]); bad > 0 {
						t.Errorf("%s: position %d: %d of %d logits differ from the decoded run", v.name, prompt-1+i, bad, V)
						break
					}
				}
			}
		})
	}
}

func randIDs(seed uint64, n, vocab int) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = r.IntN(vocab)
	}
	return ids
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

// TestKernelsBatchInvariant: a row's result from the matmul (every
// weight format with a kernel), RMSNorm and MoE kernels does not depend on
// the rows computed with it (alone, or among 2..33).
func TestKernelsBatchInvariant(t *testing.T) {
	b := newEmu(t)
	r := rand.New(rand.NewPCG(7, 8))
	run := func(x []float32, M, K int, op func(dst, x engine.Tensor), N int) []float32 {
		xt, dst := b.NewTensor(M, K), b.NewTensor(M, N)
		b.Write(xt, x)
		op(dst, xt)
		out := make([]float32, M*N)
		if err := b.Read(dst, out); err != nil {
			t.Fatal(err)
		}
		b.Release(xt)
		b.Release(dst)
		return out
	}
	check := func(name string, K, N int, op func(dst, x engine.Tensor)) {
		for _, M := range []int{2, 9, 33} {
			x := randn(r, M*K)
			got := run(x, M, K, op, N)
			for m := range M {
				one := run(x[m*K:(m+1)*K], 1, K, op, N)
				if bad := diffBits(one, got[m*N:(m+1)*N]); bad > 0 {
					t.Errorf("%s: row %d of %d: %d of %d outputs differ from the row alone", name, m, M, bad, N)
					break
				}
			}
		}
	}
	const K = 512
	for _, f := range []tensor.Format{tensor.F32, tensor.BF16, tensor.F16, tensor.Q8_0, tensor.Q4_0, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K} {
		w, err := b.Upload(hostOf(r, f, 40, K))
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprint("matmul ", f), K, 40, func(dst, x engine.Tensor) { b.MatMul(dst, x, w, nil) })
	}
	nw, err := b.Upload(hostOf(r, tensor.F32, 1, K))
	if err != nil {
		t.Fatal(err)
	}
	check("rmsnorm", K, K, func(dst, x engine.Tensor) { b.RMSNorm(dst, x, nw, engine.NormParams{Dim: K, Eps: 1e-6}) })
	const E, H, inter = 6, 64, 40
	up := func(rows, cols int) engine.Weight {
		w, err := b.Upload(hostOf(r, tensor.BF16, rows, cols))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	mw := engine.MoEWeights{Router: up(E, H)}
	for range E {
		mw.Experts = append(mw.Experts, engine.Expert{Gate: up(inter, H), Up: up(inter, H), Down: up(H, inter)})
	}
	mw.Shared = &engine.Expert{Gate: up(inter, H), Up: up(inter, H), Down: up(H, inter)}
	mw.SharedGate = up(1, H)
	check("moe", H, H, func(dst, x engine.Tensor) { b.MoE(dst, x, &mw, engine.MoEParams{TopK: 2, Normalize: true}) })
}
