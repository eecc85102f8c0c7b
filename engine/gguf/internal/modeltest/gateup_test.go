package modeltest

import (
	"fmt"
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

// TestMergedGateUpLogits writes the MoE fixtures twice, once with gate and
// up experts in ffn_gate_exps + ffn_up_exps and once merged into
// ffn_gate_up_exps (as newer llama.cpp converters do for some MoE models),
// and requires the same logits bit for bit from both (the loader's
// per-expert views of the merged tensor must hold exactly the separate
// tensors' rows), and the reference's within 1e-4 per position.
// qwen3_moe is written as stored (bf16); the hybrids through ggufconv in
// F32 and Q8_0 (blocks lie within rows, so a half of a merged expert is
// whole blocks).
func TestMergedGateUpLogits(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..")
	type variant struct {
		fixture string
		format  tensor.Format
	}
	for _, v := range []variant{{"qwen3_moe", tensor.BF16}, {"qwen3_5_moe", tensor.F32}, {"qwen3_5_moe", tensor.Q8_0}, {"qwen3_next", tensor.F32}, {"qwen3_next", tensor.Q8_0}} {
		name := v.fixture + "_" + v.format.String()
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, "testdata", "hf", v.fixture)
			ref, want := reftest.Load(t, dir)
			vocab := ref.LogitsShape[1]
			var logits [2][]float32
			for i, merged := range []bool{false, true} {
				path := filepath.Join(t.TempDir(), fmt.Sprintf("%s_%v.gguf", name, merged))
				var err error
				if v.fixture == "qwen3_moe" {
					err = writeQwen3MoE(dir, path, merged)
				} else {
					err = ggufconv.Convert(dir, path, v.format, ggufconv.Options{MergedGateUp: merged})
				}
				if err != nil {
					t.Fatal(err)
				}
				f, err := gguf.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				_, hasMerged := f.Info("blk.0.ffn_gate_up_exps.weight")
				_, hasGate := f.Info("blk.0.ffn_gate_exps.weight")
				f.Close()
				if hasMerged != merged || hasGate == merged {
					t.Fatalf("merged %v: file has ffn_gate_up_exps %v, ffn_gate_exps %v", merged, hasMerged, hasGate)
				}
				logits[i] = reftest.Logits(t, path, ref.InputIDs, engine.Options{Threads: 2, ExactMatMul: true})
			}
			if !slices.Equal(logits[0], logits[1]) {
				t.Errorf("merged file's logits differ from the separate file's by %.3g (want identical)", reftest.MaxRelL2(logits[1], logits[0], vocab))
			}
			if v.format == tensor.Q8_0 {
				return // quantized weights: only the identity above is exact
			}
			worst := reftest.CheckPositions(t, logits[1], want, vocab, len(ref.InputIDs), 1e-4)
			t.Logf("%s merged: max relative L2 error vs reference over %d positions: %.3g", name, len(ref.InputIDs), worst)
		})
	}
}

// writeQwen3MoE writes the qwen3_moe checkpoint in dir as a qwen3moe GGUF
// file with the tensors as stored and experts stacked as llama.cpp's
// converter does (gate and up merged when merged is set).
func writeQwen3MoE(dir, out string, merged bool) error {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return err
	}
	defer ck.Close()
	c := ck.Config()
	const a = "qwen3moe"
	u := func(v int) uint32 { return uint32(v) }
	meta := []gguf.Meta{
		{Key: "general.architecture", Value: a},
		{Key: a + ".block_count", Value: u(c.NumHiddenLayers)},
		{Key: a + ".context_length", Value: u(c.MaxPositionEmbeddings)},
		{Key: a + ".embedding_length", Value: u(c.HiddenSize)},
		{Key: a + ".feed_forward_length", Value: u(c.IntermediateSize)},
		{Key: a + ".attention.head_count", Value: u(c.NumAttentionHeads)},
		{Key: a + ".attention.head_count_kv", Value: u(c.NumKeyValueHeads)},
		{Key: a + ".attention.key_length", Value: u(c.HeadDim)},
		{Key: a + ".attention.value_length", Value: u(c.HeadDim)},
		{Key: a + ".attention.layer_norm_rms_epsilon", Value: float32(c.RMSNormEps)},
		{Key: a + ".rope.freq_base", Value: float32(c.RopeTheta)},
		{Key: a + ".expert_count", Value: u(c.NumExperts)},
		{Key: a + ".expert_used_count", Value: u(c.NumExpertsPerTok)},
		{Key: a + ".expert_feed_forward_length", Value: u(c.MoEIntermediateSize)},
	}
	var ts []gguf.WriteTensor
	for _, name := range ck.Names() {
		if g, ok := gguf.GGUFName(name); ok {
			h, err := ck.Tensor(name)
			if err != nil {
				return err
			}
			ts = append(ts, gguf.WriteTensor{Name: g, Host: h})
		}
	}
	stacks := [][]string{{"ffn_gate_exps", "gate_proj"}, {"ffn_up_exps", "up_proj"}, {"ffn_down_exps", "down_proj"}}
	if merged {
		stacks = [][]string{{"ffn_gate_up_exps", "gate_proj", "up_proj"}, {"ffn_down_exps", "down_proj"}}
	}
	for l := range c.NumHiddenLayers {
		for _, s := range stacks {
			var data []byte
			var shape []int
			var format tensor.Format
			for e := range c.NumExperts {
				for _, part := range s[1:] {
					h, err := ck.Tensor(fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s.weight", l, e, part))
					if err != nil {
						return err
					}
					data, shape, format = append(data, h.Data...), h.Shape, h.Format
				}
			}
			full := []int{c.NumExperts, shape[0] * (len(s) - 1), shape[1]}
			ts = append(ts, gguf.WriteTensor{Name: fmt.Sprintf("blk.%d.%s.weight", l, s[0]), Host: &tensor.Host{Format: format, Shape: full, Data: data}})
		}
	}
	return gguf.Write(out, meta, ts)
}
