package modeltest

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/gguf"
	"github.com/macpool/macpool/engine/gguf/internal/ggufconv"
	"github.com/macpool/macpool/engine/tensor"
	"github.com/macpool/macpool/internal/reftest"
)

// TestRopeScalingGGUF writes the rope-scaling fixtures of testdata/rope
// (tiny checkpoints with YaRN factor 4 over an original context of 32, or
// linear factor 4) as GGUF files with the rope.scaling.* keys llama.cpp's
// converter writes, loads them through checkpoint.Open → engine/gguf, and
// compares the logits of 96 positions with transformers' reference (every
// position within relative L2 1e-4) and with the HF checkpoint through the
// same engine (1e-5). The same file without the scaling keys must miss the
// reference (> 1e-2), so the test fails if the keys are ignored. The dense
// fixtures also decode greedily with the KV cache past the original context.
func TestRopeScalingGGUF(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..")
	for _, name := range []string{"qwen3_yarn", "qwen3_linear", "qwen2_yarn_legacy", "qwen3_next_yarn", "qwen3_5_yarn"} {
		t.Run(name, func(t *testing.T) {
			dir := reftest.RopeFixture(t, root, name)
			ref, want := reftest.Load(t, filepath.Join(root, "testdata", "rope", name))
			vocab := ref.LogitsShape[1]
			opts := engine.Options{Threads: 2, ExactMatMul: true}
			scaled := filepath.Join(t.TempDir(), name+".gguf")
			plain := filepath.Join(t.TempDir(), name+"_noscaling.gguf")
			hybrid := name == "qwen3_next_yarn" || name == "qwen3_5_yarn"
			for _, f := range []struct {
				path    string
				scaling bool
			}{{scaled, true}, {plain, false}} {
				var err error
				if hybrid {
					err = convertHybrid(dir, f.path, f.scaling)
				} else {
					err = writeDense(dir, f.path, f.scaling)
				}
				if err != nil {
					t.Fatal(err)
				}
			}

			ck, err := checkpoint.Open(scaled)
			if err != nil {
				t.Fatal(err)
			}
			hfCk, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ck.Config().RopeScaling, hfCk.Config().RopeScaling; got.Type != want.Type || got.Factor != want.Factor ||
				got.OriginalMaxPositionEmbeddings != want.OriginalMaxPositionEmbeddings || got.AttentionFactor != want.AttentionFactor {
				t.Errorf("rope scaling from GGUF %+v, from config.json %+v", got, want)
			}
			if got, want := ck.Config().ContextLength(), hfCk.Config().ContextLength(); got != want {
				t.Errorf("context length from GGUF %d, from config.json %d", got, want)
			}
			ck.Close()
			hfCk.Close()

			got := reftest.Logits(t, scaled, ref.InputIDs, opts)
			worst := reftest.CheckPositions(t, got, want, vocab, len(ref.InputIDs), 1e-4)
			t.Logf("%s GGUF: max relative L2 error over %d positions: %.3g", name, len(ref.InputIDs), worst)
			hf := reftest.Logits(t, dir, ref.InputIDs, opts)
			if e := reftest.MaxRelL2(got, hf, vocab); e > 1e-5 {
				t.Errorf("GGUF differs from the HF checkpoint through the same engine by %.3g, want < 1e-5", e)
			} else {
				t.Logf("%s GGUF vs HF checkpoint, same engine: %.3g", name, e)
			}
			if e := reftest.MaxRelL2(reftest.Logits(t, plain, ref.InputIDs, opts), want, vocab); e < 1e-2 {
				t.Errorf("GGUF without rope.scaling keys within %.3g of the scaled reference: the test does not exercise the keys", e)
			}
			if hybrid {
				return
			}
			m, err := engine.Load(scaled, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			gen, err := m.Generate(context.Background(), ref.GreedyPrompt, len(ref.GreedyOut), engine.Greedy{}, nil, nil)
			if err != nil || !slices.Equal(gen, ref.GreedyOut) {
				t.Errorf("greedy: got %v (%v), want %v", gen, err, ref.GreedyOut)
			}
		})
	}
}

// writeDense writes the dense qwen2/qwen3 checkpoint in dir as a GGUF file
// with its tensors as stored (bf16) and the metadata of gguf.DenseMeta: the
// rope.scaling.* keys of the config's scaling when scaling is set.
func writeDense(dir, out string, scaling bool) error {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return err
	}
	defer ck.Close()
	c := ck.Config()
	gc := &gguf.Config{ModelType: c.ModelType, HiddenSize: c.HiddenSize, IntermediateSize: c.IntermediateSize,
		NumHiddenLayers: c.NumHiddenLayers, NumAttentionHeads: c.NumAttentionHeads, NumKeyValueHeads: c.NumKeyValueHeads,
		HeadDim: c.HeadDim, VocabSize: c.VocabSize, MaxPositionEmbeddings: c.MaxPositionEmbeddings,
		RMSNormEps: c.RMSNormEps, RopeTheta: c.RopeTheta, BOSTokenID: -1}
	if scaling {
		rs := c.RopeScaling
		gc.RopeScaling = gguf.RopeScaling{Type: rs.Type, Factor: rs.Factor, OriginalContextLength: rs.OriginalMaxPositionEmbeddings,
			AttentionFactor: rs.AttentionFactor, BetaFast: rs.BetaFast, BetaSlow: rs.BetaSlow}
	}
	meta, err := gguf.DenseMeta(gc)
	if err != nil {
		return err
	}
	var ts []gguf.WriteTensor
	for _, name := range ck.Names() {
		g, ok := gguf.GGUFName(name)
		if !ok {
			continue
		}
		h, err := ck.Tensor(name)
		if err != nil {
			return err
		}
		ts = append(ts, gguf.WriteTensor{Name: g, Host: h})
	}
	return gguf.Write(out, meta, ts)
}

// convertHybrid converts a Qwen3-Next / Qwen3.5 checkpoint with ggufconv
// (F32, which holds the bf16 weights exactly); without scaling, from a copy
// of the folder whose config has no rope scaling.
func convertHybrid(dir, out string, scaling bool) error {
	if !scaling {
		return ggufconv.Convert(dir, out, tensor.F32, ggufconv.Options{NoRopeScaling: true})
	}
	return ggufconv.Convert(dir, out, tensor.F32, ggufconv.Options{})
}
