package modelstore_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/macpool/macpool/modelstore"
)

// TestFetchPart: a fetch with Want transfers only the wanted chunks (a
// pipeline stage's tensor ranges), leaves the rest of each file unwritten
// and the model unfinished; a second part resumes from the first; a whole
// fetch afterwards completes the model with only the missing chunks.
func TestFetchPart(t *testing.T) {
	src := t.TempDir()
	files := writeModel(t, src, 9)
	var mu sync.Mutex
	asked := map[string]int{} // "path range" -> requests
	count := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == modelstore.PathFile {
				mu.Lock()
				asked[r.URL.Query().Get("path")+" "+r.Header.Get("Range")]++
				mu.Unlock()
			}
			next.ServeHTTP(w, r)
		})
	}
	p := peer(t, "m", src, nil, count)
	dest := filepath.Join(t.TempDir(), "m")
	f := fetcher(t, nil)
	// Part 1: chunks 1 and 2 of model.safetensors, the small files whole.
	want1 := func(file modelstore.File, off, _ int64) bool {
		c := off / chunk
		if file.Path == "model.safetensors" {
			return c == 1 || c == 2
		}
		return file.Path != "sub/shard-2.safetensors"
	}
	res, err := f.Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{p.URL}, Dest: dest, Want: want1})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Partial || res.Path != dest+".partial" {
		t.Fatalf("part: partial %v path %s, want a partial result in %s.partial", res.Partial, res.Path, dest)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Fatalf("a part fetch made %s: %v", dest, err)
	}
	got, err := os.ReadFile(filepath.Join(res.Path, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	full := files["model.safetensors"]
	if len(got) != len(full) {
		t.Fatalf("model.safetensors is %d bytes, want %d (full size, sparse)", len(got), len(full))
	}
	for c := 0; c*chunk < len(full); c++ {
		a, b := c*chunk, min((c+1)*chunk, len(full))
		wanted := want1(modelstore.File{Path: "model.safetensors"}, int64(a), int64(b-a))
		if wanted != bytes.Equal(got[a:b], full[a:b]) {
			t.Errorf("chunk %d: written %v, wanted %v", c, !wanted, wanted)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(res.Path, "config.json")); !bytes.Equal(b, files["config.json"]) {
		t.Errorf("config.json not fetched whole")
	}
	if res.Have["model.safetensors"] != "011000" {
		t.Errorf("have %q, want 011000", res.Have["model.safetensors"])
	}
	mu.Lock()
	n1 := 0
	for k, n := range asked {
		n1 += n
		if bytes.HasPrefix([]byte(k), []byte("sub/")) {
			t.Errorf("unwanted file asked: %s", k)
		}
	}
	mu.Unlock()
	if n1 != 4 { // chunks 1, 2, config.json, tokenizer.json (empty.txt has no chunk)
		t.Errorf("%d chunk requests, want 4: %v", n1, asked)
	}
	// Part 2 overlaps part 1: only chunk 3 is new.
	res, err = f.Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{p.URL}, Dest: dest,
		Want: func(file modelstore.File, off, _ int64) bool {
			return file.Path == "model.safetensors" && off >= 2*chunk && off <= 3*chunk
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != chunk || res.Have["model.safetensors"] != "011100" {
		t.Errorf("second part fetched %d bytes (have %q), want %d (011100)", res.Fetched, res.Have["model.safetensors"], chunk)
	}
	// The whole model: the rest only, then verified and moved into place.
	res, err = f.Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{p.URL}, Dest: dest})
	if err != nil {
		t.Fatal(err)
	}
	wantResumed := int64(3*chunk + len(files["config.json"]) + len(files["tokenizer/tokenizer.json"]))
	if res.Partial || res.Resumed != wantResumed {
		t.Errorf("whole fetch after parts: partial %v, resumed %d bytes, want %d", res.Partial, res.Resumed, wantResumed)
	}
	checkTree(t, dest, files)
}
