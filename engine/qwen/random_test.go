package qwen_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/cpu"
	"github.com/macpool/macpool/engine/tensor"
)

// memSource is an in-memory checkpoint of random bf16 weights with the
// tensor names and shapes of a dense Qwen3 (or Qwen2) config.
type memSource struct {
	cfg     *checkpoint.Config
	tensors map[string]*tensor.Host
}

func (s *memSource) Config() *checkpoint.Config { return s.cfg }
func (s *memSource) Has(name string) bool       { _, ok := s.tensors[name]; return ok }
func (s *memSource) Tensor(name string) (*tensor.Host, error) {
	h, ok := s.tensors[name]
	if !ok {
		return nil, fmt.Errorf("tensor %s not found", name)
	}
	return h, nil
}

// randomBF16 fills a tensor with uniform values of standard deviation std
// (xorshift: setting up a 0.6B model must take seconds, not minutes).
func randomBF16(name string, seed uint64, std float64, shape ...int) *tensor.Host {
	h := &tensor.Host{Name: name, Format: tensor.BF16, Shape: shape}
	h.Data = make([]byte, 2*h.Numel())
	a := float32(std * math.Sqrt(3))
	x := seed*0x9E3779B97F4A7C15 | 1
	for i := 0; i < len(h.Data); i += 2 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		u := float32(x>>40)/float32(1<<24)*2 - 1
		binary.LittleEndian.PutUint16(h.Data[i:], tensor.F32ToBF16(u*a))
	}
	return h
}

func randomSource(cfg *checkpoint.Config) *memSource {
	s := &memSource{cfg: cfg, tensors: map[string]*tensor.Host{}}
	seed := uint64(1)
	add := func(name string, std float64, shape ...int) {
		seed++
		s.tensors[name] = randomBF16(name, seed, std, shape...)
	}
	H, qd, kvd, I := cfg.HiddenSize, cfg.NumAttentionHeads*cfg.HeadDim, cfg.NumKeyValueHeads*cfg.HeadDim, cfg.IntermediateSize
	add("model.embed_tokens.weight", 1, cfg.VocabSize, H)
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"input_layernorm.weight", 0.3, H)
		add(p+"post_attention_layernorm.weight", 0.3, H)
		add(p+"self_attn.q_proj.weight", 1/math.Sqrt(float64(H)), qd, H)
		add(p+"self_attn.k_proj.weight", 1/math.Sqrt(float64(H)), kvd, H)
		add(p+"self_attn.v_proj.weight", 1/math.Sqrt(float64(H)), kvd, H)
		add(p+"self_attn.o_proj.weight", 1/math.Sqrt(float64(qd)), H, qd)
		add(p+"self_attn.q_norm.weight", 0.3, cfg.HeadDim)
		add(p+"self_attn.k_norm.weight", 0.3, cfg.HeadDim)
		add(p+"mlp.gate_proj.weight", 1/math.Sqrt(float64(H)), I, H)
		add(p+"mlp.up_proj.weight", 1/math.Sqrt(float64(H)), I, H)
		add(p+"mlp.down_proj.weight", 1/math.Sqrt(float64(I)), H, I)
	}
	add("model.norm.weight", 0.3, H)
	if !cfg.TieWordEmbeddings {
		add("lm_head.weight", 1/math.Sqrt(float64(H)), cfg.VocabSize, H)
	}
	return s
}

// qwen3_06B is the Qwen3-0.6B shape (tied embeddings, as the real one).
func qwen3_06B(layers int) *checkpoint.Config {
	return &checkpoint.Config{
		ModelType: "qwen3", HiddenSize: 1024, IntermediateSize: 3072, NumHiddenLayers: layers,
		NumAttentionHeads: 16, NumKeyValueHeads: 8, HeadDim: 128, VocabSize: 151936,
		MaxPositionEmbeddings: 40960, RMSNormEps: 1e-6, RopeTheta: 1e6, PartialRotaryFactor: 1,
		TieWordEmbeddings: true, BOSTokenID: -1, EOSTokenIDs: []int{151645},
	}
}

