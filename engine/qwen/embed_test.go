package qwen_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/macpool/macpool/engine"
)

// embedRef is testdata/embeddings/qwen3_ref.json (make_ref.py): transformers
// Qwen3Model on testdata/hf/qwen3 in float32, last token after the final
// norm, L2-normalised.
type embedRef struct {
	InputIDs   [][]int     `json:"input_ids"`
	Embeddings [][]float64 `json:"embeddings"`
	Dimensions int         `json:"dimensions"`
	Dim        [][]float64 `json:"embeddings_dim48"`
}

func loadEmbedRef(t *testing.T) embedRef {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "embeddings", "qwen3_ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r embedRef
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func normalized(v []float32) []float32 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) / math.Sqrt(s))
	}
	return out
}

func f32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// Embeddings of the Qwen3Model layout (and of the causal-LM layout of the
// same weights) match transformers, one by one and batched.
func TestEmbedMatchesReference(t *testing.T) {
	r := loadEmbedRef(t)
	for _, folder := range []string{"../../testdata/embeddings/qwen3_model", "../../testdata/hf/qwen3"} {
		t.Run(filepath.Base(folder), func(t *testing.T) {
			m, err := engine.Load(folder, engine.Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if !m.CanEmbed() || m.HiddenSize() != 128 {
				t.Fatalf("CanEmbed %v HiddenSize %d, want true 128", m.CanEmbed(), m.HiddenSize())
			}
			seqs := make([]engine.Seq, len(r.InputIDs))
			for i, ids := range r.InputIDs {
				c, err := m.NewCache()
				if err != nil {
					t.Fatal(err)
				}
				defer c.Free()
				seqs[i] = engine.Seq{Cache: c, Tokens: ids}
			}
			batched, err := m.Embed(context.Background(), seqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, ids := range r.InputIDs {
				c, err := m.NewCache()
				if err != nil {
					t.Fatal(err)
				}
				alone, err := m.Embed(context.Background(), []engine.Seq{{Cache: c, Tokens: ids}})
				c.Free()
				if err != nil {
					t.Fatal(err)
				}
				want := f32(r.Embeddings[i])
				t.Logf("input %d (%d tokens): rel L2 alone %.2e", i, len(ids), relL2(normalized(alone[0]), want))
				if e := relL2(normalized(alone[0]), want); e > 1e-4 {
					t.Errorf("input %d (%d tokens) alone: rel L2 %.2e, want < 1e-4", i, len(ids), e)
				}
				if e := relL2(normalized(batched[i]), want); e > 1e-4 {
					t.Errorf("input %d (%d tokens) batched: rel L2 %.2e, want < 1e-4", i, len(ids), e)
				}
				if e := relL2(normalized(alone[0][:r.Dimensions]), f32(r.Dim[i])); e > 1e-4 {
					t.Errorf("input %d dimensions %d: rel L2 %.2e, want < 1e-4", i, r.Dimensions, e)
				}
			}
		})
	}
}

// A checkpoint without lm_head (untied) loads, embeds, and refuses logits
// with ErrNoLMHead.
func TestNoLMHeadRefusesLogits(t *testing.T) {
	m, err := engine.Load("../../testdata/embeddings/qwen3_model", engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := m.NewCache()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free()
	_, err = m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: []int{1, 2, 3}}})
	if !errors.Is(err, engine.ErrNoLMHead) {
		t.Fatalf("Forward: got %v, want ErrNoLMHead", err)
	}
	if c.Len() != 0 {
		t.Errorf("cache holds %d positions after a failed Forward, want 0", c.Len())
	}
	// Incremental embedding (two pieces) equals one pass.
	one, err := m.Embed(context.Background(), []engine.Seq{{Cache: c, Tokens: []int{5, 6, 7, 8, 9}}})
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := m.NewCache()
	defer c2.Free()
	if _, err := m.Embed(context.Background(), []engine.Seq{{Cache: c2, Tokens: []int{5, 6, 7}}}); err != nil {
		t.Fatal(err)
	}
	two, err := m.Embed(context.Background(), []engine.Seq{{Cache: c2, Tokens: []int{8, 9}}})
	if err != nil {
		t.Fatal(err)
	}
	if e := relL2(two[0], one[0]); e > 1e-5 {
		t.Errorf("embedding in two pieces vs one: rel L2 %.2e", e)
	}
}
