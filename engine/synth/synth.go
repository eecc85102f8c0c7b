// Package synth builds random-weight models of real Qwen shapes in memory,
// so that `macpool bench --synthetic` shows what a machine would do with a
// model before anyone downloads it. A Model is an engine.Source: its
// tensors are generated on demand, by name, in the requested storage format
// (quantized blocks are made row by row: no float32 copy of a matrix), with
// values ~N(0, 1/fan_in) (Irwin–Hall approximation), seeded by (seed, name)
// so that every run builds the same model. Norm weights are ones (zero for
// the zero-centred norms of the hybrid models), A_log and dt_bias zero.
package synth

import (
	"embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/cpu/kernels"
	"github.com/macpool/macpool/engine/tensor"
)

//go:embed configs/*.json
var configs embed.FS

// Shapes lists the model shapes Config knows ("qwen3-0.6b", ...).
func Shapes() []string {
	ents, _ := configs.ReadDir("configs")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(out)
	return out
}

// Config is the config.json of a known shape (the published model's, or
// "tiny" for tests).
func Config(shape string) (*checkpoint.Config, error) {
	data, err := configs.ReadFile("configs/" + shape + ".json")
	if err != nil {
		return nil, fmt.Errorf("synthetic shape %q unknown (known: %s)", shape, strings.Join(Shapes(), ", "))
	}
	return checkpoint.ParseConfig(shape+".json", data, nil)
}

// ConfigJSON is the config.json of a known shape as published, with
// num_hidden_layers (and layer_types) cut to layers when 0 < layers <
// the shape's: what a checkpoint written from New(c, q, seed, layers)
// must carry.
func ConfigJSON(shape string, layers int) ([]byte, error) {
	data, err := configs.ReadFile("configs/" + shape + ".json")
	if err != nil {
		return nil, fmt.Errorf("synthetic shape %q unknown (known: %s)", shape, strings.Join(Shapes(), ", "))
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("synthetic shape %q: %w", shape, err)
	}
	if n, ok := m["num_hidden_layers"].(float64); ok && layers > 0 && layers < int(n) {
		m["num_hidden_layers"] = layers
		if lt, ok := m["layer_types"].([]any); ok && len(lt) > layers {
			m["layer_types"] = lt[:layers]
		}
	}
	return json.MarshalIndent(m, "", "  ")
}

// Quant is the storage format of the generated matrices.
type Quant string

// Quants that New accepts.
const (
	BF16 Quant = "bf16"
	F32  Quant = "f32"
	Q8_0 Quant = "q8_0"
	Q4_0 Quant = "q4_0"
	MLX4 Quant = "mlx4" // MLX affine, 4 bits, group 64, bf16 scales/biases
	MLX8 Quant = "mlx8"
)

// ParseQuant accepts the names above (and q8, q4).
func ParseQuant(s string) (Quant, error) {
	switch q := Quant(strings.ToLower(s)); q {
	case BF16, F32, Q8_0, Q4_0, MLX4, MLX8:
		return q, nil
	case "q8":
		return Q8_0, nil
	case "q4":
		return Q4_0, nil
	}
	return "", fmt.Errorf("quant %q: want bf16, f32, q8_0, q4_0, mlx4 or mlx8", s)
}

// Model is a synthetic checkpoint (engine.Source).
type Model struct {
	cfg   *checkpoint.Config
	quant Quant
	seed  uint64
	names map[string][]int // every tensor's shape
}

// New describes a random model of cfg in quant. Layers > 0 keeps only the
// first Layers layers (to fit big shapes in memory; throughput then covers
// that many layers).
func New(cfg *checkpoint.Config, quant Quant, seed uint64, layers int) (*Model, error) {
	c := *cfg
	if layers > 0 && layers < c.NumHiddenLayers {
		c.NumHiddenLayers = layers
		if len(c.LayerTypes) > layers {
			c.LayerTypes = c.LayerTypes[:layers]
		}
	}
	if _, err := ParseQuant(string(quant)); err != nil {
		return nil, err
	}
	m := &Model{cfg: &c, quant: quant, seed: seed, names: map[string][]int{}}
	if err := m.describe(); err != nil {
		return nil, err
	}
	return m, nil
}