func small() *checkpoint.Config {
	return &checkpoint.Config{
		ModelType: "qwen3", HiddenSize: 48, IntermediateSize: 80, NumHiddenLayers: 2,
		NumAttentionHeads: 6, NumKeyValueHeads: 2, HeadDim: 24, VocabSize: 300,
		RMSNormEps: 1e-6, RopeTheta: 1e4, PartialRotaryFactor: 1, BOSTokenID: -1,
	}
}

func TestShapeErrorsNameTensor(t *testing.T) {
	be, err := cpu.New(cpu.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	src := randomSource(small())
	src.tensors["model.layers.1.self_attn.k_proj.weight"] = randomBF16("k", 1, 1, 24, 47)
	_, err = engine.New(be, src)
	want := "tensor model.layers.1.self_attn.k_proj.weight: shape [24 47], want [48 48]"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got error %v, want one containing %q", err, want)
	}
	src = randomSource(small())
	delete(src.tensors, "model.layers.0.self_attn.q_norm.weight")
	if _, err = engine.New(be, src); err == nil || !strings.Contains(err.Error(), "model.layers.0.self_attn.q_norm.weight") {
		t.Errorf("missing tensor: got %v", err)
	}
}

// Partial rotary and untied heads on a random model: incremental decode
// equals the one-pass logits (a self-consistency check away from the
// fixture sizes).
func TestRandomModelPartialRotary(t *testing.T) {
	be, err := cpu.New(cpu.Config{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	cfg := small()
	cfg.PartialRotaryFactor = 0.5
	m, err := engine.New(be, randomSource(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ids := []int{5, 299, 17, 0, 42, 42, 7, 100, 3}
	full, _ := m.NewCache()
	want := forwardAll(t, m, full, ids)
	c, _ := m.NewCache()
	got := forwardAll(t, m, c, ids[:4])
	for i := 4; i < len(ids); i++ {
		out, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: ids[i : i+1]}})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out[0]...)
	}
	if e := relL2(got, want); e > 1e-5 {
		t.Errorf("incremental vs one pass: relative L2 error %.3g", e)
	}
}

func benchModel(b *testing.B, layers int) *engine.Model {
	b.Helper()
	be, err := cpu.New(cpu.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	m, err := engine.New(be, randomSource(qwen3_06B(layers)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

// benchLayers: the full 28 layers of Qwen3-0.6B (about 1.2 GB of bf16).
const benchLayers = 28

// BenchmarkDecode: one token per op at a context of 128 positions.
func BenchmarkDecode(b *testing.B) {
	m := benchModel(b, benchLayers)
	ctx := context.Background()
	c, _ := m.NewCache()
	defer c.Free()
	prompt := make([]int, 128)
	for i := range prompt {
		prompt[i] = (i * 7919) % 151936
	}
	if _, err := m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: prompt}}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: []int{i % 1000}}}); err != nil {
			b.Fatal(err)
		}
		c.Truncate(128)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkPrefill: a 128-token prompt per op into an empty cache.
func BenchmarkPrefill(b *testing.B) {
	m := benchModel(b, benchLayers)
	ctx := context.Background()
	c, _ := m.NewCache()
	defer c.Free()
	prompt := make([]int, 128)
	for i := range prompt {
		prompt[i] = (i * 7919) % 151936
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Truncate(0)
		if _, err := m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: prompt}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(prompt))/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkDecodeBatch8: one decode step of 8 sequences (context 128 each)
// per op, as continuous batching runs them; tok/s counts all 8.
func BenchmarkDecodeBatch8(b *testing.B) {
	m := benchModel(b, benchLayers)
	ctx := context.Background()
	seqs := make([]engine.Seq, 8)
	for s := range seqs {
		c, _ := m.NewCache()
		defer c.Free()
		prompt := make([]int, 128)
		for i := range prompt {
			prompt[i] = (i*7919 + s*31) % 151936
		}
		if _, err := m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: prompt}}); err != nil {
			b.Fatal(err)
		}
		seqs[s] = engine.Seq{Cache: c, Tokens: []int{s}}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Forward(ctx, seqs); err != nil {
			b.Fatal(err)
		}
		for _, s := range seqs {
			s.Cache.Truncate(128)
		}
	}
	b.ReportMetric(float64(8*b.N)/b.Elapsed().Seconds(), "tok/s")
}
