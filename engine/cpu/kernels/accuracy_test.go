package kernels_test

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
	_ "github.com/macpool/macpool/engine/cpu"
	"github.com/macpool/macpool/engine/cpu/kernels"
	_ "github.com/macpool/macpool/engine/qwen"
	"github.com/macpool/macpool/internal/reftest"
)

// The accuracy of the int8-activation path on whole models: the GGUF
// fixtures through engine.Load (default options: activations quantized),
// compared with the exact references, next to what llama.cpp's own CPU
// path gives on the same files (NAME.llamacpp_logits.f32). The bound is
// llama.cpp's error ×1.25 (dense) — "at least as close as llama.cpp" with a
// margin for summation-order noise; MoE expert flips make those files
// noisier, so they are bounded by ×2 of llama.cpp or 0.05.

const testdata = "../../../testdata"

// medianRelL2 is the median per-position relative L2 error.
func medianRelL2(got, want []float32, vocab int) float64 {
	var e []float64
	for p := 0; p < len(want)/vocab; p++ {
		e = append(e, reftest.RelL2(got[p*vocab:(p+1)*vocab], want[p*vocab:(p+1)*vocab]))
	}
	sort.Float64s(e)
	return e[len(e)/2]
}

func TestQuantizedActivationsVsLlamaCpp(t *testing.T) {
	dir := filepath.Join(testdata, "gguf")
	ref := reftest.ReadRef(t, dir)
	vocab := ref.LogitsShape[1]
	// The baseline: how far llama.cpp's own CPU output is from the exact
	// references, for every fixture.
	files, _ := filepath.Glob(filepath.Join(dir, "*.llamacpp_logits.f32"))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".llamacpp_logits.f32")
		want := reftest.ReadF32(t, filepath.Join(dir, name+".ref_logits.f32"))
		got := reftest.ReadF32(t, f)
		t.Logf("baseline llama.cpp %s: per-position rel-L2 max %.3g median %.3g", name, reftest.MaxRelL2(got, want, vocab), medianRelL2(got, want, vocab))
	}
	for _, name := range []string{"qwen3-q8_0", "qwen3-q4_0", "qwen3moe-q8_0", "qwen3moe-q4_0"} {
		t.Run(name, func(t *testing.T) {
			want := reftest.ReadF32(t, filepath.Join(dir, name+".ref_logits.f32"))
			llama := reftest.MaxRelL2(reftest.ReadF32(t, filepath.Join(dir, name+".llamacpp_logits.f32")), want, vocab)
			lg := reftest.Logits(t, filepath.Join(dir, name+".gguf"), ref.InputIDs, engine.Options{Threads: 2})
			got := reftest.MaxRelL2(lg, want, vocab)
			t.Logf("%s: int8 activations median rel-L2 %.3g", name, medianRelL2(lg, want, vocab))
			exact := reftest.MaxRelL2(reftest.Logits(t, filepath.Join(dir, name+".gguf"), ref.InputIDs, engine.Options{Threads: 2, ExactMatMul: true}), want, vocab)
			t.Logf("%s: max per-position rel-L2 vs exact reference: int8 activations %.3g, exact path %.3g, llama.cpp %.3g", name, got, exact, llama)
			bound := 1.25 * llama
			if strings.HasPrefix(name, "qwen3moe") {
				bound = max(2*llama, 0.05)
			}
			if got > bound {
				t.Errorf("int8-activation rel-L2 %.3g > bound %.3g (llama.cpp %.3g)", got, bound, llama)
			}
			if exact > 1e-4 {
				t.Errorf("exact path rel-L2 %.3g, want < 1e-4", exact)
			}
		})
	}
}

// TestQuantizeOnLoad measures --quantize q8/q4 on the bf16 HF fixture
// against its float32 reference logits.
func TestQuantizeOnLoad(t *testing.T) {
	dir := filepath.Join(testdata, "hf", "qwen3")
	ref := reftest.ReadRef(t, dir)
	want := reftest.ReadF32(t, filepath.Join(dir, "ref_logits.f32"))
	vocab := ref.LogitsShape[1]
	for _, c := range []struct {
		q     string
		bound float64
	}{{"", 1e-4}, {"q8", 0.05}, {"q4", 0.6}} {
		got := reftest.MaxRelL2(reftest.Logits(t, dir, ref.InputIDs, engine.Options{Threads: 2, Quantize: c.q}), want, vocab)
		exact := reftest.MaxRelL2(reftest.Logits(t, dir, ref.InputIDs, engine.Options{Threads: 2, Quantize: c.q, ExactMatMul: true}), want, vocab)
		t.Logf("quantize %q: max per-position rel-L2 vs hf reference %.3g (float32 activations: %.3g)", c.q, got, exact)
		if got > c.bound {
			t.Errorf("quantize %q: rel-L2 %.3g > %.3g", c.q, got, c.bound)
		}
	}
}

