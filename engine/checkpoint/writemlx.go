package checkpoint

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/macpool/macpool/engine/safetensors"
	"github.com/macpool/macpool/engine/tensor"
)

// MLXSource is what WriteMLX reads: every tensor by canonical name (an
// engine.Source such as engine/synth's Model).
type MLXSource interface {
	Names() []string
	Tensor(name string) (*tensor.Host, error)
}

// WriteMLX writes src as an MLX checkpoint folder, the layout mlx-lm's
// convert writes for a quantized dense model, so that tests and benchmarks
// can load a checkpoint of a real size from disk (engine/synth builds them
// in memory): config.json is configJSON with a "quantization" object added
// (bits and group_size of the quantized matrices, which must all agree), and
// model.safetensors holds each MLXAffine tensor as NAME.weight (U32 codes,
// [rows, cols·bits/32]), NAME.scales and NAME.biases, every other tensor as
// stored (F32, F16, BF16). Names are written as given (HF names with the
// model. prefix, as mlx-lm keeps them for Qwen2/Qwen3). Models whose MLX
// layout differs from HF's (zero-centred norms, conv1d, stacked experts of
// the hybrid and MoE models) are refused.
func WriteMLX(dir string, configJSON []byte, src MLXSource) error {
	var cfg map[string]any
	if err := json.Unmarshal(configJSON, &cfg); err != nil {
		return fmt.Errorf("write mlx %s: config: %w", dir, err)
	}
	mt, _ := cfg["model_type"].(string)
	switch mt {
	case "qwen2", "qwen3":
	default:
		return fmt.Errorf("write mlx %s: model_type %q: only dense qwen2/qwen3 are written (the others' MLX layout differs from HF's)", dir, mt)
	}
	var ts []safetensors.WriteTensor
	bits, group := 0, 0
	for _, name := range src.Names() {
		h, err := src.Tensor(name)
		if err != nil {
			return fmt.Errorf("write mlx %s: %w", dir, err)
		}
		if h.Format != tensor.MLXAffine {
			dt, ok := map[tensor.Format]string{tensor.F32: "F32", tensor.F16: "F16", tensor.BF16: "BF16"}[h.Format]
			if !ok {
				return fmt.Errorf("write mlx %s: tensor %s: format %v has no MLX dtype", dir, name, h.Format)
			}
			ts = append(ts, safetensors.WriteTensor{Name: name, DType: dt, Shape: h.Shape, Data: h.Data})
			continue
		}
		if bits == 0 {
			bits, group = h.Bits, h.GroupSize
		}
		if h.Bits != bits || h.GroupSize != group {
			return fmt.Errorf("write mlx %s: tensor %s: %d bits in groups of %d, the first quantized tensor has %d in groups of %d", dir, name, h.Bits, h.GroupSize, bits, group)
		}
		if len(h.Shape) != 2 || h.Shape[1]*bits%32 != 0 || h.Scales == nil || h.Biases == nil {
			return fmt.Errorf("write mlx %s: tensor %s: shape %v at %d bits is not whole 32-bit words with scales and biases", dir, name, h.Shape, bits)
		}
		base := name[:len(name)-len(".weight")]
		if base+".weight" != name {
			return fmt.Errorf("write mlx %s: quantized tensor %s: name must end in .weight", dir, name)
		}
		ts = append(ts, safetensors.WriteTensor{Name: name, DType: "U32", Shape: []int{h.Shape[0], h.Shape[1] * bits / 32}, Data: h.Data})
		for _, p := range []struct {
			suffix string
			h      *tensor.Host
		}{{".scales", h.Scales}, {".biases", h.Biases}} {
			dt, ok := map[tensor.Format]string{tensor.F32: "F32", tensor.F16: "F16", tensor.BF16: "BF16"}[p.h.Format]
			if !ok {
				return fmt.Errorf("write mlx %s: tensor %s%s: format %v has no MLX dtype", dir, base, p.suffix, p.h.Format)
			}
			ts = append(ts, safetensors.WriteTensor{Name: base + p.suffix, DType: dt, Shape: p.h.Shape, Data: p.h.Data})
		}
	}
	if bits > 0 {
		cfg["quantization"] = map[string]any{"bits": bits, "group_size": group, "mode": "affine"}
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("write mlx %s: config: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write mlx %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
		return fmt.Errorf("write mlx %s: %w", dir, err)
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "mlx"}); err != nil {
		return fmt.Errorf("write mlx %s: %w", dir, err)
	}
	return nil
}
