package pipeline

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine/checkpoint"
)

const gib = int64(1) << 30

// uniform is a model of n layers of layer bytes, with attention KV of kv
// bytes per token on every layer.
func uniform(n int, layer, embed, head, kv int64) ModelSize {
	m := ModelSize{Embed: embed, Head: head}
	for range n {
		m.Layers = append(m.Layers, layer)
		m.KVPerToken = append(m.KVPerToken, kv)
		m.StatePerSeq = append(m.StatePerSeq, 0)
	}
	return m
}

func TestPlace(t *testing.T) {
	hybrid := uniform(8, gib, gib/2, gib/2, 0)
	for i := range hybrid.Layers {
		if i%4 == 3 {
			hybrid.KVPerToken[i] = 64 << 10 // full attention every 4th layer
		} else {
			hybrid.StatePerSeq[i] = 64 << 20 // Gated DeltaNet state
		}
	}
	for _, tc := range []struct {
		name    string
		model   ModelSize
		budget  Budget
		workers []Worker
		want    string // "worker:[first,last) ..." in stage order
		wantErr string
	}{
		{
			name:    "fits the largest worker whole",
			model:   uniform(4, gib, gib/4, gib/4, 0),
			workers: []Worker{{Name: "small", Free: 2 * gib}, {Name: "big", Free: 8 * gib}},
			want:    "big:[0,4)",
		},
		{
			name:  "three equal workers share evenly",
			model: uniform(12, gib, gib/2, gib/2, 0),
			// 13 GiB over 3 × 5 GiB: two cannot hold it.
			workers: []Worker{{Name: "a", Free: 5 * gib}, {Name: "b", Free: 5 * gib}, {Name: "c", Free: 5 * gib}},
			want:    "a:[0,4) b:[4,8) c:[8,12)",
		},
		{
			name:    "fewest workers, largest first, sized by memory",
			model:   uniform(20, gib, gib, gib, 0),
			workers: []Worker{{Name: "air", Free: 8 * gib}, {Name: "studio", Free: 16 * gib}, {Name: "pro", Free: 12 * gib}, {Name: "mini", Free: 4 * gib}},
			// 22 GiB: studio + pro (28 GiB); shares as equal as layers allow.
			want: "studio:[0,12) pro:[12,20)",
		},
		{
			name:    "KV budget counts against each stage's own layers",
			model:   uniform(8, gib, 0, 0, 1<<20), // 1 MiB per token per layer
			budget:  Budget{Tokens: 1024},         // 1 GiB per layer
			workers: []Worker{{Name: "a", Free: 10 * gib}, {Name: "b", Free: 10 * gib}},
			want:    "a:[0,4) b:[4,8)",
		},
		{
			name:    "hybrid: state per sequence and KV of attention layers",
			model:   hybrid,
			budget:  Budget{Tokens: 4096, Seqs: 8, Overhead: gib / 4},
			workers: []Worker{{Name: "a", Free: 7 * gib}, {Name: "b", Free: 7 * gib}}, // 6.5 GiB per stage
			want:    "a:[0,4) b:[4,8)",
		},
		{
			name:    "ties by name, workers without memory skipped",
			model:   uniform(6, gib, 0, 0, 0),
			workers: []Worker{{Name: "z", Free: 4 * gib}, {Name: "y", Free: 4 * gib}, {Name: "x", Free: 0}},
			want:    "y:[0,3) z:[3,6)",
		},
		{
			name:    "no fit",
			model:   uniform(6, gib, 0, 0, 0),
			workers: []Worker{{Name: "a", Free: 2 * gib}, {Name: "b", Free: 2 * gib}},
			wantErr: "needs about 6442450944 bytes (weights + budget), 2 workers have 4294967296 free",
		},
		{
			name:    "a layer bigger than any worker",
			model:   uniform(2, 3*gib, 0, 0, 0),
			workers: []Worker{{Name: "a", Free: 2 * gib}, {Name: "b", Free: 2 * gib}, {Name: "c", Free: 2 * gib}},
			wantErr: "does not fit",
		},
		{
			name:    "no layers",
			model:   ModelSize{},
			workers: []Worker{{Name: "a", Free: gib}},
			wantErr: "no layers",
		},
		{
			name:    "sizes disagree",
			model:   ModelSize{Layers: []int64{1, 2}, KVPerToken: []int64{1}, StatePerSeq: []int64{0, 0}},
			workers: []Worker{{Name: "a", Free: gib}},
			wantErr: "2 layers but 1 KV and 2 state sizes",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(tc.model, tc.budget, tc.workers)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want error containing %q", plan(got), err, tc.wantErr)
				}
				if strings.Contains(tc.wantErr, "fit") && !errors.Is(err, ErrNoFit) {
					t.Errorf("error %v does not wrap ErrNoFit", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan(got) != tc.want {
				t.Errorf("got %s, want %s", plan(got), tc.want)
			}
			checkPlan(t, tc.model, got)
		})
	}
}

// bw is a worker of free GiB and a memory bandwidth of gbs GB/s.
func bw(name string, free int64, gbs int64) Worker {
	return Worker{Name: name, Free: free * gib, Bandwidth: gbs * 1e9}
}

