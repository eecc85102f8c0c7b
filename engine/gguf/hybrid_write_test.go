package gguf_test

import (
	"bytes"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/gguf"
)

// hybridGGUFConfig is the gguf.Config of a checkpoint config.
func hybridGGUFConfig(c *checkpoint.Config) *gguf.Config {
	return &gguf.Config{ModelType: c.ModelType, HiddenSize: c.HiddenSize, IntermediateSize: c.IntermediateSize,
		NumHiddenLayers: c.NumHiddenLayers, NumAttentionHeads: c.NumAttentionHeads, NumKeyValueHeads: c.NumKeyValueHeads,
		HeadDim: c.HeadDim, VocabSize: c.VocabSize, MaxPositionEmbeddings: c.MaxPositionEmbeddings,
		RMSNormEps: c.RMSNormEps, RopeTheta: c.RopeTheta, BOSTokenID: -1,
		NumExperts: c.NumExperts, NumExpertsPerTok: c.NumExpertsPerTok, MoEIntermediateSize: c.MoEIntermediateSize,
		NormTopKProb: c.NormTopKProb, PartialRotaryFactor: c.PartialRotaryFactor, LayerTypes: c.LayerTypes,
		SharedExpertIntermediateSize: c.SharedExpertIntermediateSize, TieWordEmbeddings: c.TieWordEmbeddings,
		LinearConvKernelDim: c.LinearConvKernelDim, LinearKeyHeadDim: c.LinearKeyHeadDim, LinearValueHeadDim: c.LinearValueHeadDim,
		LinearNumKeyHeads: c.LinearNumKeyHeads, LinearNumValueHeads: c.LinearNumValueHeads}
}

// TestHybridWriteFixtures writes the hybrid HF fixtures (bf16 matrices,
// every 1-D weight random, 2 key and 4 value heads: the value-head order
// matters everywhere) with HybridMeta + HybridTensors and reads them back
// through the loader: matrices (including Qwen3-Next's in_proj_qkvz, split
// into attn_qkv + attn_gate and rebuilt) byte for byte, 1-D tensors within
// the float32 rounding of 1+w and -exp(A_log), and the config.
func TestHybridWriteFixtures(t *testing.T) {
	for _, fx := range hybridFixtures {
		t.Run(fx, func(t *testing.T) {
			ck, err := checkpoint.Open(hfDir(fx))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			gc := hybridGGUFConfig(ck.Config())
			meta, err := gguf.HybridMeta(gc)
			if err != nil {
				t.Fatal(err)
			}
			ts, err := gguf.HybridTensors(gc, ck.Names(), ck.Tensor)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), fx+".gguf")
			if err := gguf.Write(path, meta, ts); err != nil {
				t.Fatal(err)
			}
			back, err := checkpoint.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer back.Close()
			want, got := ck.Config(), back.Config()
			if got.ModelType != want.ModelType || !slices.Equal(got.LayerTypes, want.LayerTypes) || got.PartialRotaryFactor != want.PartialRotaryFactor ||
				got.LinearNumValueHeads != want.LinearNumValueHeads || got.NumExperts != want.NumExperts {
				t.Fatalf("config read back %+v, want %+v", got, want)
			}
			for _, name := range ck.Names() {
				w, err := ck.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				g, err := back.Tensor(name)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if !slices.Equal(g.Shape, w.Shape) {
					t.Errorf("%s: shape %v, want %v", name, g.Shape, w.Shape)
					continue
				}
				if len(w.Shape) == 2 && w.Shape[0] > 1 {
					if g.Format != w.Format || !bytes.Equal(g.Data, w.Data) {
						t.Errorf("%s: %v matrix differs from the %v one written", name, g.Format, w.Format)
					}
					continue
				}
				gv, _ := g.Float32s()
				wv, _ := w.Float32s()
				for i := range wv {
					tol := 0.0
					if strings.HasSuffix(name, "A_log") || (strings.Contains(name, "norm") && !strings.Contains(name, "linear_attn.norm")) {
						tol = 2e-7 * (1 + math.Abs(float64(wv[i]))) // one float32 rounding of 1+w or exp
					}
					if d := math.Abs(float64(gv[i] - wv[i])); d > tol {
						t.Errorf("%s[%d] = %g, want %g (tolerance %g)", name, i, gv[i], wv[i], tol)
						break
					}
				}
			}
		})
	}
}
