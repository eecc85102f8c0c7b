package bench

import (
	"bytes"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/synth"
)

// smallHybrid is a synthetic shape cut to a test's size: 4 layers (three
// linear-attention, one full, as the published pattern starts), a small
// hidden size, vocabulary and expert count, but the published linear- and
// full-attention head counts and sizes, so value heads are tiled as in the
// real files (16 key, 32 value heads of 128) and out_proj's heads are whole
// Q8_0/Q4_0 blocks.
func smallHybrid(t *testing.T, shape string) *checkpoint.Config {
	t.Helper()
	c, err := synth.Config(shape)
	if err != nil {
		t.Fatal(err)
	}
	c.HiddenSize, c.VocabSize, c.IntermediateSize = 256, 512, 512
	if c.NumExperts > 0 {
		c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize, c.SharedExpertIntermediateSize = 8, 2, 128, 128
	}
	return c
}

// TestWriteHybridGGUFRoundTrip writes small Qwen3.5 and Qwen3.6 (qwen35,
// qwen35moe) synthetic models with --write-gguf's writer and reads them back
// through checkpoint.Open (engine/gguf's inverse mapping): every canonical
// tensor must come back with the synthetic model's name, format, shape and
// bytes, and the config with its layer pattern and sizes.
func TestWriteHybridGGUFRoundTrip(t *testing.T) {
	for _, shape := range []string{"qwen3.5-9b", "qwen3.6-35b-a3b"} {
		for _, q := range []synth.Quant{synth.Q8_0, synth.Q4_0, synth.BF16} {
			t.Run(shape+"/"+string(q), func(t *testing.T) {
				sm, err := synth.New(smallHybrid(t, shape), q, 7, 4)
				if err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(t.TempDir(), "m.gguf")
				if err := writeSyntheticGGUF(sm, path, io.Discard); err != nil {
					t.Fatal(err)
				}
				ck, err := checkpoint.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				want, got := sm.Config(), ck.Config()
				if got.ModelType != want.ModelType || !slices.Equal(got.LayerTypes, want.LayerTypes) || got.NumHiddenLayers != 4 ||
					got.LinearNumKeyHeads != want.LinearNumKeyHeads || got.LinearNumValueHeads != want.LinearNumValueHeads ||
					got.LinearValueHeadDim != want.LinearValueHeadDim || got.PartialRotaryFactor != want.PartialRotaryFactor ||
					got.NumExperts != want.NumExperts || got.SharedExpertIntermediateSize != want.SharedExpertIntermediateSize {
					t.Fatalf("config read back %+v, want %+v", got, want)
				}
				names := sm.Names()
				if g := ck.Names(); len(g) != len(names) {
					t.Errorf("%d tensors read back, want %d", len(g), len(names))
				}
				for _, name := range names {
					w, err := sm.Tensor(name)
					if err != nil {
						t.Fatal(err)
					}
					g, err := ck.Tensor(name)
					if err != nil {
						t.Errorf("%s: %v", name, err)
						continue
					}
					if g.Format != w.Format || !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
						t.Errorf("%s: read back %v %v (%d bytes, equal %v), want %v %v", name, g.Format, g.Shape, len(g.Data), bytes.Equal(g.Data, w.Data), w.Format, w.Shape)
					}
				}
			})
		}
	}
}
