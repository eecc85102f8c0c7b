package gguf

// Writing GGUF files: enough to store a model the engine
// can load back (a synthetic model of a real shape for load-time and
// resident-memory measurements, `macpool bench --write-gguf`). Metadata
// values are scalars (uint32, int32, uint64, float32, bool, string) or
// arrays of int32 (rope.dimension_sections);
// tensors are written in the order given, each aligned to 32 bytes.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/macpool/macpool/engine/tensor"
)

// Meta is one metadata key and its scalar value.
type Meta struct {
	Key   string
	Value any // uint32, int32, uint64, float32, bool, string or []int32
}

// WriteTensor is one tensor to write: Name is the GGUF name, Host the data
// in a format GGUF stores (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K).
type WriteTensor struct {
	Name string
	Host *tensor.Host
}

// GGUFName returns the GGUF name of a canonical (Hugging Face) tensor name
// of a dense qwen2/qwen3 model; ok is false for names GGUF does not store
// under a direct equivalent (stacked experts).
func GGUFName(hf string) (string, bool) {
	for g, h := range globalNames {
		if h == hf {
			return g, true
		}
	}
	rest, ok := strings.CutPrefix(hf, "model.layers.")
	if !ok {
		return "", false
	}
	num, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	if _, err := strconv.Atoi(num); err != nil {
		return "", false
	}
	for g, h := range layerNames {
		if strings.HasPrefix(g, "ffn_") && strings.HasSuffix(g, "_exps") {
			continue
		}
		if rest == h+".weight" || rest == h+".bias" {
			return "blk." + num + "." + g + rest[len(h):], true
		}
	}
	return "", false
}

func ggmlType(f tensor.Format) (GGMLType, bool) {
	for t, ti := range typeInfos {
		if ti.format == f && f != 0 {
			return t, true
		}
	}
	return 0, false
}

