package checkpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// TestWriteMLXRoundTrip writes the MLX fixtures' tensors back with WriteMLX
// and reopens the folder: the config and every tensor (codes, scales,
// biases, unquantized tensors) must come back byte for byte.
func TestWriteMLXRoundTrip(t *testing.T) {
	for _, name := range []string{"mlx/qwen3-4bit", "mlx/qwen3-8bit", "mlx/qwen3_tied-4bit"} {
		t.Run(name, func(t *testing.T) {
			src := filepath.Join(testdata, name)
			ck, err := Open(src)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			raw, err := os.ReadFile(filepath.Join(src, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "out")
			if err := WriteMLX(dir, raw, ck); err != nil {
				t.Fatal(err)
			}
			back, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer back.Close()
			if got, want := back.Config().String(), ck.Config().String(); got != want {
				t.Errorf("config: got %s, want %s", got, want)
			}
			if got, want := strings.Join(back.Names(), ","), strings.Join(ck.Names(), ","); got != want {
				t.Fatalf("names: got %s, want %s", got, want)
			}
			quantized := 0
			for _, n := range ck.Names() {
				a, err := ck.Tensor(n)
				if err != nil {
					t.Fatal(err)
				}
				b, err := back.Tensor(n)
				if err != nil {
					t.Fatal(err)
				}
				sameHost(t, n, b, a)
				if a.Format == tensor.MLXAffine {
					quantized++
					sameHost(t, n+" scales", b.Scales, a.Scales)
					sameHost(t, n+" biases", b.Biases, a.Biases)
				}
			}
			if quantized == 0 {
				t.Errorf("no quantized tensor in %s", name)
			}
		})
	}
}

func sameHost(t *testing.T, name string, got, want *tensor.Host) {
	t.Helper()
	if got.Format != want.Format || !equalShape(got.Shape, want.Shape) || got.Bits != want.Bits || got.GroupSize != want.GroupSize {
		t.Errorf("%s: got %v %v bits %d group %d, want %v %v bits %d group %d", name,
			got.Format, got.Shape, got.Bits, got.GroupSize, want.Format, want.Shape, want.Bits, want.GroupSize)
		return
	}
	if !bytes.Equal(got.Data, want.Data) {
		t.Errorf("%s: data differs", name)
	}
}

func TestWriteMLXRefuses(t *testing.T) {
	ck, err := Open(filepath.Join(testdata, "mlx/qwen3-4bit"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, c := range []struct{ config, want string }{
		{`{"model_type": "qwen3_next"}`, `model_type "qwen3_next": only dense qwen2/qwen3`},
		{`{"model_type": "qwen3_moe"}`, `model_type "qwen3_moe": only dense qwen2/qwen3`},
		{`not json`, `config: invalid character`},
	} {
		err := WriteMLX(filepath.Join(t.TempDir(), "x"), []byte(c.config), ck)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %s: got error %v, want one containing %q", c.config, err, c.want)
		}
	}
}
