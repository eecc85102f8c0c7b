package qwen_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/internal/reftest"
)

// ropeFixtures are the rope-scaling fixtures of testdata/rope: the tiny
// qwen3 / qwen3_next / qwen3_5 / qwen2 checkpoints with YaRN (factor 4 over
// an original context of 32; qwen3_5 with the mrope fields of its model
// card, qwen2 in the 4.x rope_scaling spelling) or linear scaling, and
// transformers 5.17 float32 logits over 96 positions.
var ropeFixtures = []string{"qwen3_yarn", "qwen3_linear", "qwen3_next_yarn", "qwen3_5_yarn", "qwen2_yarn_legacy"}

// TestRopeScalingMatchesReference runs each rope-scaling fixture in one
// pass (every position within relative L2 1e-4 of transformers) and
// greedily with the KV cache (the same 24 tokens), and checks that the
// reference is sensitive to the scaling: the base model without it is far
// off past the original context.
func TestRopeScalingMatchesReference(t *testing.T) {
	for _, name := range ropeFixtures {
		t.Run(name, func(t *testing.T) {
			dir := reftest.RopeFixture(t, filepath.Join("..", ".."), name)
			r, want := reftest.Load(t, filepath.Join("..", "..", "testdata", "rope", name))
			m, err := engine.Load(dir, engine.Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if rs := m.Config().RopeScaling; rs.Type == "" || rs.Factor != 4 {
				t.Fatalf("rope scaling %+v, want factor 4", rs)
			}
			c, err := m.NewCache()
			if err != nil {
				t.Fatal(err)
			}
			got := forwardAll(t, m, c, r.InputIDs)
			c.Free()
			vocab := r.LogitsShape[1]
			worst := reftest.CheckPositions(t, got, want, vocab, len(r.InputIDs), 1e-4)
			t.Logf("%s: max relative L2 error over %d positions: %.3g", name, len(r.InputIDs), worst)

			gen, err := m.Generate(context.Background(), r.GreedyPrompt, len(r.GreedyOut), engine.Greedy{}, nil, nil)
			if err != nil || !equal(gen, r.GreedyOut) {
				t.Errorf("greedy: got %v (%v), want %v", gen, err, r.GreedyOut)
			}

			// The unscaled base model must miss the reference (else this
			// fixture would not test the scaling).
			baseName, _, _ := strings.Cut(strings.Replace(name, "_linear", "_yarn", 1), "_yarn")
			base := filepath.Join("..", "..", "testdata", "hf", baseName)
			plain := reftest.Logits(t, base, r.InputIDs, engine.Options{Threads: 2})
			if e := reftest.MaxRelL2(plain, want, vocab); e < 1e-2 {
				t.Errorf("unscaled model within %.3g of the scaled reference: the fixture does not exercise rope scaling", e)
			} else {
				t.Logf("unscaled model: max relative L2 error %.3g", e)
			}
		})
	}
}
