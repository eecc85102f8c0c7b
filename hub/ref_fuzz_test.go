package hub

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseRef: any accepted ref round-trips and never names a path that
// leaves the cache folder.
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"Qwen/Qwen3-0.6B", "Qwen/Q@refs/pr/1:a/b.gguf", "hf.co/a/b:Q4_K_M", "a/b@..", "a/b:../x", "/abs", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			return
		}
		again, err := ParseRef(r.String())
		if err != nil || again != r {
			t.Fatalf("%q: round trip %q gave %+v, %v, want %+v", s, r.String(), again, err, r)
		}
		for _, p := range []string{r.Revision, r.File} {
			if p == "" {
				continue
			}
			if j := filepath.Join("/cache/x", filepath.FromSlash(p)); !strings.HasPrefix(j, "/cache/x/") {
				t.Fatalf("%q: %q escapes the cache folder (%s)", s, p, j)
			}
		}
	})
}
