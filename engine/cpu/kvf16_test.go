package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
)

// TestContiguousF16MatchesF32: with Config.KVF16 the contiguous cache
// (NewKV) stores f16. Given K and V that are already f16 values, attention
// equals the float32 cache's up to summation order (1e-6): prompt rows
// (widened GEMMs), a second prompt chunk, then decode steps through the
// in-place f16 kernels, across capacity growths and K block ends (kvBlock:
// one sequence's second chunk and another's last decode step cross one),
// for head sizes 128, 320 (stored by one thread: its 640 rows go in three
// runs of the prompt store) and 48 (16-wide + tails) and groups of 2
// (paired heads) and 3 (a lone last head). Random K/V rounded only by the cache stay within 2e-3.
func TestContiguousF16MatchesF32(t *testing.T) {
	be16, err := New(Config{Threads: 2, KVF16: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be16.Close()
	be16one, err := New(Config{Threads: 1, KVF16: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be16one.Close()
	be := newBackend(t, 2)
	r := rand.New(rand.NewPCG(5, 6))
	for _, hd := range []int{128, 48, 320} {
		be16 := be16
		if hd == 320 {
			be16 = be16one
		}
		for _, heads := range []int{4, 6} {
			for _, exactF16 := range []bool{true, false} {
				name := fmt.Sprintf("hd%d/heads%d/exact%v", hd, heads, exactF16)
				const kvHeads = 2
				p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.1}
				lens := []int{1, 45, 63, 124, 126}
				kv := func(rows int) []float32 {
					x := randn(r, rows*kvHeads*hd)
					if exactF16 {
						h := make([]uint16, len(x))
						kernels.F32ToF16(h, x)
						kernels.F16ToF32(x, h)
					}
					return x
				}
				var plain, half []engine.AttnSeq
				row := 0
				for _, n := range lens {
					c, _ := be.NewKV(kvHeads, hd)
					c16, _ := be16.NewKV(kvHeads, hd)
					if _, ok := c16.(*kvCache); !ok || !c16.(*kvCache).f16 {
						t.Fatalf("KVF16 backend made a %T cache without f16 storage", c16)
					}
					plain = append(plain, engine.AttnSeq{KV: c, Row: row, N: n})
					half = append(half, engine.AttnSeq{KV: c16, Row: row, N: n})
					row += n
				}
				tol := 1e-6
				if !exactF16 {
					tol = 2e-3
				}
				check := func(what string, rows int) {
					t.Helper()
					k := tensorOf(be, rows, kvHeads*hd, kv(rows))
					v := tensorOf(be, rows, kvHeads*hd, kv(rows))
					q := tensorOf(be, rows, heads*hd, randn(r, rows*heads*hd))
					want, got := be.NewTensor(rows, heads*hd), be.NewTensor(rows, heads*hd)
					be.StoreKV(k, v, plain)
					be.Attention(want, q, plain, p)
					be16.StoreKV(k, v, half)
					be16.Attention(got, q, half, p)
					w, g := make([]float32, rows*heads*hd), make([]float32, rows*heads*hd)
					be.Read(want, w)
					be.Read(got, g)
					if e := relErr(g, w); e > tol || e != e {
						t.Errorf("%s, %s: rel-L2 %.3g, want ≤ %g", name, what, e, tol)
					}
				}
				check("prompt", row)
				row = 0
				for i, n := range []int{130, 3, 3, 3, 3} { // 1+130 outgrows the first allocation
					plain[i].Pos, plain[i].Row, plain[i].N = plain[i].KV.Len(), row, n
					half[i].Pos, half[i].Row, half[i].N = half[i].KV.Len(), row, n
					row += n
				}
				check("second prompt chunk", row)
				for step := range 2 {
					for i := range plain {
						plain[i].Pos, plain[i].Row, plain[i].N = plain[i].KV.Len(), i, 1
						half[i].Pos, half[i].Row, half[i].N = half[i].KV.Len(), i, 1
					}
					check(fmt.Sprintf("decode step %d", step), len(lens))
				}
			}
		}
	}
}
