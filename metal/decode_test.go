//go:build linux || darwin

package metal

import (
	"context"
	"fmt"
	"testing"

	"github.com/macpool/macpool/engine"
)

// plainGreedy is the loop DecodeGreedy must equal: ForwardGreedy of the
// last token, the id read back before the next step is encoded, until
// stop(step, tok) (the stopping token is not fed).
func plainGreedy(t *testing.T, m *engine.Model, c *engine.Cache, first []int, promptEnd int, stop func(step, tok int) bool) []int {
	t.Helper()
	var out []int
	next := first
	for {
		_, toks, err := m.ForwardGreedy(context.Background(), []engine.Seq{{Cache: c, Tokens: next, Greedy: true, PromptEnd: promptEnd}})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, toks[0])
		if stop(len(out), toks[0]) {
			return out
		}
		next = toks[:1]
	}
}

// afterLogits feeds tok to c and returns its logits: equal bits for two
// caches mean equal KV and recurrent state.
func afterLogits(t *testing.T, m *engine.Model, c *engine.Cache, tok int) []float32 {
	t.Helper()
	out, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: []int{tok}}})
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// TestDecodeGreedyPipelined: for every fixture architecture, DecodeGreedy
// on metal (two steps in flight, ids fed on the device) gives the plain
// loop's tokens for every stop point (a stop after 1, 2 and 7 tokens: the
// step encoded past it is rolled back), leaves the cache at the same
// length and state (the logits of a further token are the same bits), and
// really pipelines: whenever a token is accepted the next step is already
// committed and not waited for.
func TestDecodeGreedyPipelined(t *testing.T) {
	for _, name := range fixtureArchs {
		t.Run(name, func(t *testing.T) {
			m, be := loadOn(t, name, Config{})
			V := m.VocabSize()
			prompt := randIDs(11, 6, V)
			for _, stopAt := range []int{1, 2, 7} {
				ref, err := m.NewCache()
				if err != nil {
					t.Fatal(err)
				}
				defer ref.Free()
				want := plainGreedy(t, m, ref, prompt, len(prompt), func(step, _ int) bool { return step == stopAt })

				c, err := m.NewCache()
				if err != nil {
					t.Fatal(err)
				}
				defer c.Free()
				var got []int
				inFlight := 0
				err = m.DecodeGreedy(context.Background(), []engine.GreedySeq{{Cache: c, Tokens: prompt, PromptEnd: len(prompt)}}, func(i, tok int) bool {
					got = append(got, tok)
					if len(be.flight) > 0 {
						inFlight++
					}
					return len(got) < stopAt
				})
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("stop at %d: pipelined %v, plain %v", stopAt, got, want)
				}
				if inFlight != stopAt {
					t.Errorf("stop at %d: the next step was in flight at %d of %d tokens", stopAt, inFlight, stopAt)
				}
				if len(be.flight) != 0 || be.cb != nil {
					t.Errorf("work still in flight after DecodeGreedy returned")
				}
				if c.Len() != ref.Len() {
					t.Fatalf("stop at %d: cache holds %d positions, plain %d", stopAt, c.Len(), ref.Len())
				}
				last := want[len(want)-1]
				if bad := diffBits(afterLogits(t, m, c, last), afterLogits(t, m, ref, last)); bad > 0 {
					t.Errorf("stop at %d: %d logits of the next token differ: cache state not the plain loop's", stopAt, bad)
				}
			}
		})
	}
}

// TestDecodeGreedyBatchStops runs three paged sequences in lockstep that
// stop at different steps (EOS-like stops and a token limit, i.e. sequences
// leaving the batch while the overshoot step of each still runs): each gets
// the plain loop's tokens, its cache the plain loop's length and state,
// and a new request reusing the prompt's prefix-cache blocks afterwards
// gets the same logits as on a pool that never saw the pipelined run.
func TestDecodeGreedyBatchStops(t *testing.T) {
	for _, name := range []string{"hf/qwen3", "hf/qwen3_5_moe", "hf/qwen3_next"} {
		t.Run(name, func(t *testing.T) {
			m, _ := loadOn(t, name, Config{})
			V := m.VocabSize()
			newPool := func() *engine.KVPool {
				cfg := engine.DefaultKVPoolConfig()
				cfg.BlockSize, cfg.MaxBlocks = 16, 64
				p, err := m.NewKVPool(cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				return p
			}
			newCache := func(p *engine.KVPool) *engine.Cache {
				c, err := p.NewCache()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Free)
				return c
			}
			stops := []int{2, 9, 5}
			prompts := [][]int{randIDs(21, 33, V), randIDs(22, 7, V), randIDs(23, 16, V)}
			refPool, pool := newPool(), newPool()
			var want [][]int
			var refs []*engine.Cache
			for i, p := range prompts {
				c := newCache(refPool)
				want = append(want, plainGreedy(t, m, c, p, len(p), func(step, _ int) bool { return step == stops[i] }))
				refs = append(refs, c)
			}
			var seqs []engine.GreedySeq
			for _, p := range prompts {
				seqs = append(seqs, engine.GreedySeq{Cache: newCache(pool), Tokens: p, PromptEnd: len(p)})
			}
			got := make([][]int, len(seqs))
			err := m.DecodeGreedy(context.Background(), seqs, func(i, tok int) bool {
				got[i] = append(got[i], tok)
				return len(got[i]) < stops[i]
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range seqs {
				if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
					t.Errorf("sequence %d: pipelined %v, plain %v", i, got[i], want[i])
				}
				if seqs[i].Cache.Len() != refs[i].Len() || fmt.Sprint(seqs[i].Cache.Tokens()) != fmt.Sprint(refs[i].Tokens()) {
					t.Errorf("sequence %d: cache %d positions %v, plain %d %v", i, seqs[i].Cache.Len(), seqs[i].Cache.Tokens(), refs[i].Len(), refs[i].Tokens())
				}
				last := want[i][len(want[i])-1]
				if bad := diffBits(afterLogits(t, m, seqs[i].Cache, last), afterLogits(t, m, refs[i], last)); bad > 0 {
					t.Errorf("sequence %d: %d logits of the next token differ", i, bad)
				}
			}
			// A request sharing sequence 0's prompt (two full blocks): from
			// the prefix cache of the pool the pipelined run used vs a fresh
			// computation on a new pool.
			follow := append(append([]int(nil), prompts[0]...), randIDs(24, 4, V)...)
			reuse := newCache(pool)
			n, err := reuse.Attach(follow)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 && !pool.NeedsSnapshots() {
				t.Errorf("no prefix-cache blocks attached for a prompt sharing 33 tokens")
			}
			fresh := newCache(newPool())
			a, err := m.Forward(context.Background(), []engine.Seq{{Cache: reuse, Tokens: follow[n:]}})
			if err != nil {
				t.Fatal(err)
			}
			b, err := m.Forward(context.Background(), []engine.Seq{{Cache: fresh, Tokens: follow}})
			if err != nil {
				t.Fatal(err)
			}
			if rel := relL2(a[0], b[0]); rel > 1e-5 {
				t.Errorf("after the prefix cache: rel-L2 %.3g vs a fresh prefill", rel)
			}
		})
	}
}
