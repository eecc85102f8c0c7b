package checkpoint

import (
	"encoding/json"
	"fmt"

	"github.com/macpool/macpool/engine/safetensors"
	"github.com/macpool/macpool/engine/tensor"
)

// quantSpec is one entry of MLX's config.json "quantization" object.
type quantSpec struct {
	bits, groupSize int
	mode            string
	off             bool // false entry: module left unquantized (mlx-lm AWQ)
}

// mlxQuant is the "quantization" (or "quantization_config") object of an
// MLX config: defaults plus per-module overrides keyed by MLX module path.
type mlxQuant struct {
	at      string // where it was found, for errors
	def     quantSpec
	modules map[string]quantSpec
}

// parseQuantization finds MLX quantization settings: "quantization" or
// "quantization_config", at the top level or under text_config. It returns
// nil when there are none. A quantization_config of another tool (with
// "quant_method", e.g. fp8 or gptq) is an error: its tensors are not readable.
func parseQuantization(file string, raw []byte) (*mlxQuant, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %v", file, err)
	}
	var text map[string]json.RawMessage
	if tc, ok := top["text_config"]; ok {
		_ = json.Unmarshal(tc, &text) // not an object: no text settings
	}
	for _, c := range []struct {
		obj map[string]json.RawMessage
		at  string
	}{{top, ""}, {text, "text_config."}} {
		for _, key := range []string{"quantization", "quantization_config"} {
			msg, ok := c.obj[key]
			if !ok || string(msg) == "null" {
				continue
			}
			return parseQuantObject(file, c.at+key, msg)
		}
	}
	return nil, nil
}

func parseQuantObject(file, at string, msg json.RawMessage) (*mlxQuant, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(msg, &obj); err != nil {
		return nil, fmt.Errorf("%s: field %s: want an object: %v", file, at, err)
	}
	if qm, ok := obj["quant_method"]; ok {
		return nil, fmt.Errorf("%s: field %s.quant_method: %s quantization is not supported (only MLX affine)", file, at, qm)
	}
	q := &mlxQuant{at: at, modules: map[string]quantSpec{}}
	def, err := parseQuantSpec(file, at, obj)
	if err != nil {
		return nil, err
	}
	if def.bits == 0 || def.groupSize == 0 {
		return nil, fmt.Errorf("%s: field %s: bits and group_size are required", file, at)
	}
	q.def = def
	for k, v := range obj {
		switch k {
		case "bits", "group_size", "mode":
			continue
		}
		if string(v) == "false" {
			q.modules[k] = quantSpec{off: true}
			continue
		}
		var sub map[string]json.RawMessage
		if err := json.Unmarshal(v, &sub); err != nil {
			return nil, fmt.Errorf("%s: field %s.%s: want an object or false", file, at, k)
		}
		s, err := parseQuantSpec(file, at+"."+k, sub)
		if err != nil {
			return nil, err
		}
		if s.bits == 0 {
			s.bits = def.bits
		}
		if s.groupSize == 0 {
			s.groupSize = def.groupSize
		}
		if _, hasMode := sub["mode"]; !hasMode {
			s.mode = def.mode
		}
		q.modules[k] = s
	}
	return q, nil
}

func parseQuantSpec(file, at string, obj map[string]json.RawMessage) (quantSpec, error) {
	s := quantSpec{mode: "affine"}
	if v, ok := obj["bits"]; ok {
		if err := json.Unmarshal(v, &s.bits); err != nil {
			return s, fmt.Errorf("%s: field %s.bits: want an integer, got %s", file, at, v)
		}
		switch s.bits {
		case 2, 3, 4, 5, 6, 8:
		default:
			return s, fmt.Errorf("%s: field %s.bits: %d is not one of 2, 3, 4, 5, 6, 8", file, at, s.bits)
		}
	}
	if v, ok := obj["group_size"]; ok {
		if err := json.Unmarshal(v, &s.groupSize); err != nil || s.groupSize <= 0 {
			return s, fmt.Errorf("%s: field %s.group_size: want a positive integer, got %s", file, at, v)
		}
	}
	if v, ok := obj["mode"]; ok {
		if err := json.Unmarshal(v, &s.mode); err != nil {
			return s, fmt.Errorf("%s: field %s.mode: want a string, got %s", file, at, v)
		}
		if s.mode != "affine" {
			return s, fmt.Errorf("%s: field %s.mode: quantization mode %q is not supported (only affine)", file, at, s.mode)
		}
	}
	return s, nil
}

// quantizedHost assembles base.weight (U32 packed) + base.scales +
// base.biases into one MLXAffine tensor with the logical shape.
func quantizedHost(set *safetensors.Set, q *mlxQuant, base string) (*tensor.Host, error) {
	wName, sName, bName := base+".weight", base+".scales", base+".biases"
	if q == nil {
		return nil, fmt.Errorf("tensor %s has quantization scales but config.json has no quantization settings", sName)
	}
	spec := q.def
	if m, ok := q.modules[base]; ok {
		if m.off {
			return nil, fmt.Errorf("tensor %s has quantization scales but config.json %s.%s says the module is not quantized", sName, q.at, base)
		}
		spec = m
	}
	for _, n := range []string{wName, bName} {
		if !set.Has(n) {
			return nil, fmt.Errorf("quantized module %s: tensor %s is missing", base, n)
		}
	}
	w, err := set.Host(wName)
	if err != nil {
		return nil, err
	}
	scales, err := set.Host(sName)
	if err != nil {
		return nil, err
	}
	biases, err := set.Host(bName)
	if err != nil {
		return nil, err
	}
	if w.Format != tensor.U32 {
		return nil, fmt.Errorf("quantized tensor %s (in %s): dtype %v, want U32", wName, w.Source, w.Format)
	}
	for _, s := range []*tensor.Host{scales, biases} {
		switch s.Format {
		case tensor.BF16, tensor.F16, tensor.F32:
		default:
			return nil, fmt.Errorf("tensor %s (in %s): dtype %v, want BF16, F16 or F32", s.Name, s.Source, s.Format)
		}
	}
	nd := len(w.Shape)
	if nd < 2 || len(scales.Shape) != nd || !equalShape(scales.Shape, biases.Shape) || !equalShape(w.Shape[:nd-1], scales.Shape[:nd-1]) {
		return nil, fmt.Errorf("quantized module %s (in %s): shapes weight %v, scales %v, biases %v do not match", base, w.Source, w.Shape, scales.Shape, biases.Shape)
	}
	packed := w.Shape[nd-1]
	if packed <= 0 || packed*32%spec.bits != 0 {
		return nil, fmt.Errorf("quantized module %s (in %s): %d packed words is not a whole number of %d-bit values", base, w.Source, packed, spec.bits)
	}
	in := packed * 32 / spec.bits
	if in%spec.groupSize != 0 || scales.Shape[nd-1] != in/spec.groupSize {
		return nil, fmt.Errorf("quantized module %s (in %s): weight %v at %d bits is %d columns, but scales %v do not hold one value per group of %d (check config.json %s)",
			base, w.Source, w.Shape, spec.bits, in, scales.Shape, spec.groupSize, q.at)
	}
	shape := append(append([]int(nil), w.Shape[:nd-1]...), in)
	return &tensor.Host{
		Name: wName, Format: tensor.MLXAffine, Shape: shape, Data: w.Data,
		Bits: spec.bits, GroupSize: spec.groupSize, Scales: scales, Biases: biases, Source: w.Source,
	}, nil
}
