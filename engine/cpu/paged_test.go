package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine"
)

// pagedOf makes a paged KV view over a fresh store with a shuffled block
// table (blocks need not be in order).
func pagedOf(t testing.TB, be *Backend, kvHeads, hd, bs, positions int) engine.KV {
	t.Helper()
	nb := (positions + bs - 1) / bs
	st, err := be.NewKVBlocks(kvHeads, hd, bs, nb+3)
	if err != nil {
		t.Fatal(err)
	}
	tab := &engine.BlockTable{Blocks: rand.New(rand.NewPCG(2, 2)).Perm(nb + 3)[:nb]}
	return st.View(tab)
}

// Paged attention equals the contiguous cache's, for prefill rows across
// block boundaries and for decode rows, several sequences in one call.
func TestPagedAttentionMatchesContiguous(t *testing.T) {
	be := newBackend(t, 2)
	r := rand.New(rand.NewPCG(1, 1))
	const heads, kvHeads, hd = 4, 2, 32
	p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.17}
	for _, bs := range []int{16, 32, 7} {
		lens := []int{1, 45, 70}
		T := 0
		for _, n := range lens {
			T += n
		}
		k := tensorOf(be, T, kvHeads*hd, randn(r, T*kvHeads*hd))
		v := tensorOf(be, T, kvHeads*hd, randn(r, T*kvHeads*hd))
		q := tensorOf(be, T, heads*hd, randn(r, T*heads*hd))
		var plain, paged []engine.AttnSeq
		row := 0
		for _, n := range lens {
			kv, _ := be.NewKV(kvHeads, hd)
			plain = append(plain, engine.AttnSeq{KV: kv, Row: row, N: n})
			paged = append(paged, engine.AttnSeq{KV: pagedOf(t, be, kvHeads, hd, bs, n), Row: row, N: n})
			row += n
		}
		want, got := be.NewTensor(T, heads*hd), be.NewTensor(T, heads*hd)
		be.StoreKV(k, v, plain)
		be.Attention(want, q, plain, p)
		be.StoreKV(k, v, paged)
		be.Attention(got, q, paged, p)
		w, g := make([]float32, T*heads*hd), make([]float32, T*heads*hd)
		be.Read(want, w)
		be.Read(got, g)
		if e := relErr(g, w); e > 1e-6 {
			t.Errorf("block size %d: rel-L2 %.3g", bs, e)
		}
	}
}

func relErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

// BenchmarkAttentionDecodePaged is BenchmarkAttentionDecode over a paged
// cache (blocks of 32, shuffled table).
func BenchmarkAttentionDecodePaged(b *testing.B) {
	be := newBackend(b, runtimeThreads())
	r := rand.New(rand.NewPCG(1, 1))
	const heads, kvHeads, hd, L = 16, 8, 128, 4096
	kv := pagedOf(b, be, kvHeads, hd, 32, L)
	k := tensorOf(be, L, kvHeads*hd, randn(r, L*kvHeads*hd))
	v := tensorOf(be, L, kvHeads*hd, randn(r, L*kvHeads*hd))
	be.StoreKV(k, v, []engine.AttnSeq{{KV: kv, N: L - 1}})
	q := tensorOf(be, 1, heads*hd, randn(r, heads*hd))
	k1 := tensorOf(be, 1, kvHeads*hd, randn(r, kvHeads*hd))
	dst := be.NewTensor(1, heads*hd)
	p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.088}
	seq := []engine.AttnSeq{{KV: kv, N: 1, Pos: L - 1}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		be.StoreKV(k1, k1, seq)
		be.Attention(dst, q, seq, p)
	}
}

// BenchmarkAttentionPrefill: a 256-row chunk at positions 1744..1999 of
// Qwen3-0.6B's attention shape, contiguous vs paged (blocks of 32).
func BenchmarkAttentionPrefill(b *testing.B) {
	for _, paged := range []bool{false, true} {
		name := "contiguous"
		if paged {
			name = "paged"
		}
		b.Run(name, func(b *testing.B) {
			be := newBackend(b, runtimeThreads())
			r := rand.New(rand.NewPCG(1, 1))
			const heads, kvHeads, hd, L, T = 16, 8, 128, 2000, 256
			var kv engine.KV
			if paged {
				kv = pagedOf(b, be, kvHeads, hd, 32, L)
			} else {
				kv, _ = be.NewKV(kvHeads, hd)
			}
			k := tensorOf(be, L, kvHeads*hd, randn(r, L*kvHeads*hd))
			be.StoreKV(k, k, []engine.AttnSeq{{KV: kv, N: L}})
			q := tensorOf(be, T, heads*hd, randn(r, T*heads*hd))
			dst := be.NewTensor(T, heads*hd)
			p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.088}
			seq := []engine.AttnSeq{{KV: kv, N: T, Pos: L - T}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				be.Attention(dst, q, seq, p)
			}
		})
	}
}