// Write stores meta and tensors as a GGUF v3 file at path.
func Write(path string, meta []Meta, tensors []WriteTensor) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write gguf: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("write gguf %s: %w", path, cerr)
		}
	}()
	le := binary.LittleEndian
	w := bufio.NewWriterSize(f, 1<<20)
	var hdr []byte
	hdr = le.AppendUint32(hdr, magic)
	hdr = le.AppendUint32(hdr, 3)
	hdr = le.AppendUint64(hdr, uint64(len(tensors)))
	hdr = le.AppendUint64(hdr, uint64(len(meta)))
	for _, m := range meta {
		hdr = appendStr(hdr, m.Key)
		switch v := m.Value.(type) {
		case uint32:
			hdr = le.AppendUint32(le.AppendUint32(hdr, uint32(ValUint32)), v)
		case int32:
			hdr = le.AppendUint32(le.AppendUint32(hdr, uint32(ValInt32)), uint32(v))
		case uint64:
			hdr = le.AppendUint64(le.AppendUint32(hdr, uint32(ValUint64)), v)
		case float32:
			hdr = le.AppendUint32(le.AppendUint32(hdr, uint32(ValFloat32)), math.Float32bits(v))
		case bool:
			b := byte(0)
			if v {
				b = 1
			}
			hdr = append(le.AppendUint32(hdr, uint32(ValBool)), b)
		case string:
			hdr = appendStr(le.AppendUint32(hdr, uint32(ValString)), v)
		case []int32:
			hdr = le.AppendUint32(hdr, uint32(ValArray))
			hdr = le.AppendUint64(le.AppendUint32(hdr, uint32(ValInt32)), uint64(len(v)))
			for _, x := range v {
				hdr = le.AppendUint32(hdr, uint32(x))
			}
		default:
			return fmt.Errorf("write gguf %s: metadata %s: unsupported value type %T", path, m.Key, m.Value)
		}
	}
	var off uint64
	align := func(n uint64) uint64 { return (n + defaultAlignment - 1) / defaultAlignment * defaultAlignment }
	for _, t := range tensors {
		h := t.Host
		typ, ok := ggmlType(h.Format)
		if !ok {
			return fmt.Errorf("write gguf %s: tensor %s: format %v has no GGUF type", path, t.Name, h.Format)
		}
		if h.Scales != nil || h.Biases != nil {
			return fmt.Errorf("write gguf %s: tensor %s: separate scales/biases (MLX) are not stored in GGUF", path, t.Name)
		}
		hdr = appendStr(hdr, t.Name)
		hdr = le.AppendUint32(hdr, uint32(len(h.Shape)))
		for i := len(h.Shape) - 1; i >= 0; i-- { // ggml order: innermost first
			hdr = le.AppendUint64(hdr, uint64(h.Shape[i]))
		}
		hdr = le.AppendUint32(hdr, uint32(typ))
		hdr = le.AppendUint64(hdr, off)
		off = align(off + uint64(len(h.Data)))
	}
	pad := make([]byte, defaultAlignment)
	hdr = append(hdr, pad[:align(uint64(len(hdr)))-uint64(len(hdr))]...)
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("write gguf %s: %w", path, err)
	}
	for _, t := range tensors {
		n := uint64(len(t.Host.Data))
		if _, err := w.Write(t.Host.Data); err != nil {
			return fmt.Errorf("write gguf %s: %w", path, err)
		}
		if _, err := w.Write(pad[:align(n)-n]); err != nil {
			return fmt.Errorf("write gguf %s: %w", path, err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write gguf %s: %w", path, err)
	}
	return nil
}

func appendStr(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// DenseMeta is the metadata of a dense qwen2/qwen3 model as llama.cpp's
// converter writes it (architecture keys; no tokenizer, see below).
func DenseMeta(c *Config) ([]Meta, error) {
	var arch string
	for a, mt := range architectures {
		if mt == c.ModelType && c.NumExperts == 0 {
			arch = a
		}
	}
	if arch == "" {
		return nil, fmt.Errorf("gguf metadata: model type %q with %d experts: %w", c.ModelType, c.NumExperts, ErrUnsupportedArchitecture)
	}
	u := func(v int) uint32 { return uint32(v) }
	meta := []Meta{
		{"general.architecture", arch},
		{"general.alignment", uint32(defaultAlignment)},
		{arch + ".block_count", u(c.NumHiddenLayers)},
		{arch + ".context_length", u(c.MaxPositionEmbeddings)},
		{arch + ".embedding_length", u(c.HiddenSize)},
		{arch + ".feed_forward_length", u(c.IntermediateSize)},
		{arch + ".attention.head_count", u(c.NumAttentionHeads)},
		{arch + ".attention.head_count_kv", u(c.NumKeyValueHeads)},
		{arch + ".attention.key_length", u(c.HeadDim)},
		{arch + ".attention.value_length", u(c.HeadDim)},
		{arch + ".attention.layer_norm_rms_epsilon", float32(c.RMSNormEps)},
		{arch + ".rope.freq_base", float32(c.RopeTheta)},
	}
	meta = append(meta, RopeMeta(arch, c.RopeScaling)...)
	// No vocabulary is stored: tokenizer model "none" with the vocabulary
	// size is what llama.cpp's loader accepts for such a file (without the
	// tokenizer keys it refuses it; it sizes the vocabulary from
	// <arch>.vocab_size then).
	meta = append(meta, Meta{"tokenizer.ggml.model", "none"}, Meta{arch + ".vocab_size", u(c.VocabSize)})
	if c.BOSTokenID >= 0 {
		meta = append(meta, Meta{"tokenizer.ggml.bos_token_id", u(c.BOSTokenID)})
	}
	if len(c.EOSTokenIDs) > 0 {
		meta = append(meta, Meta{"tokenizer.ggml.eos_token_id", u(c.EOSTokenIDs[0])})
	}
	return meta, nil
}

// ModelMeta is DenseMeta extended to Qwen3-MoE (qwen3moe): the expert
// counts and sizes llama.cpp's converter writes (expert_count,
// expert_used_count, expert_feed_forward_length; top-k weights
// renormalised, as llama.cpp's qwen3moe graph does unless told otherwise).
// Hybrid model types (qwen3_next, qwen3_5_text, qwen3_5_moe_text) get
// HybridMeta.
func ModelMeta(c *Config) ([]Meta, error) {
	if hybridArch(c.ModelType) != "" {
		return HybridMeta(c)
	}
	if c.NumExperts == 0 {
		return DenseMeta(c)
	}
	if c.ModelType != "qwen3_moe" {
		return nil, fmt.Errorf("gguf metadata: model type %q with %d experts: %w", c.ModelType, c.NumExperts, ErrUnsupportedArchitecture)
	}
	switch {
	case c.NumExpertsPerTok < 1 || c.NumExpertsPerTok > c.NumExperts:
		return nil, fmt.Errorf("gguf metadata: %d experts per token must be in [1, %d]", c.NumExpertsPerTok, c.NumExperts)
	case c.MoEIntermediateSize < 1:
		return nil, fmt.Errorf("gguf metadata: expert intermediate size %d must be positive", c.MoEIntermediateSize)
	case !c.NormTopKProb:
		return nil, fmt.Errorf("gguf metadata: qwen3moe without renormalised top-k weights is not written")
	}
	d := *c
	d.ModelType, d.NumExperts = "qwen3", 0
	meta, err := DenseMeta(&d)
	if err != nil {
		return nil, err
	}
	const arch = "qwen3moe"
	for i := range meta {
		if k, ok := strings.CutPrefix(meta[i].Key, "qwen3."); ok {
			meta[i].Key = arch + "." + k
		}
		if meta[i].Key == "general.architecture" {
			meta[i].Value = arch
		}
	}
	return append(meta,
		Meta{arch + ".expert_count", uint32(c.NumExperts)},
		Meta{arch + ".expert_used_count", uint32(c.NumExpertsPerTok)},
		Meta{arch + ".expert_feed_forward_length", uint32(c.MoEIntermediateSize)},
	), nil
}

// ExpertGGUFName splits the canonical name of one expert's matrix
// (model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight) into the GGUF
// name of the stacked tensor that holds it (blk.N.ffn_{gate,up,down}_exps.weight)
// and the expert index.
func ExpertGGUFName(hf string) (name string, expert int, ok bool) {
	rest, ok := strings.CutPrefix(hf, "model.layers.")
	if !ok {
		return "", 0, false
	}
	num, rest, _ := strings.Cut(rest, ".")
	rest, ok = strings.CutPrefix(rest, "mlp.experts.")
	if _, err := strconv.Atoi(num); err != nil || !ok {
		return "", 0, false
	}
	e, part, _ := strings.Cut(rest, ".")
	expert, err := strconv.Atoi(e)
	if err != nil || expert < 0 {
		return "", 0, false
	}
	for _, g := range []string{"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"} {
		if part == layerNames[g]+".weight" {
			return "blk." + num + "." + g + ".weight", expert, true
		}
	}
	return "", 0, false
}

// StackExperts stacks the experts' matrices (expert e at experts[e], all of
// one format and shape [rows, cols]) into one [E, rows, cols] tensor, the
// layout of GGUF's ffn_*_exps (expert-major, each expert's rows as stored).
func StackExperts(name string, experts []*tensor.Host) (*tensor.Host, error) {
	if len(experts) == 0 {
		return nil, fmt.Errorf("stack experts %s: no experts", name)
	}
	first := experts[0]
	if first == nil || len(first.Shape) != 2 {
		return nil, fmt.Errorf("stack experts %s: expert 0 is not a matrix", name)
	}
	data := make([]byte, 0, len(first.Data)*len(experts))
	for e, h := range experts {
		if h == nil || h.Format != first.Format || len(h.Shape) != 2 || h.Shape[0] != first.Shape[0] || h.Shape[1] != first.Shape[1] || len(h.Data) != len(first.Data) {
			return nil, fmt.Errorf("stack experts %s: expert %d differs from expert 0 (%v %v) or is missing", name, e, first.Format, first.Shape)
		}
		if h.Scales != nil || h.Biases != nil {
			return nil, fmt.Errorf("stack experts %s: expert %d has separate scales (MLX): not stored in GGUF", name, e)
		}
		data = append(data, h.Data...)
	}
	return &tensor.Host{Name: name, Format: first.Format, Shape: []int{len(experts), first.Shape[0], first.Shape[1]}, Data: data}, nil
}
