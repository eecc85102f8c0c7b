package reftest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// RopeFixture assembles the rope-scaling fixture testdata/rope/NAME as a
// checkpoint folder in a temporary directory: its config.json (the base
// fixture's with rope scaling set) next to links to the base fixture's
// weights and generation_config.json (ref.json "base", relative to the
// repository root). root is the path of the repository root from the test's
// package. It returns the folder; references stay in testdata/rope/NAME.
func RopeFixture(t testing.TB, root, name string) string {
	t.Helper()
	src := filepath.Join(root, "testdata", "rope", name)
	raw, err := os.ReadFile(filepath.Join(src, "ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Base string `json:"base"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Base == "" {
		t.Fatalf("%s/ref.json: no base fixture (%v)", src, err)
	}
	base, err := filepath.Abs(filepath.Join(root, filepath.FromSlash(r.Base)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"model.safetensors", "generation_config.json"} {
		if err := os.Symlink(filepath.Join(base, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
