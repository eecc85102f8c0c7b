//go:build linux || darwin

package metal

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/internal/reftest"
)

// TestRopeScaledMatchesCPU: the rope kernel with a precomputed (YaRN)
// inverse-frequency table and attention factor against the CPU backend.
func TestRopeScaledMatchesCPU(t *testing.T) {
	b := newBoth(t)
	for _, s := range []checkpoint.RopeScaling{
		{Type: checkpoint.RopeYaRN, Factor: 4, OriginalMaxPositionEmbeddings: 32},
		{Type: checkpoint.RopeLinear, Factor: 8},
		{Type: checkpoint.RopeYaRN, Factor: 40, OriginalMaxPositionEmbeddings: 4096, MScale: 1, MScaleAllDim: 0.707},
	} {
		inv, af, err := engine.RopeFrequencies(1e6, 16, s)
		if err != nil {
			t.Fatal(err)
		}
		p := engine.RopeParams{Heads: 3, HeadDim: 32, RotaryDim: 16, Theta: 1e6, InvFreq: inv, AttentionFactor: af}
		pos := []int{0, 1, 31, 77, 1000, 40000}
		x := b.tensor(len(pos), p.Heads*p.HeadDim, nil)
		b.m.Rope(x.m, pos, p)
		b.c.Rope(x.c, pos, p)
		b.check("rope "+s.Type, x, 1e-6)
	}
}

// TestRopeScalingMatchesReference runs the rope-scaling fixtures of
// testdata/rope (YaRN and linear, tiny qwen3 and qwen3_next) on the metal
// backend: every one of 96 positions within 1e-4 rel-L2 of transformers,
// and the greedy continuation with the KV cache.
func TestRopeScalingMatchesReference(t *testing.T) {
	for _, name := range []string{"qwen3_yarn", "qwen3_linear", "qwen3_next_yarn", "qwen3_5_yarn", "qwen2_yarn_legacy"} {
		t.Run(name, func(t *testing.T) {
			skipWithoutDevice(t)
			dir := reftest.RopeFixture(t, "..", name)
			r, want := reftest.Load(t, fixture(filepath.Join("rope", name)))
			m := loadEmulated(t, dir)
			cache, err := m.NewCache()
			if err != nil {
				t.Fatal(err)
			}
			out, err := m.Forward(context.Background(), []engine.Seq{{Cache: cache, Tokens: r.InputIDs, AllLogits: true}})
			cache.Free()
			if err != nil {
				t.Fatal(err)
			}
			worst := reftest.CheckPositions(t, out[0], want, r.LogitsShape[1], len(r.InputIDs), 1e-4)
			t.Logf("%s on %s: max relative L2 error over %d positions: %.3g", name, m.Backend().Name(), len(r.InputIDs), worst)
			got, err := m.Generate(context.Background(), r.GreedyPrompt, len(r.GreedyOut), engine.Greedy{}, nil, nil)
			if err != nil || !slices.Equal(got, r.GreedyOut) {
				t.Errorf("greedy: got %v (%v), want %v", got, err, r.GreedyOut)
			}
		})
	}
}
