package main

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResolveModelFlag downloads a one-file GGUF repo from a fake Hub.
func TestResolveModelFlag(t *testing.T) {
	body := []byte("GGUF fake weights")
	blob := sha1.New()
	fmt.Fprintf(blob, "blob %d\x00", len(body))
	blob.Write(body)
	blobID := hex.EncodeToString(blob.Sum(nil))
	commit := strings.Repeat("ab", 20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/models/org/tiny/revision/main":
			fmt.Fprintf(w, `{"sha":%q,"siblings":[{"rfilename":"tiny.gguf","size":%d,"blobId":%q}]}`, commit, len(body), blobID)
		case "/org/tiny/resolve/" + commit + "/tiny.gguf":
			w.Write(body)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cache := t.TempDir()
	t.Setenv("MACPOOL_MODEL_CACHE", cache)
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")

	var stderr bytes.Buffer
	f := workerFlags{model: "org/tiny", backend: "cpu"}
	if err := resolveWorkerModel(context.Background(), &f, &stderr); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(cache, "models--org--tiny", "snapshots", commit, "tiny.gguf")
	if f.model != want || f.modelName != "org/tiny" {
		t.Fatalf("got model %q name %q, want %q and org/tiny", f.model, f.modelName, want)
	}
	if b, err := os.ReadFile(f.model); err != nil || !bytes.Equal(b, body) {
		t.Fatalf("read %s: %q, %v", f.model, b, err)
	}
	if !strings.Contains(stderr.String(), "download org/tiny tiny.gguf") {
		t.Errorf("no progress line on stderr: %q", stderr.String())
	}

	// Local paths and the test backend are left alone.
	local := t.TempDir()
	m := local
	if err := resolveModelFlag(context.Background(), &m, &stderr); err != nil || m != local {
		t.Fatalf("local: got %q, %v", m, err)
	}
	tf := workerFlags{model: "org/not-fetched", backend: "test"}
	if err := resolveWorkerModel(context.Background(), &tf, &stderr); err != nil || tf.model != "org/not-fetched" {
		t.Fatalf("test backend: got %q, %v", tf.model, err)
	}
}
