package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
)

// TestContiguousQ8Decode: a decode row over the contiguous 8-bit cache (read
// in place, attentionRowQ8) equals float32 attention over the cache's
// widened values to rounding (1e-5), for groups of 2 and 3 (a lone last
// head), head sizes 64 and 128, and 1 to 300 cached positions.
func TestContiguousQ8Decode(t *testing.T) {
	be, err := New(Config{Threads: 2, KVQ8: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	r := rand.New(rand.NewPCG(7, 8))
	for _, hd := range []int{64, 128} {
		for _, group := range []int{2, 3} {
			for _, n := range []int{1, 33, 300} {
				const kvHeads = 2
				heads := kvHeads * group
				p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.1}
				kv, err := be.NewKV(kvHeads, hd)
				if err != nil {
					t.Fatal(err)
				}
				k := tensorOf(be, n, kvHeads*hd, randn(r, n*kvHeads*hd))
				v := tensorOf(be, n, kvHeads*hd, randn(r, n*kvHeads*hd))
				be.StoreKV(k, v, []engine.AttnSeq{{KV: kv, N: n}})
				c := kv.(*kvCache)
				q := randn(r, heads*hd)
				qt := tensorOf(be, 1, heads*hd, q)
				dst := be.NewTensor(1, heads*hd)
				if err := kv.Truncate(n - 1); err != nil { // the last position again, as a decode step stores it
					t.Fatal(err)
				}
				be.StoreKV(tensorOf(be, 1, kvHeads*hd, k.data[(n-1)*kvHeads*hd:]), tensorOf(be, 1, kvHeads*hd, v.data[(n-1)*kvHeads*hd:]),
					[]engine.AttnSeq{{KV: kv, N: 1, Pos: n - 1}})
				be.Attention(dst, qt, []engine.AttnSeq{{KV: kv, N: 1, Pos: n - 1}}, p)
				got := make([]float32, heads*hd)
				be.Read(dst, got)
				want := make([]float32, heads*hd)
				nb := hd / q8Block
				for h := range kvHeads {
					base := h * c.cap
					wk, wv := make([]float32, hd*n), make([]float32, hd*n)
					widenQ8(wv, c.q8.v8[base*hd:(base+n)*hd], c.q8.vs[base*nb:(base+n)*nb], n*hd)
					row := make([]float32, hd)
					for j := range n {
						widenQ8(row, c.q8.k8[(base+j)*hd:(base+j+1)*hd], c.q8.ks[(base+j)*nb:(base+j+1)*nb], hd)
						for x, val := range row {
							wk[x*n+j] = val
						}
					}
					scratch := make([]float32, kernels.AttentionScratch(1, group, hd, n))
					kernels.AttentionRows(want[h*group*hd:], heads*hd, q[h*group*hd:], heads*hd, 1, group, hd, wk, n, wv, n-1, p.Scale, scratch)
				}
				if e := relErr(got, want); e > 1e-5 || e != e {
					t.Errorf("hd%d/group%d/n%d: rel-L2 %.3g against float32 attention over the widened cache", hd, group, n, e)
				}
			}
		}
	}
}

// TestPagedQ8Decode: decode rows over 8-bit paged blocks (int8 read in
// place, per-row kernels) agree with the contiguous 8-bit cache (widened
// for several rows, in place for one) to rounding, and a sequence's rows
// have the same bits alone as batched with others (block sizes 32, 16 and
// 7, so segments end mid-block; three rows a sequence, so query rows pair
// and do not).
func TestPagedQ8Decode(t *testing.T) {
	be, err := New(Config{Threads: 2, KVQ8: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	r := rand.New(rand.NewPCG(9, 9))
	const heads, kvHeads, hd, rows = 6, 2, 64, 3
	p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.12}
	for _, bs := range []int{32, 16, 7} {
		lens := []int{1, 45, 70}
		var plain, paged []engine.AttnSeq
		for i, n := range lens {
			k := tensorOf(be, n+rows, kvHeads*hd, randn(r, (n+rows)*kvHeads*hd))
			v := tensorOf(be, n+rows, kvHeads*hd, randn(r, (n+rows)*kvHeads*hd))
			c, _ := be.NewKV(kvHeads, hd)
			pc := pagedOf(t, be, kvHeads, hd, bs, n+rows)
			be.StoreKV(k, v, []engine.AttnSeq{{KV: c, N: n + rows}})
			be.StoreKV(k, v, []engine.AttnSeq{{KV: pc, N: n + rows}})
			plain = append(plain, engine.AttnSeq{KV: c, Row: i * rows, N: rows, Pos: n})
			paged = append(paged, engine.AttnSeq{KV: pc, Row: i * rows, N: rows, Pos: n})
		}
		T := len(lens) * rows
		q := tensorOf(be, T, heads*hd, randn(r, T*heads*hd))
		read := func(seqs []engine.AttnSeq) []float32 {
			dst := be.NewTensor(T, heads*hd)
			be.Attention(dst, q, seqs, p)
			out := make([]float32, T*heads*hd)
			be.Read(dst, out)
			return out
		}
		want, got := read(plain), read(paged)
		if e := relErr(got, want); e > 1e-5 || e != e {
			t.Errorf("block size %d: paged vs contiguous rel-L2 %.3g", bs, e)
		}
		for i := range paged {
			alone := read(paged[i : i+1])
			w := heads * hd
			for j := i * rows * w; j < (i+1)*rows*w; j++ {
				if math.Float32bits(alone[j]) != math.Float32bits(got[j]) {
					t.Errorf("block size %d, sequence %d: value %d is %v alone, %v batched", bs, i, j, alone[j], got[j])
					break
				}
			}
		}
	}
}
