package main

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serveFolders is a fake Hub whose repos are local folders: safetensors and
// GGUF files are LFS files served through a redirect, like on the real Hub.
func serveFolders(t *testing.T, repos map[string]string) *httptest.Server {
	t.Helper()
	const commit = "0123456789abcdef0123456789abcdef01234567"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if rest, ok := strings.CutPrefix(p, "/cdn/"); ok { // /cdn/ORG/NAME/FILE
			segs := strings.SplitN(rest, "/", 3)
			http.ServeContent(w, r, segs[2], time.Time{}, bytes.NewReader(must(os.ReadFile(filepath.Join(repos[segs[0]+"/"+segs[1]], segs[2])))))
			return
		}
		if rest, ok := strings.CutPrefix(p, "/api/models/"); ok {
			segs := strings.SplitN(rest, "/", 4)
			dir, ok := repos[segs[0]+"/"+segs[1]]
			if !ok {
				http.NotFound(w, r)
				return
			}
			type lfs struct {
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			}
			type sib struct {
				RFilename string `json:"rfilename"`
				Size      int64  `json:"size"`
				BlobID    string `json:"blobId"`
				LFS       *lfs   `json:"lfs,omitempty"`
			}
			var sibs []sib
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				s := sib{RFilename: e.Name(), Size: int64(len(b)), BlobID: gitBlobSHA1Hex(b)}
				if strings.HasSuffix(e.Name(), ".safetensors") || strings.HasSuffix(e.Name(), ".gguf") {
					sum := sha256.Sum256(b)
					s.LFS = &lfs{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(b))}
				}
				sibs = append(sibs, s)
			}
			json.NewEncoder(w).Encode(map[string]any{"sha": commit, "siblings": sibs})
			return
		}
		segs := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 5) // org, name, resolve, rev, file
		dir, ok := repos[segs[0]+"/"+segs[1]]
		if !ok || len(segs) != 5 {
			http.NotFound(w, r)
			return
		}
		file := filepath.Join(dir, segs[4])
		if strings.HasSuffix(file, ".safetensors") || strings.HasSuffix(file, ".gguf") {
			http.Redirect(w, r, "/cdn/"+segs[0]+"/"+segs[1]+"/"+segs[4], http.StatusFound)
			return
		}
		http.ServeContent(w, r, file, time.Time{}, bytes.NewReader(must(os.ReadFile(file))))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func gitBlobSHA1Hex(b []byte) string {
	h := sha1.New()
	h.Write([]byte("blob " + strconv.Itoa(len(b)) + "\x00"))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// TestLogitsFromHub: `macpool logits` on a Hub ref gives the same logits as
// on the local folder or file it was served from (safetensors and GGUF).
func TestLogitsFromHub(t *testing.T) {
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	srv := serveFolders(t, map[string]string{
		"test/qwen3":      abs("../../testdata/hf/qwen3"),
		"test/qwen3-gguf": abs("../../testdata/gguf"),
	})
	t.Setenv("MACPOOL_MODEL_CACHE", t.TempDir())
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	for _, tt := range []struct{ local, ref string }{
		{"../../testdata/hf/qwen3", "test/qwen3"},
		{"../../testdata/gguf/qwen3-q8_0.gguf", "test/qwen3-gguf:qwen3-q8_0"},
	} {
		t.Run(tt.ref, func(t *testing.T) {
			var outs [2][]byte
			for i, model := range []string{tt.local, tt.ref} {
				out := filepath.Join(t.TempDir(), "logits.f32")
				var stdout, stderr bytes.Buffer
				if code := runMain(context.Background(), []string{"logits", "--model", model, "--tokens", "1,2,3", "--out", out}, &stdout, &stderr); code != 0 {
					t.Fatalf("logits --model %s: exit %d: %s", model, code, stderr.String())
				}
				outs[i] = must(os.ReadFile(out))
			}
			if len(outs[0]) == 0 || !bytes.Equal(outs[0], outs[1]) {
				t.Fatalf("logits from the hub ref differ from the local model's (%d vs %d bytes)", len(outs[1]), len(outs[0]))
			}
		})
	}
}
