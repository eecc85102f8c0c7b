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

func TestHubConfigFromEnv(t *testing.T) {
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "hf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "hf", "token"), []byte("hf_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                   string
		env                    map[string]string
		cache, endpoint, token string
		offline                bool
	}{
		{name: "defaults", env: map[string]string{"HOME": home},
			cache: filepath.Join(home, ".cache", "huggingface", "hub"), endpoint: "https://huggingface.co"},
		{name: "HF_HOME and its token file", env: map[string]string{"HOME": home, "HF_HOME": filepath.Join(home, "hf")},
			cache: filepath.Join(home, "hf", "hub"), endpoint: "https://huggingface.co", token: "hf_file"},
		{name: "explicit", env: map[string]string{"HOME": home, "HF_HOME": filepath.Join(home, "hf"), "HF_HUB_CACHE": "/c",
			"MACPOOL_MODEL_CACHE": "/m", "HF_ENDPOINT": "http://mirror:8080", "HF_TOKEN": "hf_env", "HF_HUB_OFFLINE": "1"},
			cache: "/m", endpoint: "http://mirror:8080", token: "hf_env", offline: true},
		{name: "XDG", env: map[string]string{"HOME": home, "XDG_CACHE_HOME": "/x", "HF_HUB_CACHE": "/c"},
			cache: "/c", endpoint: "https://huggingface.co"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := hubConfig(func(k string) string { return tt.env[k] }, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.CacheDir != tt.cache || cfg.Endpoint != tt.endpoint || cfg.Token != tt.token || cfg.Offline != tt.offline {
				t.Fatalf("got cache %q endpoint %q token %q offline %v, want %q %q %q %v",
					cfg.CacheDir, cfg.Endpoint, cfg.Token, cfg.Offline, tt.cache, tt.endpoint, tt.token, tt.offline)
			}
		})
	}
	if _, err := hubConfig(func(k string) string { return map[string]string{"HOME": home, "HF_ENDPOINT": "mirror"}[k] }, &bytes.Buffer{}); err == nil {
		t.Fatal("a bad HF_ENDPOINT was accepted")
	}
}

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
