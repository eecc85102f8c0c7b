//go:build linux || darwin

package metal

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/tensor"
	"github.com/macpool/macpool/metal/gpu"
)

// TestPagedAttention compares StoreKV + Attention over paged caches (ragged
// block sizes, shuffled block tables, tails; head_dim 40 and 128, GQA
// groups of 2 and 4; one kernel, or split positions + combine) with the CPU backend's
// contiguous caches: three sequences per call (prefill across blocks, then
// decode steps), a contiguous sequence mixed into the same call, and a
// copy-on-write block copy.
func TestPagedAttention(t *testing.T) {
	for _, c := range []struct{ bs, heads, kvHeads, hd, chunk int }{{7, 4, 2, 40, 0}, {16, 4, 2, 40, 32}, {32, 8, 2, 128, 64}} {
		bs := c.bs
		b := newBoth(t)
		if c.chunk > 0 {
			b.m.attnChunk = c.chunk // split attention: 2-3 splits of the longest rows
		}
		p := engine.AttnParams{Heads: c.heads, KVHeads: c.kvHeads, HeadDim: c.hd, Scale: 1 / float32(math.Sqrt(float64(c.hd)))}
		kvDim := p.KVHeads * p.HeadDim
		const blocks = 40
		store, err := b.m.NewKVBlocks(p.KVHeads, p.HeadDim, bs, blocks)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Free()
		perm := rand.New(rand.NewPCG(uint64(bs), 3)).Perm(blocks)
		tables := []*engine.BlockTable{{}, {}, {}}
		var mKV, cKV []engine.KV
		for _, tab := range tables {
			mKV = append(mKV, store.View(tab))
			kc, _ := b.c.NewKV(p.KVHeads, p.HeadDim)
			cKV = append(cKV, kc)
		}
		plainM, _ := b.m.NewKV(p.KVHeads, p.HeadDim)
		plainC, _ := b.c.NewKV(p.KVHeads, p.HeadDim)
		// Steps: per sequence the new tokens (paged a, b, c; contiguous d).
		for si, step := range [][4]int{{37, 5, 1}, {1, 1, 33}, {1, 20, 1}, {2, 1, 1}} {
			ns := [4]int{step[0], step[1], step[2], 3}
			T := ns[0] + ns[1] + ns[2] + ns[3]
			var sm, sc []engine.AttnSeq
			row := 0
			for i := range 4 {
				km, kc := plainM, plainC
				if i < 3 {
					km, kc = mKV[i], cKV[i]
					tab := tables[i]
					for len(tab.Blocks)*bs < km.Len()+ns[i] {
						tab.Blocks = append(tab.Blocks, perm[0])
						perm = perm[1:]
					}
				}
				sm = append(sm, engine.AttnSeq{KV: km, Row: row, N: ns[i], Pos: km.Len()})
				sc = append(sc, engine.AttnSeq{KV: kc, Row: row, N: ns[i], Pos: kc.Len()})
				row += ns[i]
			}
			// Interleave the contiguous sequence between paged ones.
			sm[1], sm[3] = sm[3], sm[1]
			sc[1], sc[3] = sc[3], sc[1]
			q, k, v := b.tensor(T, p.Heads*p.HeadDim, nil), b.tensor(T, kvDim, nil), b.tensor(T, kvDim, nil)
			b.m.StoreKV(k.m, v.m, sm)
			b.c.StoreKV(k.c, v.c, sc)
			d := pair{m: b.m.NewTensor(T, p.Heads*p.HeadDim), c: b.c.NewTensor(T, p.Heads*p.HeadDim), rows: T, cols: p.Heads * p.HeadDim}
			b.m.Attention(d.m, q.m, sm, p)
			b.c.Attention(d.c, q.c, sc, p)
			b.check("paged attention", d, 1e-5)
			if si == 1 {
				// Copy-on-write: sequence a moves its first block to a
				// fresh one; its results must not change.
				tab := tables[0]
				store.CopyBlock(perm[0], tab.Blocks[0])
				tab.Blocks[0] = perm[0]
				perm = perm[1:]
			}
		}
		if got := mKV[0].Len(); got != 41 {
			t.Errorf("block size %d: sequence a holds %d positions, want 41", bs, got)
		}
	}
}

// TestPagedKVErrors: bad shapes are errors, not panics.
func TestPagedKVErrors(t *testing.T) {
	b := newEmu(t)
	for _, c := range [][4]int{{0, 16, 8, 4}, {2, 300, 8, 4}, {2, 16, 0, 4}, {2, 16, 8, 0}} {
		if _, err := b.NewKVBlocks(c[0], c[1], c[2], c[3]); err == nil {
			t.Errorf("NewKVBlocks%v: no error", c)
		}
	}
}

// workingSetDevice reports a recommended working set, as mtl.Device does.
type workingSetDevice struct {
	gpu.Device
	ws uint64
}

func (d workingSetDevice) RecommendedMaxWorkingSet() uint64 { return d.ws }

// TestKVBudget: the KV budget is the working set less the weights and an
// eighth; none without a working set (emulator: the engine's default).
func TestKVBudget(t *testing.T) {
	dev := newEmu(t)
	// A Mac's GPU says; the emulated one (fake Metal device) reports 0.
	wsd, real := dev.Device().(workingSetter)
	real = real && wsd.RecommendedMaxWorkingSet() > 0
	if got := dev.KVBudgetBytes(); (got != 0) != real {
		t.Errorf("KV budget %d on %s (working set known: %v)", got, dev.Device().Name(), real)
	}
	const ws = 1 << 30
	b, err := New(Config{Device: workingSetDevice{newTestDevice(t), ws}, Name: testBackendName})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w, err := b.Upload(hostOf(rand.New(rand.NewPCG(1, 1)), tensor.F32, 64, 256))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.KVBudgetBytes(), int64(ws-ws/8-4*64*256); got != want {
		t.Errorf("KV budget %d, want %d", got, want)
	}
	b.ReleaseWeight(w)
	if got, want := b.KVBudgetBytes(), int64(ws-ws/8); got != want {
		t.Errorf("KV budget after release %d, want %d", got, want)
	}
}