// Config is the (possibly truncated) model configuration.
func (m *Model) Config() *checkpoint.Config { return m.cfg }

// Has reports whether the model has the tensor.
func (m *Model) Has(name string) bool { _, ok := m.names[name]; return ok }

// Names lists every tensor name, sorted.
func (m *Model) Names() []string {
	out := make([]string, 0, len(m.names))
	for n := range m.names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Shape is the shape of a tensor (nil if absent).
func (m *Model) Shape(name string) []int { return m.names[name] }

// Bytes is the stored size of a tensor in the model's format.
func (m *Model) Bytes(name string) int {
	s := m.names[name]
	n := 1
	for _, d := range s {
		n *= d
	}
	if len(s) != 2 || s[1]%64 != 0 {
		return 4 * n // vectors and odd shapes stay F32
	}
	switch m.quant {
	case F32:
		return 4 * n
	case Q8_0:
		return n / 32 * 34
	case Q4_0:
		return n / 32 * 18
	case MLX4:
		return n/2 + n/64*4
	case MLX8:
		return n + n/64*4
	}
	return 2 * n
}

// describe lists the tensors of the architecture with their shapes
// (the names engine/qwen binds).
func (m *Model) describe() error {
	c := m.cfg
	H, V := c.HiddenSize, c.VocabSize
	hd := c.HeadDim
	if hd == 0 && c.NumAttentionHeads > 0 {
		hd = H / c.NumAttentionHeads
	}
	kvh := c.NumKeyValueHeads
	if kvh == 0 {
		kvh = c.NumAttentionHeads
	}
	if H <= 0 || V <= 0 || hd <= 0 || c.NumHiddenLayers <= 0 {
		return fmt.Errorf("synthetic %s: incomplete config", c.ModelType)
	}
	add := func(name string, shape ...int) { m.names[name] = shape }
	hybrid := c.ModelType == "qwen3_next" || strings.HasPrefix(c.ModelType, "qwen3_5")
	add("model.embed_tokens.weight", V, H)
	for i := range c.NumHiddenLayers {
		p := "model.layers." + strconv.Itoa(i) + "."
		add(p+"input_layernorm.weight", H)
		add(p+"post_attention_layernorm.weight", H)
		if i < len(c.LayerTypes) && c.LayerTypes[i] == checkpoint.LinearAttention {
			kd, vd := c.LinearNumKeyHeads*c.LinearKeyHeadDim, c.LinearNumValueHeads*c.LinearValueHeadDim
			nv, conv := c.LinearNumValueHeads, 2*kd+vd
			l := p + "linear_attn."
			if c.ModelType == "qwen3_next" {
				// Qwen3-Next checkpoints fuse the projections per key-head group:
				// in_proj_qkvz [q_g | k_g | v_g | z_g] and in_proj_ba [b_g | a_g]
				// (llama.cpp's qwen3next files keep ssm_ba fused too).
				add(l+"in_proj_qkvz.weight", conv+vd, H)
				add(l+"in_proj_ba.weight", 2*nv, H)
			} else {
				add(l+"in_proj_qkv.weight", conv, H)
				add(l+"in_proj_z.weight", vd, H)
				add(l+"in_proj_b.weight", nv, H)
				add(l+"in_proj_a.weight", nv, H)
			}
			add(l+"conv1d.weight", conv, 1, c.LinearConvKernelDim)
			add(l+"A_log", nv)
			add(l+"dt_bias", nv)
			add(l+"norm.weight", c.LinearValueHeadDim)
			add(l+"out_proj.weight", H, vd)
		} else {
			q := c.NumAttentionHeads * hd
			if hybrid {
				q *= 2 // query + output gate
			}
			add(p+"self_attn.q_proj.weight", q, H)
			add(p+"self_attn.k_proj.weight", kvh*hd, H)
			add(p+"self_attn.v_proj.weight", kvh*hd, H)
			add(p+"self_attn.o_proj.weight", H, c.NumAttentionHeads*hd)
			if c.ModelType == "qwen2" || c.AttentionBias {
				add(p+"self_attn.q_proj.bias", c.NumAttentionHeads*hd)
				add(p+"self_attn.k_proj.bias", kvh*hd)
				add(p+"self_attn.v_proj.bias", kvh*hd)
			}
			if c.ModelType != "qwen2" {
				add(p+"self_attn.q_norm.weight", hd)
				add(p+"self_attn.k_norm.weight", hd)
			}
		}
		sparse := c.ModelType == "qwen3_5_moe_text" || (c.ModelType != "qwen3_5_text" && c.NumExperts > 0 && c.IsMoELayer(i))
		mlp := func(pre string, inter int) {
			add(pre+"gate_proj.weight", inter, H)
			add(pre+"up_proj.weight", inter, H)
			add(pre+"down_proj.weight", H, inter)
		}
		if sparse {
			add(p+"mlp.gate.weight", c.NumExperts, H)
			for e := range c.NumExperts {
				mlp(p+"mlp.experts."+strconv.Itoa(e)+".", c.MoEIntermediateSize)
			}
			if c.SharedExpertIntermediateSize > 0 {
				mlp(p+"mlp.shared_expert.", c.SharedExpertIntermediateSize)
				add(p+"mlp.shared_expert_gate.weight", 1, H)
			}
		} else {
			mlp(p+"mlp.", c.IntermediateSize)
		}
	}
	add("model.norm.weight", H)
	if !c.TieWordEmbeddings {
		add("lm_head.weight", V, H)
	}
	return nil
}

// Tensor generates a tensor (a new allocation on every call: the caller
// owns it, and the model keeps nothing).
func (m *Model) Tensor(name string) (*tensor.Host, error) {
	shape, ok := m.names[name]
	if !ok {
		return nil, fmt.Errorf("synthetic model: tensor %s not found", name)
	}
	h := &tensor.Host{Name: name, Shape: shape, Source: "synthetic"}
	seed := m.seed ^ hash(name)
	n := h.Numel()
	if len(shape) != 2 || shape[1]%64 != 0 {
		// Vectors: norms (ones; zero-centred norms of hybrid models: zero),
		// A_log, dt_bias (zero), conv1d (random).
		v := make([]float32, n)
		switch {
		case strings.HasSuffix(name, "conv1d.weight"):
			fillRow(v, seed, 0, 1/math.Sqrt(float64(shape[len(shape)-1])))
		case strings.HasSuffix(name, "A_log"), strings.HasSuffix(name, "dt_bias"), strings.HasSuffix(name, "_proj.bias"):
		case strings.Contains(name, "norm") && m.zeroCentredNorms() && !strings.HasSuffix(name, "linear_attn.norm.weight"):
		default:
			for i := range v {
				v[i] = 1
			}
		}
		h.Format, h.Data = tensor.F32, make([]byte, 4*n)
		for i, x := range v {
			binary.LittleEndian.PutUint32(h.Data[4*i:], math.Float32bits(x))
		}
		return h, nil
	}
	rows, cols := shape[0], shape[1]
	std := 1 / math.Sqrt(float64(cols))
	var rowBytes int
	var enc func(x []float32, dst []byte)
	switch m.quant {
	case F32:
		h.Format, rowBytes = tensor.F32, 4*cols
		enc = func(x []float32, dst []byte) {
			for i, v := range x {
				binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
			}
		}
	case BF16:
		h.Format, rowBytes = tensor.BF16, 2*cols
		enc = func(x []float32, dst []byte) {
			for i, v := range x {
				binary.LittleEndian.PutUint16(dst[2*i:], tensor.F32ToBF16(v))
			}
		}
	case Q8_0:
		h.Format, rowBytes, enc = tensor.Q8_0, cols/32*34, kernels.QuantizeQ8_0
	case Q4_0:
		h.Format, rowBytes, enc = tensor.Q4_0, cols/32*18, kernels.QuantizeQ4_0
	case MLX4, MLX8:
		return m.mlx(h, seed, std), nil
	}
	h.Data = make([]byte, rows*rowBytes)
	parallelRows(rows, func(r0, r1 int) {
		x := make([]float32, cols)
		for r := r0; r < r1; r++ {
			fillRow(x, seed, r, std)
			enc(x, h.Data[r*rowBytes:(r+1)*rowBytes])
		}
	})
	return h, nil
}

func (m *Model) zeroCentredNorms() bool {
	c := m.cfg.ModelType
	return c == "qwen3_next" || strings.HasPrefix(c, "qwen3_5")
}

// mlx makes an MLX affine tensor: random codes, with scale and bias per
// group of 64 chosen so that values have standard deviation std.
func (m *Model) mlx(h *tensor.Host, seed uint64, std float64) *tensor.Host {
	bits := 4
	if m.quant == MLX8 {
		bits = 8
	}
	rows, cols := h.Shape[0], h.Shape[1]
	const group = 64
	levels := float64(int(1)<<bits - 1)
	scale := float32(std * math.Sqrt(12) / (levels + 1))
	bias := -scale * float32(levels) / 2
	groups := rows * cols / group
	h.Format, h.Bits, h.GroupSize = tensor.MLXAffine, bits, group
	h.Data = make([]byte, rows*cols*bits/8)
	fill := func(x uint64, i int) uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		h.Data[i] = byte(x >> 32)
		return x
	}
	parallelRows(rows, func(r0, r1 int) {
		rb := cols * bits / 8
		for r := r0; r < r1; r++ {
			x := splitmix(seed + uint64(r))
			for i := r * rb; i < (r+1)*rb; i++ {
				x = fill(x, i)
			}
		}
	})
	sb, bb := make([]byte, 2*groups), make([]byte, 2*groups)
	for g := range groups {
		binary.LittleEndian.PutUint16(sb[2*g:], tensor.F32ToBF16(scale))
		binary.LittleEndian.PutUint16(bb[2*g:], tensor.F32ToBF16(bias))
	}
	gs := []int{rows, cols / group}
	h.Scales = &tensor.Host{Name: h.Name + ".scales", Format: tensor.BF16, Shape: gs, Data: sb}
	h.Biases = &tensor.Host{Name: h.Name + ".biases", Format: tensor.BF16, Shape: gs, Data: bb}
	return h
}

// fillRow sets x to ~N(0, std²) values: the sum of four 16-bit uniforms
// (Irwin–Hall, variance 1/3) from a xorshift stream seeded by (seed, row).
func fillRow(x []float32, seed uint64, row int, std float64) {
	s := splitmix(seed + uint64(row)*0x9E3779B97F4A7C15)
	k := float32(std * math.Sqrt(3) / 65536)
	for i := range x {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		u := int32(s&0xffff) + int32(s>>16&0xffff) + int32(s>>32&0xffff) + int32(s>>48) - 2*65535
		x[i] = float32(u) * k
	}
}

func splitmix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return (x ^ x>>31) | 1
}

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// parallelRows splits [0, rows) over GOMAXPROCS goroutines and waits.
func parallelRows(rows int, fn func(r0, r1 int)) {
	w := min(runtime.GOMAXPROCS(0), max(1, rows/64))
	var wg sync.WaitGroup
	for i := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i*rows/w, (i+1)*rows/w)
		}()
	}
	wg.Wait()
}
