package qwen_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/cpu"
	"github.com/macpool/macpool/internal/reftest"
)

var hybridFixtures = []string{"qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"}

type hybridRef = reftest.Ref

func hybridDir(name string) string { return filepath.Join("..", "..", "testdata", "hf", name) }

func readHybridRef(t *testing.T, name string) (hybridRef, []float32) {
	t.Helper()
	return reftest.Load(t, hybridDir(name))
}

func loadHybrid(t testing.TB, name string) *engine.Model {
	t.Helper()
	m, err := engine.Load(hybridDir(name), engine.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

var hybridRelL2 = reftest.RelL2

func newCache(t testing.TB, m *engine.Model) *engine.Cache {
	t.Helper()
	c, err := m.NewCache()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Free)
	return c
}

func allLogits(t testing.TB, m *engine.Model, c *engine.Cache, ids []int) []float32 {
	t.Helper()
	out, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: ids, AllLogits: true}})
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

func TestHybridLogitsMatchReference(t *testing.T) {
	for _, name := range hybridFixtures {
		t.Run(name, func(t *testing.T) {
			r, want := readHybridRef(t, name)
			m := loadHybrid(t, name)
			if got := m.Config().ModelType; got != r.ModelType {
				t.Fatalf("model type %q, want %q", got, r.ModelType)
			}
			vocab := r.LogitsShape[1]
			got := allLogits(t, m, newCache(t, m), r.InputIDs)
			worst := reftest.CheckPositions(t, got, want, vocab, len(r.InputIDs), 1e-4)
			t.Logf("%s: max relative L2 error over %d positions: %.3g", name, len(r.InputIDs), worst)
		})
	}
}

func TestHybridGreedyMatchesReference(t *testing.T) {
	for _, name := range hybridFixtures {
		t.Run(name, func(t *testing.T) {
			r, _ := readHybridRef(t, name)
			m := loadHybrid(t, name)
			got, err := m.Generate(context.Background(), r.GreedyPrompt, len(r.GreedyOut), engine.Greedy{}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, r.GreedyOut) {
				t.Errorf("greedy output\n got %v\nwant %v", got, r.GreedyOut)
			}
		})
	}
}

func randomIDs(seed uint64, n, vocab int) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = r.IntN(vocab)
	}
	return ids
}

// Feeding a sequence in pieces (chunked prefill with incoming state, then one-token
// decode steps) gives the logits of one pass, across chunk boundaries.
func TestHybridIncrementalMatchesOnePass(t *testing.T) {
	const tol = 1e-5
	for _, name := range hybridFixtures {
		t.Run(name, func(t *testing.T) {
			m := loadHybrid(t, name)
			V := m.VocabSize()
			ids := randomIDs(7, 150, V)
			whole := allLogits(t, m, newCache(t, m), ids)
			c := newCache(t, m)
			var got []float32
			for _, piece := range [][2]int{{0, 70}, {70, 71}, {71, 140}, {140, 141}, {141, 150}} {
				got = append(got, allLogits(t, m, c, ids[piece[0]:piece[1]])...)
			}
			for p := range ids {
				if e := hybridRelL2(got[p*V:(p+1)*V], whole[p*V:(p+1)*V]); e > tol {
					t.Errorf("position %d: pieces vs one pass rel-L2 %.3g, want < %g", p, e, tol)
				}
			}
		})
	}
}

// Sequences of different lengths and cache states in one batch give the logits each gives
// alone.
func TestHybridBatchMatchesSingle(t *testing.T) {
	const tol = 1e-5
	for _, name := range hybridFixtures {
		t.Run(name, func(t *testing.T) {
			m := loadHybrid(t, name)
			V := m.VocabSize()
			prefix := randomIDs(1, 20, V)
			news := [][]int{randomIDs(2, 13, V), randomIDs(3, 5, V), randomIDs(4, 1, V), randomIDs(5, 70, V)}
			// Sequences 1 and 2 continue a 20-token prefix; 0 and 3 start empty.
			withPrefix := []bool{false, true, true, false}
			alone := make([][]float32, len(news))
			batch := make([]engine.Seq, len(news))
			for i, toks := range news {
				c1, c2 := newCache(t, m), newCache(t, m)
				if withPrefix[i] {
					allLogits(t, m, c1, prefix)
					allLogits(t, m, c2, prefix)
				}
				alone[i] = allLogits(t, m, c1, toks)
				batch[i] = engine.Seq{Cache: c2, Tokens: toks, AllLogits: true}
			}
			got, err := m.Forward(context.Background(), batch)
			if err != nil {
				t.Fatal(err)
			}
			for i := range news {
				for p := range news[i] {
					if e := hybridRelL2(got[i][p*V:(p+1)*V], alone[i][p*V:(p+1)*V]); e > tol {
						t.Errorf("sequence %d position %d: batched vs alone rel-L2 %.3g, want < %g", i, p, e, tol)
					}
				}
			}
		})
	}
}

