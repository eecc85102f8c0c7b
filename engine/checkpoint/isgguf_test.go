package checkpoint

import (
	"os"
	"path/filepath"
	"testing"
)

func TestIsGGUF(t *testing.T) {
	dir := t.TempDir()
	folder := filepath.Join(dir, "model.gguf") // a folder whose name ends in .gguf
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "Qwen3-Q8_0.GGUF")
	if err := os.WriteFile(file, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want bool
	}{
		{file, true},
		{filepath.Join(dir, "missing.gguf"), true}, // opening it names the missing file
		{folder, false},
		{folder + "/", false},
		{dir, false},
		{filepath.Join(dir, "weights.safetensors"), false},
	} {
		if got := IsGGUF(tc.path); got != tc.want {
			t.Errorf("IsGGUF(%s) = %v, want %v", tc.path, got, tc.want)
		}
	}
}
