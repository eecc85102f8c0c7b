//go:build linux || darwin

package metal

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	_ "github.com/macpool/macpool/engine/qwen"
	"github.com/macpool/macpool/metal/gpu"
)

func fixture(name string) string { return filepath.Join("..", "testdata", name) }

func loadEmulated(t *testing.T, dir string) *engine.Model {
	t.Helper()
	skipWithoutDevice(t)
	m, err := engine.Load(dir, engine.Options{Backend: testBackendName})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// readRef reads dir/ref.json and the reference logits (dir/ref_logits.f32
// unless logitsPath is given).
func readRef(t *testing.T, dir, logitsPath string) (ids, greedyPrompt, greedyOut []int, vocab int, logits []float32) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		InputIDs     []int `json:"input_ids"`
		LogitsShape  []int `json:"logits_shape"`
		GreedyPrompt []int `json:"greedy_prompt"`
		GreedyOut    []int `json:"greedy_out"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if logitsPath == "" {
		logitsPath = filepath.Join(dir, "ref_logits.f32")
	}
	b, err := os.ReadFile(logitsPath)
	if err != nil {
		t.Fatal(err)
	}
	logits = make([]float32, len(b)/4)
	for i := range logits {
		logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	if len(r.LogitsShape) == 2 {
		vocab = r.LogitsShape[1]
	}
	return r.InputIDs, r.GreedyPrompt, r.GreedyOut, vocab, logits
}

// TestModelsMatchReference runs every fixture model (qwen2, qwen3, qwen3
// with tied embeddings, qwen3_moe, qwen3_5, qwen3_5_moe, qwen3_next; HF, MLX
// and GGUF) through the metal backend — on Linux the host code on the fake
// runtime, the kernels in the emulator: every position within 1e-4 rel-L2
// of the reference (HF float32; GGUF: the exact dequantized weights).
func TestModelsMatchReference(t *testing.T) {
	gguf := fixture("gguf")
	for _, c := range []struct{ name, model, ref, logits string }{
		{"hf", fixture("hf/qwen3"), fixture("hf/qwen3"), ""},
		{"mlx-4bit", fixture("mlx/qwen3-4bit"), fixture("mlx/qwen3-4bit"), ""},
		{"mlx-8bit", fixture("mlx/qwen3-8bit"), fixture("mlx/qwen3-8bit"), ""},
		{"hf/qwen3_5", fixture("hf/qwen3_5"), fixture("hf/qwen3_5"), ""},
		{"mlx/qwen3_5-4bit", fixture("mlx/qwen3_5-4bit"), fixture("mlx/qwen3_5-4bit"), ""},
		{"hf/qwen3_next", fixture("hf/qwen3_next"), fixture("hf/qwen3_next"), ""},
		{"hf/qwen3_moe", fixture("hf/qwen3_moe"), fixture("hf/qwen3_moe"), ""},
		{"hf/qwen3_5_moe", fixture("hf/qwen3_5_moe"), fixture("hf/qwen3_5_moe"), ""},
		{"mlx/qwen3_next-4bit", fixture("mlx/qwen3_next-4bit"), fixture("mlx/qwen3_next-4bit"), ""},
		{"hf/qwen2", fixture("hf/qwen2"), fixture("hf/qwen2"), ""},
		{"hf/qwen3_tied", fixture("hf/qwen3_tied"), fixture("hf/qwen3_tied"), ""},
		{"mlx/qwen3_tied-4bit", fixture("mlx/qwen3_tied-4bit"), fixture("mlx/qwen3_tied-4bit"), ""},
		{"mlx/qwen3_moe-4bit", fixture("mlx/qwen3_moe-4bit"), fixture("mlx/qwen3_moe-4bit"), ""},
		{"mlx/qwen3_5_moe-4bit", fixture("mlx/qwen3_5_moe-4bit"), fixture("mlx/qwen3_5_moe-4bit"), ""},
		{"gguf-q8_0", filepath.Join(gguf, "qwen3-q8_0.gguf"), gguf, filepath.Join(gguf, "qwen3-q8_0.ref_logits.f32")},
		{"gguf-q4_0", filepath.Join(gguf, "qwen3-q4_0.gguf"), gguf, filepath.Join(gguf, "qwen3-q4_0.ref_logits.f32")},
		{"gguf-q6_k", filepath.Join(gguf, "qwen3-q6_k.gguf"), gguf, filepath.Join(gguf, "qwen3-q6_k.ref_logits.f32")},
		{"gguf-q4_k_m", filepath.Join(gguf, "qwen3-q4_k_m.gguf"), gguf, filepath.Join(gguf, "qwen3-q4_k_m.ref_logits.f32")},
		{"gguf-qwen3moe-q4_k_m", filepath.Join(gguf, "qwen3moe-q4_k_m.gguf"), gguf, filepath.Join(gguf, "qwen3moe-q4_k_m.ref_logits.f32")},
		{"gguf-qwen3moe-q4_0", filepath.Join(gguf, "qwen3moe-q4_0.gguf"), gguf, filepath.Join(gguf, "qwen3moe-q4_0.ref_logits.f32")},
		{"gguf-bf16", filepath.Join(gguf, "qwen3-bf16.gguf"), gguf, filepath.Join(gguf, "qwen3-bf16.ref_logits.f32")},
		{"gguf-qwen3moe-q8_0", filepath.Join(gguf, "qwen3moe-q8_0.gguf"), gguf, filepath.Join(gguf, "qwen3moe-q8_0.ref_logits.f32")},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.model); err != nil {
				t.Skipf("fixture: %v", err)
			}
			m := loadEmulated(t, c.model)
			ids, _, _, _, want := readRef(t, c.ref, c.logits)
			vocab := m.VocabSize()
			cache, err := m.NewCache()
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Free()
			out, err := m.Forward(context.Background(), []engine.Seq{{Cache: cache, Tokens: ids, AllLogits: true}})
			if err != nil {
				t.Fatal(err)
			}
			got := out[0]
			if len(got) != len(want) {
				t.Fatalf("%d logits, want %d", len(got), len(want))
			}
			worst := 0.0
			for p := range ids {
				e := relL2(got[p*vocab:(p+1)*vocab], want[p*vocab:(p+1)*vocab])
				worst = max(worst, e)
				if e >= 1e-4 {
					t.Errorf("position %d: relative L2 error %.3g, want < 1e-4", p, e)
				}
			}
			t.Logf("%s on %s: max relative L2 error over %d positions: %.3g", c.name, m.Backend().Name(), len(ids), worst)
		})
	}
}

// TestGreedyIncremental decodes token by token (KV cache growth, decode
// attention, recurrent DeltaNet steps, MoE with one token) and must
// reproduce HF's greedy continuation.
func TestGreedyIncremental(t *testing.T) {
	for _, name := range []string{"qwen3", "qwen3_5", "qwen3_next", "qwen3_5_moe"} {
		t.Run(name, func(t *testing.T) {
			dir := fixture("hf/" + name)
			m := loadEmulated(t, dir)
			_, prompt, want, _, _ := readRef(t, dir, "")
			got, err := m.Generate(context.Background(), prompt, len(want), engine.Greedy{}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("generated %d tokens %v, want %v", len(got), got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("token %d: got %v, want %v", i, got, want)
				}
			}
		})
	}
}

// countingDevice counts command buffers committed on the wrapped device.
type countingDevice struct {
	gpu.Device
	commits *int
}

type countingCB struct {
	gpu.CommandBuffer
	commits *int
}

func (d countingDevice) NewCommandBuffer() gpu.CommandBuffer {
	return countingCB{d.Device.NewCommandBuffer(), d.commits}
}

func (c countingCB) Commit() { *c.commits++; c.CommandBuffer.Commit() }

// TestOneSyncPerForward: a whole forward pass (prefill or decode, dense or
// hybrid with MoE) waits once, when the logits are read, although it is
// split into several command buffers (committed as they fill, so a GPU
// starts early); the split changes no result: logits equal those of one
// command buffer per pass, bit for bit.
func TestOneSyncPerForward(t *testing.T) {
	for _, name := range []string{"hf/qwen3", "hf/qwen3_5_moe"} {
		t.Run(name, func(t *testing.T) {
			var ref [][]float32
			for _, split := range []int{-1, 8} {
				commits := 0
				be, err := New(Config{Device: countingDevice{newTestDevice(t), &commits}, Name: testBackendName, SplitDispatches: split})
				if err != nil {
					t.Fatal(err)
				}
				defer be.Close()
				ck, err := checkpoint.Open(fixture(name))
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				m, err := engine.New(be, ck)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				c, err := m.NewCache()
				if err != nil {
					t.Fatal(err)
				}
				defer c.Free()
				for i, toks := range [][]int{{1, 2, 3, 4, 5, 6, 7}, {8}, {9}} {
					commits0, syncs0 := commits, be.syncs
					out, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: toks}})
					if err != nil {
						t.Fatal(err)
					}
					if n := be.syncs - syncs0; n != 1 {
						t.Errorf("split %d, forward of %d tokens: %d waits, want 1", split, len(toks), n)
					}
					switch n := commits - commits0; {
					case split < 0 && n != 1:
						t.Errorf("forward of %d tokens: %d command buffers, want 1", len(toks), n)
					case split > 0 && n < 3:
						t.Errorf("split %d, forward of %d tokens: %d command buffers, want several", split, len(toks), n)
					}
					if split < 0 {
						ref = append(ref, out[0])
					} else if !slices.Equal(out[0], ref[i]) {
						t.Errorf("split %d, forward %d: logits differ from one command buffer's", split, i)
					}
				}
			}
		})
	}
}
