package checkpoint

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"

	"github.com/macpool/macpool/engine/safetensors"
	"github.com/macpool/macpool/engine/tensor"
)

var mlxFixtures = map[string]string{ // MLX folder -> HF source folder
	"mlx/qwen3-4bit":       "hf/qwen3",
	"mlx/qwen3-8bit":       "hf/qwen3",
	"mlx/qwen3_tied-4bit":  "hf/qwen3_tied",
	"mlx/qwen3_moe-4bit":   "hf/qwen3_moe",
	"mlx/qwen3_next-4bit":  "hf/qwen3_next",
	"mlx/qwen3_5-4bit":     "hf/qwen3_5",
	"mlx/qwen3_5_moe-4bit": "hf/qwen3_5_moe",
}

func TestOpenMLX(t *testing.T) {
	for name, src := range mlxFixtures {
		t.Run(name, func(t *testing.T) {
			ck, err := Open(filepath.Join(testdata, name))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			checkConfig(t, ck.Config(), fixtureConfigs[src])
			checkTensors(t, ck)
		})
	}
}

// TestMLXMatchesHF compares every MLX tensor with its bf16 HF source: exact
// for unquantized tensors and conv1d, within bf16 rounding of 1+w for the
// zero-centred norms, within the quantization step for quantized weights.
func TestMLXMatchesHF(t *testing.T) {
	for name, src := range mlxFixtures {
		t.Run(name, func(t *testing.T) {
			mck, err := Open(filepath.Join(testdata, name))
			if err != nil {
				t.Fatal(err)
			}
			defer mck.Close()
			hck, err := Open(filepath.Join(testdata, src))
			if err != nil {
				t.Fatal(err)
			}
			defer hck.Close()
			zeroCentred := zeroCentredNorms(mck.Config().ModelType)
			var quantized, norms int
			for _, n := range hck.Names() {
				hh, _ := hck.Tensor(n)
				mh, err := mck.Tensor(n)
				if err != nil {
					t.Error(err)
					continue
				}
				hv, err := hh.Float32s()
				if err != nil {
					t.Fatal(err)
				}
				mv, err := mh.Float32s()
				if err != nil {
					t.Fatal(err)
				}
				if len(hv) != len(mv) {
					t.Fatalf("%s: %d values, HF has %d", n, len(mv), len(hv))
				}
				switch {
				case mh.Format == tensor.MLXAffine:
					quantized++
					// Each value is within ~1.5 quantization steps of the source
					// (mlx clips at the small end); step = |scale| of its group.
					cols, g := mh.Cols(), mh.GroupSize
					for i := range hv {
						s := math.Abs(float64(floatAt(mh.Scales, (i/cols)*(cols/g)+(i%cols)/g)))
						if d := math.Abs(float64(hv[i] - mv[i])); d > 1.6*s+1e-6 {
							t.Fatalf("%s[%d]: MLX %v, HF %v: differ by %v, more than 1.6 steps of %v", n, i, mv[i], hv[i], d, s)
						}
					}
					if e := relL2(mv, hv); e > 0.2 {
						t.Errorf("%s: relative L2 error %v against HF, want < 0.2", n, e)
					}
				case zeroCentred && isZeroCentredNorm(n):
					norms++
					if mh.Format != tensor.F32 {
						t.Errorf("%s: format %v, want F32", n, mh.Format)
					}
					for i := range hv {
						tol := math.Abs(float64(1+hv[i])) / 256 // half an ulp of bf16(1+w) is |1+w|*2^-9
						if d := math.Abs(float64(hv[i] - mv[i])); d > tol {
							t.Fatalf("%s[%d]: MLX %v, HF %v: differ by %v > %v", n, i, mv[i], hv[i], d, tol)
						}
					}
				default:
					for i := range hv {
						if hv[i] != mv[i] {
							t.Fatalf("%s[%d]: MLX %v, HF %v, want equal", n, i, mv[i], hv[i])
						}
					}
				}
			}
			if quantized == 0 {
				t.Errorf("no quantized tensors")
			}
			if zeroCentred && norms == 0 {
				t.Errorf("no zero-centred norms checked")
			}
		})
	}
}

