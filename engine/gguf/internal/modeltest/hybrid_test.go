package modeltest

import (
	"path/filepath"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/gguf/internal/ggufconv"
	"github.com/macpool/macpool/engine/tensor"
	"github.com/macpool/macpool/internal/reftest"
)

// TestHybridLogits converts the Qwen3-Next / Qwen3.5 / Qwen3.5-MoE HF
// fixtures to GGUF the way llama.cpp's converter does (our reading of it:
// engine/gguf/internal/ggufconv), loads them through engine.Load (so
// checkpoint.Open → engine/gguf's inverse mapping) and compares the logits
// with the fixtures' transformers reference. The fixture weights are bf16, so
// F32, BF16 and F16 files hold them exactly (F16: up to subnormal rounding)
// and must match to < 1e-4 at every position. Q8_0 and Q4_0 change the
// weights themselves, and these small random models amplify that (rel. L2
// 0.1-1 against the bf16 reference), so a quantized file is compared with
// its own reference: an F32 file of the same weights quantized and
// dequantized (ggufconv FakeQuant), which must match to < 1e-4 per position.
// That checks the quantized layouts (rows moved as blocks, out_proj
// dequantized when a value head is not whole blocks, stacked experts).
func TestHybridLogits(t *testing.T) {
	if testing.Short() {
		t.Skip("whole-model test")
	}
	type variant struct {
		format tensor.Format
		legacy bool
		quant  bool
	}
	variants := []variant{
		{tensor.F32, false, false}, {tensor.BF16, false, false}, {tensor.F16, false, false},
		{tensor.Q8_0, false, true}, {tensor.Q4_0, false, true},
	}
	for _, fixture := range []string{"qwen3_next", "qwen3_5", "qwen3_5_moe"} {
		dir := filepath.Join("..", "..", "..", "..", "testdata", "hf", fixture)
		ref := reftest.ReadRef(t, dir)
		want := reftest.ReadF32(t, filepath.Join(dir, "ref_logits.f32"))
		vs := variants
		if fixture == "qwen3_next" {
			vs = append(vs, variant{tensor.F32, true, false}, variant{tensor.Q8_0, true, true}) // ssm_in (legacy layout)
		}
		for _, v := range vs {
			name := fixture + "_" + v.format.String()
			if v.legacy {
				name += "_ssm_in"
			}
			t.Run(name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), name+".gguf")
				opts := ggufconv.Options{LegacyQKVZ: v.legacy}
				if err := ggufconv.Convert(dir, path, v.format, opts); err != nil {
					t.Fatal(err)
				}
				exact := engine.Options{Threads: 2, ExactMatMul: true}
				got := reftest.Logits(t, path, ref.InputIDs, exact)
				if len(got) != len(want) {
					t.Fatalf("%d logits, want %d", len(got), len(want))
				}
				vocab := ref.LogitsShape[1]
				if !v.quant {
					worst := reftest.CheckPositions(t, got, want, vocab, len(ref.InputIDs), 1e-4)
					t.Logf("%s: max relative L2 error over %d positions: %.3g", name, len(ref.InputIDs), worst)
					if v.format == tensor.F32 {
						// Same weights through the safetensors path: only the
						// float32 rounding of 1+w and -exp(A_log) may differ.
						hf := reftest.Logits(t, dir, ref.InputIDs, exact)
						e := reftest.MaxRelL2(got, hf, vocab)
						t.Logf("%s: max relative L2 difference from the HF checkpoint through the same engine: %.3g", name, e)
						if e > 1e-5 {
							t.Errorf("%s: differs from the HF checkpoint by %.3g, want < 1e-5", name, e)
						}
					}
					return
				}
				fake := filepath.Join(t.TempDir(), name+"_fake.gguf")
				opts.FakeQuant = true
				if err := ggufconv.Convert(dir, fake, v.format, opts); err != nil {
					t.Fatal(err)
				}
				qref := reftest.Logits(t, fake, ref.InputIDs, exact)
				worst := reftest.CheckPositions(t, got, qref, vocab, len(ref.InputIDs), 1e-4)
				t.Logf("%s: max relative L2 error over %d positions vs the dequantized-weights reference: %.3g (vs the bf16 HF reference, whole matrix: %.3g)",
					name, len(ref.InputIDs), worst, reftest.RelL2(got, want))
			})
		}
	}
}
