package cpu

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
)

// TestPagedHugeStore: a block store big enough to be put on
// huge pages (adviseHuge: dropped and re-advised right after allocation)
// reads as zeros (allocated after dirty memory was freed for the heap to
// reuse), and decode attention over it (the prefetching f16 kernels,
// blocks scattered) equals the float32 contiguous cache's for f16-exact K
// and V.
func TestPagedHugeStore(t *testing.T) {
	junk := make([]uint16, 16<<20) // dirty memory for the heap to reuse
	for i := range junk {
		junk[i] = 0x3c00
	}
	junk = nil
	runtime.GC()
	be16, err := New(Config{Threads: 2, KVF16: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be16.Close()
	be := newBackend(t, 2)
	const heads, kvHeads, hd, bs, blocks = 4, 2, 128, 32, 320 // 5 MB each for K and V
	kb, err := be16.NewKVBlocks(kvHeads, hd, bs, blocks)
	if err != nil {
		t.Fatal(err)
	}
	st := kb.(*kvBlocks)
	for i := range st.k16 {
		if st.k16[i] != 0 || st.v16[i] != 0 {
			t.Fatalf("new store holds k %#x v %#x at %d, want zeros", st.k16[i], st.v16[i], i)
		}
	}
	r := rand.New(rand.NewPCG(5, 5))
	const n = 300 // positions: 10 blocks, the last one partial
	exact := func(m int) []float32 {
		x := randn(r, m)
		h := make([]uint16, m)
		kernels.F32ToF16(h, x)
		kernels.F16ToF32(x, h)
		return x
	}
	k := tensorOf(be, n, kvHeads*hd, exact(n*kvHeads*hd))
	v := tensorOf(be, n, kvHeads*hd, exact(n*kvHeads*hd))
	plainKV, _ := be.NewKV(kvHeads, hd)
	pagedKV := kb.View(&engine.BlockTable{Blocks: r.Perm(blocks)[:(n+bs-1)/bs]})
	be.StoreKV(k, v, []engine.AttnSeq{{KV: plainKV, N: n}})
	be16.StoreKV(k, v, []engine.AttnSeq{{KV: pagedKV, N: n}})
	// The last position again as a decode row.
	q := tensorOf(be, 1, heads*hd, randn(r, heads*hd))
	p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.1}
	for _, c := range []engine.KV{plainKV, pagedKV} {
		if err := c.Truncate(n - 1); err != nil {
			t.Fatal(err)
		}
	}
	k1 := tensorOf(be, 1, kvHeads*hd, exact(kvHeads*hd))
	v1 := tensorOf(be, 1, kvHeads*hd, exact(kvHeads*hd))
	want, got := be.NewTensor(1, heads*hd), be16.NewTensor(1, heads*hd)
	be.StoreKV(k1, v1, []engine.AttnSeq{{KV: plainKV, N: 1, Pos: n - 1}})
	be.Attention(want, q, []engine.AttnSeq{{KV: plainKV, N: 1, Pos: n - 1}}, p)
	be16.StoreKV(k1, v1, []engine.AttnSeq{{KV: pagedKV, N: 1, Pos: n - 1}})
	be16.Attention(got, q, []engine.AttnSeq{{KV: pagedKV, N: 1, Pos: n - 1}}, p)
	w, g := make([]float32, heads*hd), make([]float32, heads*hd)
	be.Read(want, w)
	be16.Read(got, g)
	if e := relErr(g, w); e > 1e-6 || e != e {
		t.Errorf("decode over a huge-page store: rel-L2 %.3g against the contiguous cache, want ≤ 1e-6", e)
	}
}