func relL2(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}

func floatAt(s *tensor.Host, i int) float32 {
	v := make([]float32, s.Cols())
	if err := s.DecodeRow(i/s.Cols(), v); err != nil {
		panic(err)
	}
	return v[i%s.Cols()]
}

// TestMLXDequantDirect re-implements FORMAT.md's dequantization on the raw
// stored tensors (word by word, from the stacked switch_mlp for experts) and
// compares rows of the loader's tensors bit for bit.
func TestMLXDequantDirect(t *testing.T) {
	for _, tc := range []struct {
		dir, canonical, raw string
		bits, group         int
		expert              int // -1: not an expert
		rows                []int
	}{
		{"mlx/qwen3-4bit", "model.layers.1.mlp.down_proj.weight", "model.layers.1.mlp.down_proj", 4, 32, -1, []int{0, 77, 127}},
		{"mlx/qwen3-8bit", "model.layers.2.self_attn.q_proj.weight", "model.layers.2.self_attn.q_proj", 8, 64, -1, []int{0, 5, 127}},
		{"mlx/qwen3-8bit", "lm_head.weight", "lm_head", 8, 64, -1, []int{1023}},
		{"mlx/qwen3_moe-4bit", "model.layers.1.mlp.experts.5.down_proj.weight", "model.layers.1.mlp.switch_mlp.down_proj", 4, 32, 5, []int{0, 100}},
		{"mlx/qwen3_moe-4bit", "model.layers.0.mlp.gate.weight", "model.layers.0.mlp.gate", 8, 64, -1, []int{0, 7}},
		{"mlx/qwen3_5_moe-4bit", "model.layers.3.mlp.experts.7.gate_proj.weight", "language_model.model.layers.3.mlp.switch_mlp.gate_proj", 4, 32, 7, []int{63}},
	} {
		t.Run(tc.dir+"/"+tc.canonical, func(t *testing.T) {
			dir := filepath.Join(testdata, tc.dir)
			set, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()
			ck, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			h, err := ck.Tensor(tc.canonical)
			if err != nil {
				t.Fatal(err)
			}
			if h.Format != tensor.MLXAffine || h.Bits != tc.bits || h.GroupSize != tc.group {
				t.Fatalf("got %v bits %d group %d, want MLX affine %d/%d", h.Format, h.Bits, h.GroupSize, tc.bits, tc.group)
			}
			wInfo, wf, _ := set.Info(tc.raw + ".weight")
			words, _ := wf.Bytes(tc.raw + ".weight")
			scales, _ := set.Host(tc.raw + ".scales")
			biases, _ := set.Host(tc.raw + ".biases")
			nd := len(wInfo.Shape)
			rowsPerExpert, packed := wInfo.Shape[nd-2], wInfo.Shape[nd-1]
			cols := packed * 32 / tc.bits
			groups := cols / tc.group
			per := 32 / tc.bits
			got := make([]float32, h.Cols())
			for _, r := range tc.rows {
				if err := h.DecodeRow(r, got); err != nil {
					t.Fatal(err)
				}
				sr := r
				if tc.expert >= 0 {
					sr = tc.expert*rowsPerExpert + r
				}
				for j := 0; j < cols; j++ {
					word := binary.LittleEndian.Uint32(words[4*(sr*packed+j/per):])
					q := (word >> (uint(j%per) * uint(tc.bits))) & (1<<tc.bits - 1)
					s := bf16At(scales.Data, sr*groups+j/tc.group)
					b := bf16At(biases.Data, sr*groups+j/tc.group)
					prod := float32(s * float32(q)) // conversion: no fused multiply-add
					if want := prod + b; got[j] != want {
						t.Fatalf("row %d col %d: got %v, want %v", r, j, got[j], want)
					}
				}
			}
		})
	}
}

func bf16At(b []byte, i int) float32 {
	return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
}