// A recurrent state can be reset or kept, not moved to an arbitrary position.
func TestHybridCacheTruncate(t *testing.T) {
	m := loadHybrid(t, "qwen3_5")
	ids := randomIDs(9, 10, m.VocabSize())
	c := newCache(t, m)
	first := allLogits(t, m, c, ids)
	if err := c.Truncate(5); err == nil || !strings.Contains(err.Error(), "recurrent state") {
		t.Errorf("truncate to 5: error %v, want one about the recurrent state", err)
	}
	if c.Len() != 10 {
		t.Errorf("after a refused truncation the cache holds %d positions, want 10", c.Len())
	}
	if err := c.Truncate(10); err != nil {
		t.Errorf("truncate to current length: %v", err)
	}
	if err := c.Truncate(0); err != nil {
		t.Fatalf("truncate to 0: %v", err)
	}
	again := allLogits(t, m, c, ids)
	if e := hybridRelL2(again, first); e != 0 {
		t.Errorf("after reset: logits differ by rel-L2 %.3g, want identical", e)
	}
}

// overrideSource serves a checkpoint's tensors with a modified config.
type overrideSource struct {
	*checkpoint.Checkpoint
	cfg *checkpoint.Config
}

func (s overrideSource) Config() *checkpoint.Config { return s.cfg }

func TestHybridConfigErrors(t *testing.T) {
	ck, err := checkpoint.Open(hybridDir("qwen3_next"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	be, err := cpu.New(cpu.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	tests := []struct {
		name   string
		modify func(c *checkpoint.Config)
		want   string
	}{
		{"unknown layer type", func(c *checkpoint.Config) { c.LayerTypes[2] = "sliding_attention" }, `layer_types[2]: unknown layer type "sliding_attention"`},
		{"layer_types length", func(c *checkpoint.Config) { c.LayerTypes = c.LayerTypes[:3] }, "layer_types has 3 entries"},
		{"value heads not a multiple", func(c *checkpoint.Config) { c.LinearNumValueHeads = 3 }, "linear_num_value_heads 3"},
		{"top-k", func(c *checkpoint.Config) { c.NumExpertsPerTok = 9 }, "num_experts_per_tok 9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := *ck.Config()
			cfg.LayerTypes = slices.Clone(cfg.LayerTypes)
			tc.modify(&cfg)
			_, err := engine.New(be, overrideSource{ck, &cfg})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("linear layer in qwen3_moe", func(t *testing.T) {
		ck2, err := checkpoint.Open(hybridDir("qwen3_moe"))
		if err != nil {
			t.Fatal(err)
		}
		defer ck2.Close()
		cfg := *ck2.Config()
		cfg.LayerTypes = slices.Clone(cfg.LayerTypes)
		cfg.LayerTypes[0] = "linear_attention"
		_, err = engine.New(be, overrideSource{ck2, &cfg})
		if want := `layer_types[0]: "linear_attention" is not supported by model_type qwen3_moe`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one containing %q", err, want)
		}
	})
}

// engine.Load of a folder whose config.json has an unknown layer type fails naming the
// field.
func TestHybridLoadRejectsUnknownLayerType(t *testing.T) {
	src := hybridDir("qwen3_5")
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["layer_types"] = []string{"linear_attention", "mamba", "linear_attention", "full_attention"}
	dir := t.TempDir()
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	_, err = engine.Load(dir, engine.Options{Threads: 1})
	if err == nil || !strings.Contains(err.Error(), "layer_types[1]") {
		t.Errorf("error %v, want one naming layer_types[1]", err)
	}
	t.Log(err)
}