// TestMLXQuantizedActivations: MLX affine fixtures through the int8 path
// vs their exact (dequantized) references.
func TestMLXQuantizedActivations(t *testing.T) {
	for _, name := range []string{"qwen3-4bit", "qwen3-8bit", "qwen3_moe-4bit"} {
		dir := filepath.Join(testdata, "mlx", name)
		ref := reftest.ReadRef(t, dir)
		want := reftest.ReadF32(t, filepath.Join(dir, "ref_logits.f32"))
		vocab := ref.LogitsShape[1]
		lg := reftest.Logits(t, dir, ref.InputIDs, engine.Options{Threads: 2})
		got, med := reftest.MaxRelL2(lg, want, vocab), medianRelL2(lg, want, vocab)
		exact := reftest.MaxRelL2(reftest.Logits(t, dir, ref.InputIDs, engine.Options{Threads: 2, ExactMatMul: true}), want, vocab)
		t.Logf("%s: per-position rel-L2 vs exact reference: int8 activations max %.3g median %.3g, exact path max %.3g", name, got, med, exact)
		if strings.Contains(name, "moe") {
			// Expert choices flip under small perturbations on these tiny
			// random models (llama.cpp's own GGUF MoE outputs differ by up to
			// 0.82): bound the median position instead.
			got = med
		}
		if exact > 1e-4 {
			t.Errorf("%s: exact path rel-L2 %.3g, want < 1e-4", name, exact)
		}
		if got > 0.05 {
			t.Errorf("%s: int8-activation rel-L2 %.3g, want <= 0.05", name, got)
		}
	}
}

// TestKQuantRequantized: k-quant GGUF fixtures with --quantize q8 (their
// matrices requantized to Q8_0 at load) vs the exact references and
// llama.cpp's output.
func TestKQuantRequantized(t *testing.T) {
	dir := filepath.Join(testdata, "gguf")
	ref := reftest.ReadRef(t, dir)
	vocab := ref.LogitsShape[1]
	for _, name := range []string{"qwen3-q4_k_m", "qwen3-q6_k"} {
		want := reftest.ReadF32(t, filepath.Join(dir, name+".ref_logits.f32"))
		llama := reftest.ReadF32(t, filepath.Join(dir, name+".llamacpp_logits.f32"))
		lg := reftest.Logits(t, filepath.Join(dir, name+".gguf"), ref.InputIDs, engine.Options{Threads: 2, Quantize: "q8"})
		got, med := reftest.MaxRelL2(lg, want, vocab), medianRelL2(lg, want, vocab)
		t.Logf("%s --quantize q8: rel-L2 max %.3g median %.3g (llama.cpp max %.3g median %.3g)", name, got, med, reftest.MaxRelL2(llama, want, vocab), medianRelL2(llama, want, vocab))
		// Requantizing adds the Q8_0 rounding of the weights (~0.4% each):
		// about 1.5× llama.cpp's error on these fixtures.
		if got > 2*reftest.MaxRelL2(llama, want, vocab) {
			t.Errorf("%s: rel-L2 %.3g > 2 × llama.cpp's", name, got)
		}
	}
}

// TestKQuantNative: K-quant fixtures with default options (Q4_K, Q5_K and
// Q6_K matrices on the native packed kernels; int8 activations) vs
// the exact references, within the bounds of
// TestQuantizedActivationsVsLlamaCpp (the all-Q6_K file too: 1.25×
// llama.cpp's error; the AVX2 kernels give the same bits as the VNNI ones).
// Without either they are requantized to Q8_0 at load
// (TestKQuantRequantized's bound). With ExactMatMul they stay exact.
func TestKQuantNative(t *testing.T) {
	dir := filepath.Join(testdata, "gguf")
	ref := reftest.ReadRef(t, dir)
	vocab := ref.LogitsShape[1]
	for _, name := range []string{"qwen3-q4_k_m", "qwen3moe-q4_k_m", "qwen3-q6_k"} {
		want := reftest.ReadF32(t, filepath.Join(dir, name+".ref_logits.f32"))
		llama := reftest.MaxRelL2(reftest.ReadF32(t, filepath.Join(dir, name+".llamacpp_logits.f32")), want, vocab)
		lg := reftest.Logits(t, filepath.Join(dir, name+".gguf"), ref.InputIDs, engine.Options{Threads: 2})
		got, med := reftest.MaxRelL2(lg, want, vocab), medianRelL2(lg, want, vocab)
		exact := reftest.MaxRelL2(reftest.Logits(t, filepath.Join(dir, name+".gguf"), ref.InputIDs, engine.Options{Threads: 2, ExactMatMul: true}), want, vocab)
		t.Logf("%s: rel-L2 max %.3g median %.3g, exact path %.3g (llama.cpp max %.3g)", name, got, med, exact, llama)
		bound := 1.25 * llama
		moe := strings.HasPrefix(name, "qwen3moe")
		switch {
		case moe && !kernels.KQuantPacked():
			// Requantized to Q8_0 (no VNNI or AVX2, below): expert choices
			// flip on this tiny random model (max 0.8 measured), so the
			// median position is bounded, as for MLX MoE.
			got, bound = med, 0.05
		case moe:
			bound = max(2*llama, 0.05)
		case !kernels.KQuantPacked():
			// No native K-quant kernels (no VNNI or AVX2): requantized to
			// Q8_0 at load, the bound of TestKQuantRequantized.
			bound = 2 * llama
		}
		if got > bound {
			t.Errorf("%s: rel-L2 %.3g > bound %.3g (llama.cpp %.3g)", name, got, bound, llama)
		}
		if exact > 1e-4 {
			t.Errorf("%s: exact path rel-L2 %.3g, want < 1e-4", name, exact)
		}
	}
}
