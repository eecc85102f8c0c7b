package gguf

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// TestWriteRoundTrip writes a small dense qwen3 (Q8_0/Q4_0 matrices, F32
// norms, tied embeddings) and reads it back: same config, same bytes under
// the same canonical names.
func TestWriteRoundTrip(t *testing.T) {
	c := &Config{ModelType: "qwen3", HiddenSize: 64, IntermediateSize: 96, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 32, VocabSize: 100, MaxPositionEmbeddings: 4096,
		RMSNormEps: 1e-6, RopeTheta: 1e6, PartialRotaryFactor: 1, TieWordEmbeddings: true, BOSTokenID: -1,
		EOSTokenIDs: []int{7}}
	meta, err := DenseMeta(c)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	want := map[string]*tensor.Host{}
	var ts []WriteTensor
	add := func(hf string, f tensor.Format, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		var size int
		switch f {
		case tensor.F32:
			size = 4 * n
		case tensor.Q8_0:
			size = n / 32 * 34
		case tensor.Q4_0:
			size = n / 32 * 18
		}
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		if f == tensor.F32 { // finite values
			for i := 3; i < size; i += 4 {
				data[i] &= 0x3f
			}
		}
		h := &tensor.Host{Name: hf, Format: f, Shape: shape, Data: data}
		g, ok := GGUFName(hf)
		if !ok {
			t.Fatalf("GGUFName(%s): not found", hf)
		}
		want[hf] = h
		ts = append(ts, WriteTensor{Name: g, Host: h})
	}
	H, I, hd := c.HiddenSize, c.IntermediateSize, c.HeadDim
	add("model.embed_tokens.weight", tensor.Q8_0, c.VocabSize, H)
	add("model.norm.weight", tensor.F32, H)
	for l := range c.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", tensor.F32, H)
		add(p+"post_attention_layernorm.weight", tensor.F32, H)
		add(p+"self_attn.q_norm.weight", tensor.F32, hd)
		add(p+"self_attn.k_norm.weight", tensor.F32, hd)
		add(p+"self_attn.q_proj.weight", tensor.Q8_0, c.NumAttentionHeads*hd, H)
		add(p+"self_attn.k_proj.weight", tensor.Q4_0, c.NumKeyValueHeads*hd, H)
		add(p+"self_attn.v_proj.weight", tensor.Q4_0, c.NumKeyValueHeads*hd, H)
		add(p+"self_attn.o_proj.weight", tensor.Q8_0, H, c.NumAttentionHeads*hd)
		add(p+"mlp.gate_proj.weight", tensor.Q8_0, I, H)
		add(p+"mlp.up_proj.weight", tensor.Q8_0, I, H)
		add(p+"mlp.down_proj.weight", tensor.Q8_0, H, I)
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := Write(path, meta, ts); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	wantCfg := *c
	wantCfg.LayerTypes = []string{"full_attention", "full_attention"}
	if !reflect.DeepEqual(*got, wantCfg) {
		t.Errorf("config:\n got %+v\nwant %+v", *got, wantCfg)
	}
	for name, w := range want {
		h, err := f.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if h.Format != w.Format || !reflect.DeepEqual(h.Shape, w.Shape) || !bytes.Equal(h.Data, w.Data) {
			t.Errorf("%s: got %v %v (%d bytes), want %v %v (%d bytes), same bytes %v", name, h.Format, h.Shape, len(h.Data),
				w.Format, w.Shape, len(w.Data), bytes.Equal(h.Data, w.Data))
		}
	}
	if len(f.Names()) != len(want) {
		t.Errorf("file has %d canonical tensors, want %d", len(f.Names()), len(want))
	}
}

func TestWriteRefusesUnsupported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	h := &tensor.Host{Name: "x", Format: tensor.MLXAffine, Shape: []int{2, 32}, Data: make([]byte, 32), Bits: 4, GroupSize: 32}
	if err := Write(path, nil, []WriteTensor{{Name: "x", Host: h}}); err == nil {
		t.Errorf("Write of an MLX tensor: got no error")
	}
	if _, err := DenseMeta(&Config{ModelType: "qwen3_moe", NumExperts: 8}); err == nil {
		t.Errorf("DenseMeta(qwen3_moe): got no error")
	}
}
