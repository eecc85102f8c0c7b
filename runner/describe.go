package runner

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/gguf"
)

// modelInfo is what RoutingSummary reports about the model besides the KV
// room: how its weights are stored and their size on disk. It is read once
// at New from the folder (or GGUF file), not from the bound tensors, so
// that it says what an operator finds on disk.
type modelInfo struct {
	format, quant string
	size          int64
}

// describe reads dir's format, quantization and size; what it cannot read
// stays empty (the model loaded, so this is informational only). quantize
// is Config.Quantize: weights quantized at load.
func describe(dir, quantize string) modelInfo {
	var info modelInfo
	if checkpoint.IsGGUF(dir) {
		info.format = "gguf"
		if st, err := os.Stat(dir); err == nil {
			info.size = st.Size()
		}
		if f, err := gguf.Open(dir); err == nil {
			info.quant = ggufQuant(f.Infos())
			f.Close()
		}
	} else {
		info.format, info.quant = folderFormat(dir)
		info.size = dirSize(dir)
	}
	if quantize != "" {
		info.quant = strings.ToLower(quantize) + " (at load)"
	}
	return info
}

// ggufQuant names the tensor type holding most bytes of the matrices, as
// llama.cpp's file names do (q8_0, q4_k).
func ggufQuant(infos []gguf.TensorInfo) string {
	bytes := map[gguf.GGMLType]uint64{}
	for _, ti := range infos {
		if len(ti.Dims) >= 2 {
			bytes[ti.Type] += ti.Size
		}
	}
	var best gguf.GGMLType
	var most uint64
	for t, n := range bytes {
		if n > most || (n == most && t < best) {
			best, most = t, n
		}
	}
	if most == 0 {
		return ""
	}
	return strings.ToLower(best.String())
}

// folderFormat is "mlx" with its bits for an MLX-quantized folder, else
// "safetensors" with the stored dtype (bf16, f16, f32).
func folderFormat(dir string) (format, quant string) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return "safetensors", ""
	}
	var cfg struct {
		TorchDtype         string   `json:"torch_dtype"`
		Dtype              string   `json:"dtype"`
		Quantization       *mlxBits `json:"quantization"`
		QuantizationConfig *mlxBits `json:"quantization_config"`
		TextConfig         *struct {
			TorchDtype string `json:"torch_dtype"`
		} `json:"text_config"`
	}
	if json.Unmarshal(raw, &cfg) != nil {
		return "safetensors", ""
	}
	for _, q := range []*mlxBits{cfg.Quantization, cfg.QuantizationConfig} {
		if q != nil && q.Bits > 0 {
			return "mlx", strconv.Itoa(q.Bits) + "bit"
		}
	}
	dtype := cfg.TorchDtype
	if dtype == "" {
		dtype = cfg.Dtype
	}
	if dtype == "" && cfg.TextConfig != nil {
		dtype = cfg.TextConfig.TorchDtype
	}
	switch dtype {
	case "bfloat16":
		dtype = "bf16"
	case "float16":
		dtype = "f16"
	case "float32":
		dtype = "f32"
	}
	return "safetensors", dtype
}

type mlxBits struct {
	Bits int `json:"bits"`
}

// dirSize is the bytes of the files under dir, following links to files:
// a Hugging Face cache snapshot is links into its blobs folder.
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		fi, err := os.Stat(path) // follows a link
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
