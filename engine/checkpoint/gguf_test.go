package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenGGUF opens every GGUF fixture through Open and checks every tensor
// the config implies against the shape Config.TensorShapes gives.
func TestOpenGGUF(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/gguf/*.gguf")
	if len(files) == 0 {
		t.Fatal("no GGUF fixtures")
	}
	for _, p := range files {
		t.Run(filepath.Base(p), func(t *testing.T) {
			ck, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			for name, shape := range ck.Config().TensorShapes() {
				if _, err := ck.TensorShape(name, shape...); err != nil {
					t.Error(err)
				}
			}
			if ck.Dir() != p {
				t.Errorf("Dir() = %q, want %q", ck.Dir(), p)
			}
		})
	}
	// An architecture engine/gguf does not map.
	bad := filepath.Join(t.TempDir(), "x.gguf")
	b := []byte("GGUF\x03\x00\x00\x00" + "\x00\x00\x00\x00\x00\x00\x00\x00" + "\x01\x00\x00\x00\x00\x00\x00\x00" +
		"\x14\x00\x00\x00\x00\x00\x00\x00general.architecture" + "\x08\x00\x00\x00" + "\x05\x00\x00\x00\x00\x00\x00\x00llama")
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); !errors.Is(err, ErrGGUFUnsupported) {
		t.Errorf("llama GGUF: got %v, want ErrGGUFUnsupported", err)
	}
}