// With every bandwidth known, stages are sized by speed: the slowest
// stage's weight bytes / bandwidth is made as small as memory allows, over
// the fewest workers unless one more cuts the round time (stages × slowest
// stage) by 20%. Every case but the last fails with the memory rule.
func TestPlaceBandwidth(t *testing.T) {
	m24 := uniform(24, gib, gib/2, gib/2, 0)
	for _, tc := range []struct {
		name    string
		model   ModelSize
		workers []Worker
		want    string
	}{
		{
			name:  "the faster worker takes the bigger share",
			model: m24,
			// Memory rule: 12 and 12. By speed the Max takes what fits.
			workers: []Worker{bw("air", 20, 100), bw("max", 20, 546)},
			want:    "air:[0,5) max:[5,24)",
		},
		{
			name:  "one M4 Max and two M2 Airs: the Max full, one Air",
			model: m24,
			// A second Air would make the slowest stage 0.054 → 0.036 s
			// per step, but the round time 2 × 0.054 → 3 × 0.036: no gain.
			workers: []Worker{bw("air2", 16, 100), bw("max", 20, 546), bw("air1", 16, 100)},
			want:    "air1:[0,5) max:[5,24)",
		},
		{
			name:  "the fastest pair, not the largest",
			model: uniform(20, gib, gib/2, gib/2, 0),
			// The box and one Mac would hold it too (memory rule), at
			// 9.5 GiB / 50 GB/s per step instead of 10.5 GiB / 400 GB/s.
			workers: []Worker{bw("box", 20, 50), bw("m1", 12, 400), bw("m2", 12, 400)},
			want:    "m1:[0,10) m2:[10,20)",
		},
		{
			name:  "one more stage when it cuts the round time by 20%",
			model: uniform(15, gib, gib/2, gib/2, 0),
			// Two stages: max + a, a holding 4 layers at 100 GB/s (0.043 s,
			// round 0.086); three: a and b two layers each, max the rest
			// (0.023 s, round 0.068).
			workers: []Worker{bw("max", 12, 546), bw("a", 10, 100), bw("b", 3, 100), bw("c", 7, 50)},
			want:    "b:[0,2) a:[2,4) max:[4,15)",
		},
		{
			name:  "equal bandwidth balances bytes, not memory shares",
			model: uniform(20, gib, gib, gib, 0),
			// Memory rule: studio:[0,12) pro:[12,20). Same speed: the same
			// bytes per stage (the head counts on the last).
			workers: []Worker{bw("studio", 16, 200), bw("pro", 12, 200)},
			want:    "pro:[0,10) studio:[10,20)",
		},
		{
			name:    "one unknown bandwidth: the memory rule for all",
			model:   m24,
			workers: []Worker{bw("air", 20, 100), bw("max", 20, 0)},
			want:    "air:[0,12) max:[12,24)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(tc.model, Budget{}, tc.workers)
			if err != nil {
				t.Fatal(err)
			}
			if plan(got) != tc.want {
				t.Errorf("got %s, want %s", plan(got), tc.want)
			}
			checkPlan(t, tc.model, got)
			// Deterministic: the order of the candidates does not matter.
			rev := slices.Clone(tc.workers)
			slices.Reverse(rev)
			if again, err := Place(tc.model, Budget{}, rev); err != nil || plan(again) != plan(got) {
				t.Errorf("reversed candidates: got %s, %v; want %s", plan(again), err, plan(got))
			}
		})
	}
}

func plan(as []Assignment) string {
	var s []string
	for _, a := range as {
		s = append(s, fmt.Sprintf("%s:[%d,%d)", a.Worker, a.Stage.First, a.Stage.Last))
	}
	return strings.Join(s, " ")
}

// checkPlan: the stages cover every layer once, in order, and each fits
// its worker.
func checkPlan(t *testing.T, m ModelSize, as []Assignment) {
	t.Helper()
	next := 0
	for _, a := range as {
		if a.Stage.First != next || a.Stage.Last <= a.Stage.First {
			t.Errorf("stage %v after layer %d", a.Stage, next)
		}
		next = a.Stage.Last
		if a.Need > a.Free {
			t.Errorf("%s: stage %v needs %d, has %d", a.Worker, a.Stage, a.Need, a.Free)
		}
	}
	if next != len(m.Layers) {
		t.Errorf("stages end at layer %d of %d", next, len(m.Layers))
	}
}

// SizeOf of a fixture accounts for every stored byte (the tied embedding
// twice: input on the first stage, head on the last) and puts KV only on
// attention layers, recurrent state only on linear ones.
func TestSizeOf(t *testing.T) {
	for _, name := range []string{"qwen3", "qwen3_tied", "qwen3_5_moe"} {
		t.Run(name, func(t *testing.T) {
			ck, err := checkpoint.Open(filepath.Join("..", "testdata", "hf", name))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			s := SizeOf(ck, 2)
			sum := s.Embed + s.Head
			for _, l := range s.Layers {
				sum += l
			}
			want := ck.Bytes()
			if !ck.Has("lm_head.weight") {
				want += s.Embed
			}
			if sum != want {
				t.Errorf("sizes add up to %d, checkpoint holds %d", sum, want)
			}
			c := ck.Config()
			for i := range s.Layers {
				lin := c.IsLinearAttention(i)
				if (s.KVPerToken[i] == 0) != lin || (s.StatePerSeq[i] == 0) == lin {
					t.Errorf("layer %d (linear %v): KV %d per token, state %d per sequence", i, lin, s.KVPerToken[i], s.StatePerSeq[i])
				}
				if !lin && s.KVPerToken[i] != int64(2*c.NumKeyValueHeads*c.HeadDim*2) {
					t.Errorf("layer %d: KV %d bytes per token, want %d", i, s.KVPerToken[i], 2*c.NumKeyValueHeads*c.HeadDim*2)
				}
			}
		})
	}
}
