package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
)

// TestPagedF16MatchesContiguous: with Config.KVF16 the paged cache stores
// f16; given K and V that are already f16 values, attention equals the
// float32 contiguous cache's up to summation order (1e-6), for prefill rows
// across block boundaries and decode steps after them, head sizes 128
// (the 128-wide kernels) and 48 (16-wide + tails), odd block sizes. Random
// K/V rounded only by the cache stay within 2e-3.
func TestPagedF16MatchesContiguous(t *testing.T) {
	be16, err := New(Config{Threads: 2, KVF16: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be16.Close()
	be := newBackend(t, 2)
	r := rand.New(rand.NewPCG(3, 3))
	for _, hd := range []int{128, 48} {
		for _, bs := range []int{32, 7} {
			for _, exactF16 := range []bool{true, false} {
				const heads, kvHeads = 4, 2
				p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.1}
				lens := []int{1, 45, 70}
				T := 0
				for _, n := range lens {
					T += n
				}
				kv := func() []float32 {
					x := randn(r, T*kvHeads*hd)
					if exactF16 {
						h := make([]uint16, len(x))
						kernels.F32ToF16(h, x)
						kernels.F16ToF32(x, h)
					}
					return x
				}
				k := tensorOf(be, T, kvHeads*hd, kv())
				v := tensorOf(be, T, kvHeads*hd, kv())
				q := tensorOf(be, T, heads*hd, randn(r, T*heads*hd))
				var plain, paged []engine.AttnSeq
				row := 0
				for _, n := range lens {
					c, _ := be.NewKV(kvHeads, hd)
					plain = append(plain, engine.AttnSeq{KV: c, Row: row, N: n})
					paged = append(paged, engine.AttnSeq{KV: pagedOf(t, be16, kvHeads, hd, bs, n+2), Row: row, N: n})
					row += n
				}
				tol := 1e-6
				if !exactF16 {
					tol = 2e-3
				}
				check := func(what string, plain, paged []engine.AttnSeq, k, v, q *Tensor) {
					t.Helper()
					rows := q.rows
					want, got := be.NewTensor(rows, heads*hd), be.NewTensor(rows, heads*hd)
					be.StoreKV(k, v, plain)
					be.Attention(want, q, plain, p)
					be16.StoreKV(k, v, paged)
					be16.Attention(got, q, paged, p)
					w, g := make([]float32, rows*heads*hd), make([]float32, rows*heads*hd)
					be.Read(want, w)
					be.Read(got, g)
					if e := relErr(g, w); e > tol || e != e {
						t.Errorf("head dim %d, block size %d, f16 inputs %v, %s: rel-L2 %.3g, want ≤ %g", hd, bs, exactF16, what, e, tol)
					}
				}
				check("prefill", plain, paged, k, v, q)
				// A decode step for every sequence: one row each at its end.
				for step := range 2 {
					n := len(lens)
					k1 := tensorOf(be, n, kvHeads*hd, kv()[:n*kvHeads*hd])
					v1 := tensorOf(be, n, kvHeads*hd, kv()[:n*kvHeads*hd])
					q1 := tensorOf(be, n, heads*hd, randn(r, n*heads*hd))
					for i := range plain {
						pos := lens[i] + step
						plain[i].Row, plain[i].N, plain[i].Pos = i, 1, pos
						paged[i].Row, paged[i].N, paged[i].Pos = i, 1, pos
					}
					check("decode", plain, paged, k1, v1, q1)
				}
			}
		}
	}
}

// TestPagedF16CopyBlock: a copied f16 block reads back the same attention.
func TestPagedF16CopyBlock(t *testing.T) {
	be, err := New(Config{Threads: 1, KVF16: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	r := rand.New(rand.NewPCG(4, 4))
	const kvHeads, hd, bs, n = 2, 32, 16, 16
	st, err := be.NewKVBlocks(kvHeads, hd, bs, 2)
	if err != nil {
		t.Fatal(err)
	}
	a, b := st.View(&engine.BlockTable{Blocks: []int{0}}), st.View(&engine.BlockTable{Blocks: []int{1}})
	k := tensorOf(be, n, kvHeads*hd, randn(r, n*kvHeads*hd))
	be.StoreKV(k, k, []engine.AttnSeq{{KV: a, N: n}})
	st.CopyBlock(1, 0)
	b.(*pagedKV).n = n
	q := tensorOf(be, 1, 2*hd, randn(r, 2*hd))
	p := engine.AttnParams{Heads: 2, KVHeads: kvHeads, HeadDim: hd, Scale: 0.2}
	got, want := be.NewTensor(1, 2*hd), be.NewTensor(1, 2*hd)
	be.Attention(want, q, []engine.AttnSeq{{KV: a, N: 1, Pos: n - 1}}, p)
	be.Attention(got, q, []engine.AttnSeq{{KV: b, N: 1, Pos: n - 1}}, p)
	if e := relErr(got.(*Tensor).data, want.(*Tensor).data); e != 0 {
		t.Errorf("copied block: rel-L2 %g, want 0", e)
	}
}
