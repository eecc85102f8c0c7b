package checkpoint

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// rangeFixtures are one of each format and architecture family.
var rangeFixtures = []string{
	"hf/qwen3", "hf/qwen3_tied", "hf/qwen3_moe", "hf/qwen3_5", "hf/qwen3_5_moe", "hf/qwen3_next",
	"mlx/qwen3-4bit", "mlx/qwen3_5_moe-4bit", "mlx/qwen3_tied-4bit",
	"gguf/qwen3-q4_k_m.gguf", "gguf/qwen3moe-q8_0.gguf",
}

// poisonedCopy copies the model at src to a temporary place keeping only
// the bytes of keep in weight files (every other byte 0xA5) and whole
// other files, as a worker's ranged fetch leaves it.
func poisonedCopy(t *testing.T, src string, keep []FileRange) string {
	t.Helper()
	byFile := map[string][]FileRange{}
	for _, r := range keep {
		byFile[r.Path] = append(byFile[r.Path], r)
	}
	weight := func(name string) bool {
		return filepath.Ext(name) == ".safetensors" || filepath.Ext(name) == ".gguf"
	}
	copyFile := func(from, to, rel string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if weight(from) {
			out := bytes.Repeat([]byte{0xA5}, len(b))
			for _, r := range byFile[rel] {
				copy(out[r.Off:r.Off+r.Len], b[r.Off:r.Off+r.Len])
			}
			b = out
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if IsGGUF(src) {
		dst := filepath.Join(dir, filepath.Base(src))
		copyFile(src, dst, filepath.Base(src))
		return dst
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		copyFile(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name()), e.Name())
	}
	return dir
}

// TestStageRanges: a stage opened from a copy that holds only the bytes
// TensorRanges gives it (the rest poisoned) binds exactly the tensors, with
// the same bytes, as the stage opened from the original — for every format,
// dense, MoE, hybrid and tied models, and every stage of 3-stage splits (2 for
// two-layer fixtures).
func TestStageRanges(t *testing.T) {
	for _, fx := range rangeFixtures {
		src := filepath.Join("..", "..", "testdata", filepath.FromSlash(fx))
		t.Run(fx, func(t *testing.T) {
			r, _, err := TensorRanges(src)
			if err != nil {
				t.Fatal(err)
			}
			n := len(r.Layers)
			cuts := [][2]int{{0, 1}, {1, n - 1}, {n - 1, n}}
			if n == 2 {
				cuts = [][2]int{{0, 1}, {1, 2}}
			}
			var kept, total int64
			for _, c := range cuts {
				s := Stage{First: c[0], Last: c[1]}
				want, err := OpenStage(src, s)
				if err != nil {
					t.Fatal(err)
				}
				ranges := r.Stage(s)
				for _, x := range ranges {
					kept += x.Len
				}
				got, err := OpenStage(poisonedCopy(t, src, ranges), s)
				if err != nil {
					want.Close()
					t.Fatalf("stage %v from its ranges: %v", s, err)
				}
				if fmt.Sprint(got.Names()) != fmt.Sprint(want.Names()) {
					t.Errorf("stage %v: tensors %v, want %v", s, got.Names(), want.Names())
				}
				for _, name := range want.Names() {
					a, _ := want.Tensor(name)
					b, err := got.Tensor(name)
					if err != nil || !sameBytes(a, b) {
						t.Errorf("stage %v: tensor %s differs when only the stage's ranges are present (err %v)", s, name, err)
					}
				}
				got.Close()
				want.Close()
			}
			for _, x := range r.Stage(Stage{First: 0, Last: n}) {
				total += x.Len
			}
			// The three stages read each byte about once (headers and
			// common tensors three times), not the whole model each.
			if kept > total*3/2 {
				t.Errorf("stages read %d bytes of a %d-byte model", kept, total)
			}
		})
	}
}

// sameBytes compares a tensor's bytes and its MLX scales and biases.
func sameBytes(a, b *tensor.Host) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	if a == nil {
		return true
	}
	return bytes.Equal(a.Data, b.Data) && sameBytes(a.Scales, b.Scales) && sameBytes(a.Biases, b.Biases)
}
