package qwen_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/macpool/macpool/engine"
)

var pagedFixtures = []string{"qwen3", "qwen3_moe", "qwen3_5", "qwen3_next"}

func newPool(t testing.TB, m *engine.Model, bs, blocks int) *engine.KVPool {
	t.Helper()
	cfg := engine.DefaultKVPoolConfig()
	cfg.BlockSize, cfg.MaxBlocks = bs, blocks
	p, err := m.NewKVPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func pagedCache(t testing.TB, p *engine.KVPool) *engine.Cache {
	t.Helper()
	c, err := p.NewCache()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Free)
	return c
}

func fwd(t testing.TB, m *engine.Model, seqs ...engine.Seq) [][]float32 {
	t.Helper()
	out, err := m.Forward(context.Background(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A paged cache gives the logits of the contiguous one: one pass, pieces
// across block boundaries, and one-token decode steps, batched with others.
func TestPagedMatchesContiguous(t *testing.T) {
	for _, name := range pagedFixtures {
		t.Run(name, func(t *testing.T) {
			m := loadHybrid(t, name)
			ids := randomIDs(7, 70, m.VocabSize())
			want := allLogits(t, m, newCache(t, m), ids)
			p := newPool(t, m, 16, 64)
			if got := allLogits(t, m, pagedCache(t, p), ids); hybridRelL2(got, want) > 1e-5 {
				t.Errorf("one pass: rel-L2 %.3g", hybridRelL2(got, want))
			}
			// Pieces 21, 1, 30, 1×18, batched with another sequence.
			c, other := pagedCache(t, p), pagedCache(t, p)
			V := m.VocabSize()
			check := func(pos int, got []float32) {
				t.Helper()
				if e := hybridRelL2(got, want[pos*V:(pos+1)*V]); e > 1e-5 {
					t.Errorf("position %d: rel-L2 %.3g", pos, e)
				}
			}
			pos := 0
			for _, n := range []int{21, 1, 30} {
				out := fwd(t, m, engine.Seq{Cache: c, Tokens: ids[pos : pos+n]}, engine.Seq{Cache: other, Tokens: ids[:3]})
				pos += n
				check(pos-1, out[0])
			}
			for ; pos < len(ids); pos++ {
				check(pos, fwd(t, m, engine.Seq{Cache: c, Tokens: ids[pos : pos+1]})[0])
			}
			if c.Blocks() != 5 {
				t.Errorf("70 positions in %d blocks of 16, want 5", c.Blocks())
			}
		})
	}
}

// A prompt whose prefix is cached gives exactly the logits of the same
// prompt run uncached (with the same split), dense and hybrid; decoding
// continues identically.
func TestPrefixCacheIdenticalLogits(t *testing.T) {
	for _, name := range pagedFixtures {
		t.Run(name, func(t *testing.T) {
			m := loadHybrid(t, name)
			p := newPool(t, m, 16, 64)
			prompt := randomIDs(3, 83, m.VocabSize())
			const S = 80 // last block boundary before the last token
			run := func(c *engine.Cache, logits []float32) []int {
				var toks []int
				for range 6 {
					tok := engine.Argmax(logits)
					toks = append(toks, tok)
					logits = fwd(t, m, engine.Seq{Cache: c, Tokens: []int{tok}})[0]
				}
				return append(toks, int(logits[0]*1e6)) // and a logit, compared exactly below
			}
			cold := pagedCache(t, p)
			if n, _ := cold.Attach(prompt); n != 0 {
				t.Fatalf("empty pool attached %d positions", n)
			}
			fwd(t, m, engine.Seq{Cache: cold, Tokens: prompt[:S]})
			cold.SaveSnapshot()
			coldLogits := fwd(t, m, engine.Seq{Cache: cold, Tokens: prompt[S:]})[0]

			warm := pagedCache(t, p)
			n, err := warm.Attach(prompt)
			if err != nil || n != S {
				t.Fatalf("attach: %d positions (%v), want %d", n, err, S)
			}
			warmLogits := fwd(t, m, engine.Seq{Cache: warm, Tokens: prompt[S:]})[0]
			if !slices.Equal(coldLogits, warmLogits) {
				t.Fatalf("cached prefix: logits differ (rel-L2 %.3g)", hybridRelL2(warmLogits, coldLogits))
			}
			// Both continue the same way (warm shares the 5 prefix blocks).
			cold2 := pagedCache(t, p)
			cold2.Attach(prompt)
			l2 := fwd(t, m, engine.Seq{Cache: cold2, Tokens: prompt[cold2.Len():]})[0]
			a, b, c := run(cold, coldLogits), run(warm, warmLogits), run(cold2, l2)
			if !slices.Equal(a, b) || !slices.Equal(a, c) {
				t.Errorf("continuations differ: cold %v, warm %v, warm again %v", a, b, c)
			}
			if st := p.Stats(); st.Hits != 2 || st.HitTokens != 2*S {
				t.Errorf("stats %+v: want 2 hits of %d tokens", st, S)
			}
			// Against one uncached pass: within rounding.
			ref := allLogits(t, m, newCache(t, m), prompt)
			V := m.VocabSize()
			if e := hybridRelL2(warmLogits, ref[(len(prompt)-1)*V:]); e > 1e-5 {
				t.Errorf("vs one pass: rel-L2 %.3g", e)
			}
		})
	}
}

// The pool never hands out more blocks than its budget; freeing returns
// them; registered blocks stay cached until evicted by new allocations.
func TestKVPoolBudgetAndEviction(t *testing.T) {
	m := loadHybrid(t, "qwen3")
	p := newPool(t, m, 16, 12)
	V := m.VocabSize()
	check := func() {
		t.Helper()
		st := p.Stats()
		if st.Used+st.Cached+st.Free+st.Snapshot != st.Blocks || st.Blocks != 12 {
			t.Fatalf("stats %+v do not add up to 12 blocks", st)
		}
	}
	// A flood of sequences: each wants 3 blocks; only 4 fit at once.
	var live []*engine.Cache
	fails := 0
	for i := range 10 {
		c := pagedCache(t, p)
		_, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: randomIDs(uint64(i), 40, V)}})
		check()
		if err != nil {
			if !errors.Is(err, engine.ErrNoKVBlocks) {
				t.Fatal(err)
			}
			if c.Len() != 0 || c.Blocks() != 0 {
				t.Fatalf("failed forward left %d positions in %d blocks", c.Len(), c.Blocks())
			}
			fails++
			continue
		}
		live = append(live, c)
	}
	if len(live) != 4 || fails != 6 {
		t.Fatalf("%d sequences fit, %d failed: want 4 and 6", len(live), fails)
	}
	for _, c := range live {
		c.Free() // cancelled requests: blocks go back
	}
	check()
	if st := p.Stats(); st.Used != 0 || st.Cached != 8 {
		t.Fatalf("after freeing: %+v, want 0 used, 8 cached (2 full blocks each)", st)
	}
	// The first prompt's prefix is still cached...
	first := randomIDs(0, 40, V)
	probe := pagedCache(t, p)
	if n, _ := probe.Attach(first); n != 32 {
		t.Fatalf("attach after free: %d, want 32", n)
	}
	probe.Free()
	// ...until new sequences need the space.
	for i := range 3 {
		c := pagedCache(t, p)
		fwd(t, m, engine.Seq{Cache: c, Tokens: randomIDs(uint64(100+i), 60, V)})
		check()
	}
	if st := p.Stats(); st.Evictions == 0 || st.Free+st.Cached != 0 {
		t.Fatalf("after filling: %+v, want evictions and no spare block", st)
	}
	probe = pagedCache(t, p)
	if n, _ := probe.Attach(first); n != 0 {
		t.Errorf("evicted prefix still attached %d positions", n)
	}
}

