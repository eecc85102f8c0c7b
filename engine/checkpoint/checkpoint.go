// Package checkpoint opens a Qwen model folder (or GGUF file) and serves its
// architecture as a Config and its weights as tensor.Host values under the
// canonical Hugging Face names of the text-only checkpoints.
//
// Sources: Hugging Face safetensors (single file or sharded), MLX
// affine-quantized safetensors as written by mlx_lm.convert / mlx-vlm, and
// GGUF (see gguf.go). Whatever the source, callers see one naming and layout:
//   - `model.` prefix as in text-only checkpoints; the image-text prefixes
//     (`model.language_model.`, MLX's `language_model.model.`) are stripped and
//     vision / multi-token-prediction weights are ignored;
//   - MoE experts one per name (`model.layers.N.mlp.experts.E.gate_proj.weight`),
//     sliced without copying out of stacked sources (MLX switch_mlp, the fused
//     Qwen3.5 gate_up_proj);
//   - norms in the Hugging Face convention of the model type (MLX's stored
//     1+w comes back as w, in F32);
//   - conv1d weights as [C, 1, K];
//   - MLX quantized weights as one tensor.Host of format MLXAffine with the
//     logical [.., out, in] shape, scales and biases attached.
//
// Tensor data aliases read-only memory maps: never write to Host.Data, and do
// not use tensors after Close.
package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/macpool/macpool/engine/safetensors"
	"github.com/macpool/macpool/engine/tensor"
)

// Checkpoint is an open model: its config and its weights by canonical name.
type Checkpoint struct {
	dir     string
	cfg     *Config
	tensors map[string]*tensor.Host
	names   []string
	stage   Stage // zero: the whole model (see Stage)

	closer    io.Closer
	closeOnce sync.Once
	closeErr  error
}

// IsGGUF reports whether path names a GGUF file rather than a model folder:
// its name ends in .gguf (any case) and it is not a folder. A path that does
// not exist counts by its name, so that opening it reports the missing file.
// Every layer that tells the two apart asks this function.
func IsGGUF(path string) bool {
	if !strings.EqualFold(filepath.Ext(strings.TrimRight(path, "/")), ".gguf") {
		return false
	}
	st, err := os.Stat(path)
	return err != nil || !st.IsDir()
}

// Open opens a model folder with config.json and safetensors weights, or a
// .gguf file (IsGGUF).
func Open(dir string) (*Checkpoint, error) {
	if IsGGUF(dir) {
		return openGGUF(dir)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("checkpoint %s: not a folder (want a model folder or a .gguf file)", dir)
	}
	cfgPath := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	var gen []byte
	if b, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil {
		gen = b
	}
	cfg, err := ParseConfig(cfgPath, raw, gen)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	quant, err := parseQuantization(cfgPath, raw)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	tensors, err := mapTensors(cfg, quant, set)
	if err != nil {
		set.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return New(dir, cfg, tensors, set)
}

// New builds a Checkpoint from tensors already under canonical names (for
// loaders such as GGUF). closer (may be nil) is closed by Close and should
// release whatever the tensors' bytes alias.
func New(dir string, cfg *Config, tensors map[string]*tensor.Host, closer io.Closer) (*Checkpoint, error) {
	if cfg == nil {
		return nil, fmt.Errorf("checkpoint %s: no config", dir)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	ck := &Checkpoint{dir: dir, cfg: cfg, tensors: tensors, closer: closer}
	for n := range tensors {
		ck.names = append(ck.names, n)
	}
	sort.Strings(ck.names)
	return ck, nil
}

// Config is the model's architecture. Treat it as read-only.
func (ck *Checkpoint) Config() *Config { return ck.cfg }

// Dir is the folder (or GGUF file) the checkpoint was opened from.
func (ck *Checkpoint) Dir() string { return ck.dir }

// Names lists every tensor under its canonical name, ascending.
func (ck *Checkpoint) Names() []string { return ck.names }

// Has says whether the checkpoint has a tensor called name.
func (ck *Checkpoint) Has(name string) bool {
	_, ok := ck.tensors[name]
	return ok
}

// ErrNoTensor is wrapped by Tensor's error for an absent name.
var ErrNoTensor = errors.New("no such tensor")

// Tensor returns the tensor called name (canonical HF name). The returned
// Host is the caller's to keep (a shallow copy), but its bytes alias the
// checkpoint's read-only mapping.
func (ck *Checkpoint) Tensor(name string) (*tensor.Host, error) {
	h, ok := ck.tensors[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: tensor %s: %w", ck.dir, name, ErrNoTensor)
	}
	return cloneHost(h), nil
}

// TensorShape is Tensor plus a check of the logical shape; the error names
// the tensor, its file and both shapes.
func (ck *Checkpoint) TensorShape(name string, shape ...int) (*tensor.Host, error) {
	h, err := ck.Tensor(name)
	if err != nil {
		return nil, err
	}
	if !equalShape(h.Shape, shape) {
		return nil, fmt.Errorf("checkpoint %s: tensor %s (in %s) has shape %v, want %v", ck.dir, name, h.Source, h.Shape, shape)
	}
	return h, nil
}

// CheckTensors checks that every tensor the config implies (see
// Config.TensorShapes) is present with its shape. Open does not call it, so
// a model can still load a checkpoint with extra or optional tensors; call it
// to fail early with every problem listed.
func (ck *Checkpoint) CheckTensors() error {
	shapes := ck.cfg.TensorShapes()
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		if _, err := ck.TensorShape(n, shapes[n]...); err != nil {
			errs = append(errs, err)
			if len(errs) == 10 {
				errs = append(errs, fmt.Errorf("checkpoint %s: more tensors missing or misshapen", ck.dir))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// Close releases the mappings. It is safe to call more than once.
func (ck *Checkpoint) Close() error {
	ck.closeOnce.Do(func() {
		if ck.closer != nil {
			ck.closeErr = ck.closer.Close()
		}
	})
	return ck.closeErr
}

func equalShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func cloneHost(h *tensor.Host) *tensor.Host {
	c := *h
	c.Shape = append([]int(nil), h.Shape...)
	if h.Scales != nil {
		c.Scales = cloneHost(h.Scales)
	}
	if h.Biases != nil {
		c.Biases = cloneHost(h.Biases)
	}
	return &c
}
