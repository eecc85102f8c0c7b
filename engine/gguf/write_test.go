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

// TestWriteMoERoundTrip writes a small Qwen3-MoE (ModelMeta, experts
// stacked by StackExperts under ExpertGGUFName's names) and reads it back:
// the same config and every expert's bytes under its canonical name.
func TestWriteMoERoundTrip(t *testing.T) {
	c := &Config{ModelType: "qwen3_moe", HiddenSize: 64, IntermediateSize: 96, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 32, VocabSize: 100, MaxPositionEmbeddings: 4096,
		RMSNormEps: 1e-6, RopeTheta: 1e6, PartialRotaryFactor: 1, BOSTokenID: -1, EOSTokenIDs: []int{7},
		NumExperts: 4, NumExpertsPerTok: 2, MoEIntermediateSize: 32, DecoderSparseStep: 1, NormTopKProb: true}
	meta, err := ModelMeta(c)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	host := func(hf string, f tensor.Format, rows, cols int) *tensor.Host {
		size := rows * cols * 4
		if f == tensor.Q8_0 {
			size = rows * cols / 32 * 34
		}
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(r.Uint32())
			if f == tensor.F32 && i%4 == 3 {
				data[i] &= 0x3f
			}
		}
		return &tensor.Host{Name: hf, Format: f, Shape: []int{rows, cols}, Data: data}
	}
	want := map[string]*tensor.Host{}
	var ts []WriteTensor
	plain := func(hf string, f tensor.Format, rows, cols int) {
		h := host(hf, f, rows, cols)
		if rows == 1 {
			h.Shape = []int{cols}
		}
		g, ok := GGUFName(hf)
		if !ok {
			t.Fatalf("GGUFName(%s): not found", hf)
		}
		want[hf] = h
		ts = append(ts, WriteTensor{Name: g, Host: h})
	}
	H, hd, E, I := c.HiddenSize, c.HeadDim, c.NumExperts, c.MoEIntermediateSize
	plain("model.embed_tokens.weight", tensor.Q8_0, c.VocabSize, H)
	plain("lm_head.weight", tensor.Q8_0, c.VocabSize, H)
	plain("model.norm.weight", tensor.F32, 1, H)
	for l := range c.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", l)
		plain(p+"input_layernorm.weight", tensor.F32, 1, H)
		plain(p+"post_attention_layernorm.weight", tensor.F32, 1, H)
		plain(p+"self_attn.q_norm.weight", tensor.F32, 1, hd)
		plain(p+"self_attn.k_norm.weight", tensor.F32, 1, hd)
		plain(p+"self_attn.q_proj.weight", tensor.Q8_0, c.NumAttentionHeads*hd, H)
		plain(p+"self_attn.k_proj.weight", tensor.Q8_0, c.NumKeyValueHeads*hd, H)
		plain(p+"self_attn.v_proj.weight", tensor.Q8_0, c.NumKeyValueHeads*hd, H)
		plain(p+"self_attn.o_proj.weight", tensor.Q8_0, H, c.NumAttentionHeads*hd)
		plain(p+"mlp.gate.weight", tensor.F32, E, H)
		for _, part := range []struct {
			name       string
			rows, cols int
		}{{"gate_proj", I, H}, {"up_proj", I, H}, {"down_proj", H, I}} {
			var experts []*tensor.Host
			var g string
			for e := range E {
				hf := fmt.Sprintf("%smlp.experts.%d.%s.weight", p, e, part.name)
				name, idx, ok := ExpertGGUFName(hf)
				if !ok || idx != e {
					t.Fatalf("ExpertGGUFName(%s) = %s, %d, %v", hf, name, idx, ok)
				}
				g = name
				h := host(hf, tensor.Q8_0, part.rows, part.cols)
				want[hf] = h
				experts = append(experts, h)
			}
			st, err := StackExperts(g, experts)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, WriteTensor{Name: g, Host: st})
		}
	}
	path := filepath.Join(t.TempDir(), "moe.gguf")
	if err := Write(path, meta, ts); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Architecture() != "qwen3moe" {
		t.Errorf("architecture %q, want qwen3moe", f.Architecture())
	}
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
			t.Errorf("%s: got %v %v (%d bytes), want %v %v (%d bytes)", name, h.Format, h.Shape, len(h.Data), w.Format, w.Shape, len(w.Data))
		}
	}
}

// TestStackExpertsRefuses: experts of different shapes or formats, or none.
func TestStackExpertsRefuses(t *testing.T) {
	a := &tensor.Host{Format: tensor.F32, Shape: []int{2, 4}, Data: make([]byte, 32)}
	b := &tensor.Host{Format: tensor.F32, Shape: []int{4, 2}, Data: make([]byte, 32)}
	q := &tensor.Host{Format: tensor.Q8_0, Shape: []int{2, 32}, Data: make([]byte, 68)}
	for name, ex := range map[string][]*tensor.Host{"none": nil, "shape": {a, b}, "format": {a, q}, "missing": {a, nil}} {
		if _, err := StackExperts("blk.0.ffn_up_exps.weight", ex); err == nil {
			t.Errorf("%s: got no error", name)
		}
	}
	if _, err := ModelMeta(&Config{ModelType: "qwen3_5_moe_text", NumExperts: 8, NumExpertsPerTok: 2, MoEIntermediateSize: 4, NormTopKProb: true}); err == nil {
		t.Errorf("ModelMeta(qwen3_5_moe_text): got no error")
	}
}
