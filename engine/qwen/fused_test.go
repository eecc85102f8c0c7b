package qwen_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/cpu"
)

// unfused is the CPU backend seen only through engine.Backend: the dense
// layer then runs one MatMul per matrix, Add then RMSNorm, RMSNorm then
// Rope.
type unfused struct{ engine.Backend }

// fusedCounts is the CPU backend with its fused ops counted, so the test
// knows the dense layer took them.
type fusedCounts struct {
	*cpu.Backend
	shared, addNorm, normRope *int
}

func (b fusedCounts) MatMulShared(dsts []engine.Tensor, x engine.Tensor, ws []engine.Weight, precise bool) {
	*b.shared++
	b.Backend.MatMulShared(dsts, x, ws, precise)
}

func (b fusedCounts) AddRMSNorm(dst, x, h engine.Tensor, w engine.Weight, p engine.NormParams) {
	*b.addNorm++
	b.Backend.AddRMSNorm(dst, x, h, w, p)
}

func (b fusedCounts) RMSNormRope(x engine.Tensor, w engine.Weight, np engine.NormParams, pos []int, rp engine.RopeParams) {
	*b.normRope++
	b.Backend.RMSNormRope(x, w, np, pos, rp)
}

// TestDenseFusedOpsBits: the dense models give bit-identical logits with
// the CPU backend's fused ops (q/k/v and gate/up as one MatMulShared, the
// residual add fused with the next norm, the q/k norms with the rotation)
// and without them — a prompt of 40 rows (AMX tiles and the 8-row kernels),
// then decode steps — on the HF fixtures (qwen2's biased q/k/v stay
// separate) and the GGUF files, whose Q4_K_M layers mix Q4_K and Q6_K
// matrices on one input.
func TestDenseFusedOpsBits(t *testing.T) {
	for _, dir := range []string{
		hybridDir("qwen3"), hybridDir("qwen3_tied"), hybridDir("qwen2"),
		filepath.Join("..", "..", "testdata", "gguf", "qwen3-q8_0.gguf"),
		filepath.Join("..", "..", "testdata", "gguf", "qwen3-q4_k_m.gguf"),
		filepath.Join("..", "..", "testdata", "gguf", "qwen3-q6_k.gguf"),
	} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			ck, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			logits := func(be engine.Backend) []float32 {
				m, err := engine.New(be, ck)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				c := newCache(t, m)
				ids := randomIDs(5, 43, m.VocabSize())
				out := allLogits(t, m, c, ids[:40])
				for i := 40; i < len(ids); i++ {
					out = append(out, allLogits(t, m, c, ids[i:i+1])...)
				}
				return out
			}
			newCPU := func() *cpu.Backend {
				b, err := cpu.New(cpu.Config{Threads: 2})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				return b
			}
			var shared, addNorm, normRope int
			got := logits(fusedCounts{newCPU(), &shared, &addNorm, &normRope})
			want := logits(unfused{newCPU()})
			if shared == 0 || addNorm == 0 {
				t.Fatalf("fused ops not taken: %d MatMulShared, %d AddRMSNorm, %d RMSNormRope", shared, addNorm, normRope)
			}
			bad := 0
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					if bad < 3 {
						t.Errorf("logit %d: fused %v, unfused %v", i, got[i], want[i])
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d logits differ (%d MatMulShared, %d AddRMSNorm, %d RMSNormRope calls)", bad, len(want), shared, addNorm, normRope)
			}
		})
	}
}