// Truncating into a shared block copies it: the other holder is unaffected.
func TestPagedTruncateCopiesSharedBlock(t *testing.T) {
	m := loadHybrid(t, "qwen3")
	V := m.VocabSize()
	p := newPool(t, m, 16, 32)
	ids := randomIDs(5, 50, V)
	a := pagedCache(t, p)
	fwd(t, m, engine.Seq{Cache: a, Tokens: ids[:40]})
	b := pagedCache(t, p)
	if n, _ := b.Attach(ids[:40]); n != 32 {
		t.Fatalf("attach %d, want 32", n)
	}
	if err := b.Truncate(20); err != nil {
		t.Fatal(err)
	}
	fwd(t, m, engine.Seq{Cache: b, Tokens: randomIDs(9, 30, V)}) // overwrites positions 20..49 of b
	got := fwd(t, m, engine.Seq{Cache: a, Tokens: ids[40:]})[0]
	want := allLogits(t, m, newCache(t, m), ids)[49*V:]
	if e := hybridRelL2(got, want); e > 1e-5 {
		t.Errorf("holder of the shared block after the other's truncate: rel-L2 %.3g", e)
	}
}

// Recurrent-state snapshots are paid for with pool blocks and given back
// when their block is evicted.
func TestSnapshotBlocksAccounted(t *testing.T) {
	m := loadHybrid(t, "qwen3_5")
	p := newPool(t, m, 16, 24)
	V := m.VocabSize()
	c := pagedCache(t, p)
	fwd(t, m, engine.Seq{Cache: c, Tokens: randomIDs(1, 32, V)})
	if !c.SaveSnapshot() {
		t.Fatal("snapshot at a registered block boundary refused")
	}
	st := p.Stats()
	if st.Snapshot == 0 || st.Used != 2 || st.Used+st.Snapshot+st.Free+st.Cached != 24 {
		t.Fatalf("after snapshot: %+v", st)
	}
	if c.SaveSnapshot() {
		t.Error("second snapshot of the same block accepted")
	}
	c.Free()
	// Everything is reclaimable now: a cached block's snapshot goes with it
	// (admission must see this, or a waiting request never gets in).
	if a := p.Available(); a != 24 {
		t.Fatalf("available %d after freeing, want 24 (%+v)", a, p.Stats())
	}
	all := pagedCache(t, p)
	if err := all.Reserve(24 * 16); err != nil {
		t.Fatalf("reserving the whole pool: %v", err)
	}
	all.Free()
	c = pagedCache(t, p)
	fwd(t, m, engine.Seq{Cache: c, Tokens: randomIDs(1, 32, V)})
	c.SaveSnapshot()
	c.Free()
	for i := range 16 { // evict everything cached before
		d := pagedCache(t, p)
		fwd(t, m, engine.Seq{Cache: d, Tokens: randomIDs(uint64(10+i), 60, V)})
		d.Free()
	}
	if st := p.Stats(); st.Snapshot != 0 || st.Used != 0 {
		t.Errorf("after eviction: %+v", st)
	}
}
