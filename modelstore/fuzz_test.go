package modelstore_test

import (
	"encoding/json"
	"testing"

	"github.com/macpool/macpool/modelstore"
)

// A manifest comes from a peer: whatever it says, Validate must not panic,
// and a valid one must give in-bounds chunk ranges.
func FuzzManifestValidate(f *testing.F) {
	f.Add([]byte(`{"version":1,"chunk_size":1024,"files":[{"path":"a","size":0,"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","chunks":[]}]}`))
	f.Add([]byte(`{"version":1,"chunk_size":1024,"single":true,"files":[{"path":"../x","size":-5}]}`))
	f.Add([]byte(`{"version":1,"chunk_size":1,"files":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m modelstore.Manifest
		if json.Unmarshal(b, &m) != nil {
			return
		}
		if m.Validate() != nil {
			return
		}
		_ = m.Digest()
		for _, file := range m.Files {
			for i := range file.Chunks {
				off, n := m.ChunkRange(file, i)
				if off < 0 || n <= 0 || off+n > file.Size {
					t.Fatalf("chunk %d of %s: [%d,+%d) outside size %d", i, file.Path, off, n, file.Size)
				}
			}
		}
	})
}
