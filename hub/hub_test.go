package hub

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeFile is one file of a fake repo; LFS files are served through a
// redirect to the fake CDN path /cdn/SHA256, like the real Hub.
type fakeFile struct {
	data []byte
	lfs  bool
}

type fakeRepo struct {
	commit string
	files  map[string]fakeFile
	token  string // required bearer token ("" = public)
	gated  bool
}

// fakeHub is an in-process Hub: the model-info API, resolve URLs and a CDN
// serving Range requests, with fault injection.
type fakeHub struct {
	srv   *httptest.Server
	repos map[string]*fakeRepo

	mu      sync.Mutex
	hits    map[string]int    // "api", "resolve:FILE", "cdn:FILE"
	ranges  []string          // Range headers the CDN saw
	auth    []string          // Authorization headers the API saw
	drop    map[string]int64  // file → bytes to send before dropping the connection (once)
	corrupt map[string]bool   // file → serve flipped bytes
	hang    map[string]bool   // file → send half, then wait for the client to go away
	down    bool              // answer 503 everywhere
	bodies  map[string][]byte // cdn sha → file contents
	names   map[string]string // cdn sha → file name
}

func commitOf(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func gitBlobSHA1(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func newFakeHub(t *testing.T, repos map[string]*fakeRepo) *fakeHub {
	t.Helper()
	f := &fakeHub{repos: repos, hits: map[string]int{}, drop: map[string]int64{}, corrupt: map[string]bool{},
		hang: map[string]bool{}, bodies: map[string][]byte{}, names: map[string]string{}}
	for id, r := range repos {
		if r.commit == "" {
			r.commit = commitOf(id)
		}
		for name, file := range r.files {
			if file.lfs {
				f.bodies[sha256Hex(file.data)] = file.data
				f.names[sha256Hex(file.data)] = name
			}
		}
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeHub) hit(key string) {
	f.mu.Lock()
	f.hits[key]++
	f.mu.Unlock()
}

func (f *fakeHub) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[key]
}

func (f *fakeHub) fileHits() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for k, v := range f.hits {
		if k != "api" {
			n += v
		}
	}
	return n
}

func (f *fakeHub) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
		return
	}
	p := r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(p, "/api/models/"):
		f.serveAPI(w, r, strings.TrimPrefix(p, "/api/models/"))
	case strings.HasPrefix(p, "/cdn/"):
		f.serveCDN(w, r, strings.TrimPrefix(p, "/cdn/"))
	default:
		f.serveResolve(w, r, strings.TrimPrefix(p, "/"))
	}
}

// repo finds the repo a request is for and checks its token.
func (f *fakeHub) repo(w http.ResponseWriter, r *http.Request, id string) *fakeRepo {
	repo, ok := f.repos[id]
	if !ok {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		http.Error(w, "Repository not found", http.StatusNotFound)
		return nil
	}
	if repo.token != "" && r.Header.Get("Authorization") != "Bearer "+repo.token {
		if repo.gated {
			w.Header().Set("X-Error-Code", "GatedRepo")
		}
		w.Header().Set("X-Error-Message", "Access to model "+id+" is restricted.")
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return nil
	}
	return repo
}

func (f *fakeHub) serveAPI(w http.ResponseWriter, r *http.Request, rest string) {
	f.hit("api")
	f.mu.Lock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()
	segs := strings.SplitN(rest, "/", 4) // org, name, "revision", rev
	if len(segs) != 4 || segs[2] != "revision" || r.URL.Query().Get("blobs") != "true" {
		http.Error(w, "bad api path "+rest, http.StatusBadRequest)
		return
	}
	repo := f.repo(w, r, segs[0]+"/"+segs[1])
	if repo == nil {
		return
	}
	if rev := segs[3]; rev != "main" && rev != repo.commit {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		http.Error(w, "Invalid rev id: "+rev, http.StatusNotFound)
		return
	}
	type lfs struct {
		SHA256      string `json:"sha256"`
		Size        int    `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type sib struct {
		RFilename string `json:"rfilename"`
		Size      int    `json:"size"`
		BlobID    string `json:"blobId"`
		LFS       *lfs   `json:"lfs,omitempty"`
	}
	info := struct {
		ID       string `json:"id"`
		SHA      string `json:"sha"`
		Siblings []sib  `json:"siblings"`
	}{ID: segs[0] + "/" + segs[1], SHA: repo.commit}
	for name, file := range repo.files {
		s := sib{RFilename: name, Size: len(file.data), BlobID: gitBlobSHA1(file.data)}
		if file.lfs {
			s.BlobID = gitBlobSHA1([]byte("pointer " + name)) // the pointer file's id, as on the Hub
			s.LFS = &lfs{SHA256: sha256Hex(file.data), Size: len(file.data), PointerSize: 134}
		}
		info.Siblings = append(info.Siblings, s)
	}
	sort.Slice(info.Siblings, func(i, j int) bool { return info.Siblings[i].RFilename < info.Siblings[j].RFilename })
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(info)
}

func (f *fakeHub) serveResolve(w http.ResponseWriter, r *http.Request, rest string) {
	segs := strings.SplitN(rest, "/", 5) // org, name, "resolve", rev, file
	if len(segs) != 5 || segs[2] != "resolve" {
		http.NotFound(w, r)
		return
	}
	repo := f.repo(w, r, segs[0]+"/"+segs[1])
	if repo == nil {
		return
	}
	name := segs[4]
	f.hit("resolve:" + name)
	file, ok := repo.files[name]
	if segs[3] != repo.commit || !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "Entry not found", http.StatusNotFound)
		return
	}
	w.Header().Set("X-Repo-Commit", repo.commit)
	if file.lfs {
		sum := sha256Hex(file.data)
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(file.data)))
		w.Header().Set("Location", "/cdn/"+sum+"?signature=x")
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+gitBlobSHA1(file.data)+`"`)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(file.data))
}

func (f *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request, sum string) {
	f.mu.Lock()
	data, name := f.bodies[sum], f.names[sum]
	f.ranges = append(f.ranges, r.Header.Get("Range"))
	drop, hang, corrupt := f.drop[name], f.hang[name], f.corrupt[name]
	delete(f.drop, name)
	f.mu.Unlock()
	f.hit("cdn:" + name)
	if data == nil {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "" && r.Header.Get("Authorization") != "Bearer secret" {
		http.Error(w, "bad auth on cdn", http.StatusBadRequest)
		return
	}
	if corrupt {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0xff
	}
	switch {
	case drop > 0 && r.Header.Get("Range") == "":
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:drop])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // drops the connection mid-body
	case hang:
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:len(data)/2])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(data))
}

// testRepos: a sharded safetensors repo (with files the engine does not
// need), a GGUF repo, and a gated one.
func testRepos() map[string]*fakeRepo {
	shard1 := bytes.Repeat([]byte("shard-one-"), 5000)
	shard2 := bytes.Repeat([]byte("shard-two-"), 3000)
	index := `{"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`
	return map[string]*fakeRepo{
		"Qwen/Qwen3-Test": {files: map[string]fakeFile{
			"config.json":                      {data: []byte(`{"model_type":"qwen3"}`)},
			"generation_config.json":           {data: []byte(`{"eos_token_id":1}`)},
			"tokenizer.json":                   {data: []byte(`{"model":{}}`), lfs: true},
			"tokenizer_config.json":            {data: []byte(`{}`)},
			"model.safetensors.index.json":     {data: []byte(index)},
			"model-00001-of-00002.safetensors": {data: shard1, lfs: true},
			"model-00002-of-00002.safetensors": {data: shard2, lfs: true},
			"consolidated.safetensors":         {data: []byte("not in the index"), lfs: true},
			"onnx/model.safetensors":           {data: []byte("other format"), lfs: true},
			"README.md":                        {data: []byte("# readme")},
			".gitattributes":                   {data: []byte("*.safetensors filter=lfs")},
		}},
		"Qwen/Qwen3-Test-GGUF": {files: map[string]fakeFile{
			"Qwen3-Test-Q4_K_M.gguf": {data: bytes.Repeat([]byte("q4"), 4000), lfs: true},
			"Qwen3-Test-Q8_0.gguf":   {data: bytes.Repeat([]byte("q8"), 6000), lfs: true},
			"README.md":              {data: []byte("# gguf")},
		}},
		"org/gated": {token: "secret", gated: true, files: map[string]fakeFile{
			"config.json":       {data: []byte(`{}`)},
			"model.safetensors": {data: []byte("gated weights"), lfs: true},
		}},
	}
}

func newTestHub(t *testing.T, f *fakeHub, mod func(*Config)) *Hub {
	t.Helper()
	cfg := DefaultConfig()
	cfg.CacheDir = t.TempDir()
	cfg.Endpoint = f.srv.URL
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg.HTTPClient = &http.Client{Transport: tr}
	cfg.StallTimeout = 5 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.backoff = time.Millisecond
	return h
}

func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestParseRef(t *testing.T) {
	tests := []struct {
		in      string
		want    Ref
		wantErr string
	}{
		{in: "Qwen/Qwen3-0.6B", want: Ref{Repo: "Qwen/Qwen3-0.6B", Revision: "main"}},
		{in: "Qwen/Qwen3-0.6B@v1.0", want: Ref{Repo: "Qwen/Qwen3-0.6B", Revision: "v1.0"}},
		{in: "Qwen/Qwen3-0.6B@refs/pr/4", want: Ref{Repo: "Qwen/Qwen3-0.6B", Revision: "refs/pr/4"}},
		{in: "Qwen/Qwen3-8B-GGUF:Q4_K_M", want: Ref{Repo: "Qwen/Qwen3-8B-GGUF", Revision: "main", File: "Q4_K_M"}},
		{in: "hf.co/Qwen/Qwen3-8B-GGUF@abc:sub/x.gguf", want: Ref{Repo: "Qwen/Qwen3-8B-GGUF", Revision: "abc", File: "sub/x.gguf"}},
		{in: "https://huggingface.co/Qwen/Qwen3-0.6B", want: Ref{Repo: "Qwen/Qwen3-0.6B", Revision: "main"}},
		{in: "qwen3", wantErr: "not a Hugging Face repo id"},
		{in: "a/b/c", wantErr: "not a Hugging Face repo id"},
		{in: "Qwen/Qwen3@", wantErr: "empty revision"},
		{in: "Qwen/Qwen3:", wantErr: "empty file"},
		{in: "Qwen/Qwen3:../../etc/passwd", wantErr: "relative path inside the repo"},
		{in: "Qwen/Qwen3@../x", wantErr: "not a valid git ref"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRef(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v, want %+v", got, err, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "cache dir") {
		t.Fatalf("got %v, want a cache dir error", err)
	}
	cfg.CacheDir = t.TempDir()
	cfg.Endpoint = "ftp://x"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "http(s) URL") {
		t.Fatalf("got %v, want an endpoint error", err)
	}
}

func TestResolveLocal(t *testing.T) {
	f := newFakeHub(t, testRepos())
	h := newTestHub(t, f, nil)
	dir := t.TempDir()
	if got, err := h.Resolve(context.Background(), dir); err != nil || got != dir {
		t.Fatalf("got %q, %v, want %q", got, err, dir)
	}
	for _, in := range []string{"./missing", "/no/such/model.gguf", "missing.gguf"} {
		if _, err := h.Resolve(context.Background(), in); err == nil || !strings.Contains(err.Error(), "no such file or folder") {
			t.Errorf("Resolve(%q): got %v, want no such file or folder", in, err)
		}
	}
	if _, err := h.Resolve(context.Background(), "qwen3"); err == nil || !strings.Contains(err.Error(), "no local file or folder") {
		t.Errorf("got %v, want a not-a-repo-id error", err)
	}
	if f.count("api") != 0 {
		t.Errorf("local paths made %d API calls, want 0", f.count("api"))
	}
}

func TestResolveSafetensors(t *testing.T) {
	repos := testRepos()
	f := newFakeHub(t, repos)
	var mu sync.Mutex
	finished := map[string]bool{}
	h := newTestHub(t, f, func(c *Config) {
		c.Token = "secret"
		c.Progress = func(p Progress) {
			mu.Lock()
			defer mu.Unlock()
			if p.Finished {
				if p.Bytes != p.Total {
					t.Errorf("%s finished at %d of %d bytes", p.File, p.Bytes, p.Total)
				}
				finished[p.File] = true
			}
		}
	})
	ctx := context.Background()
	got, err := h.Resolve(ctx, "Qwen/Qwen3-Test")
	if err != nil {
		t.Fatal(err)
	}
	repo := repos["Qwen/Qwen3-Test"]
	wantDir := filepath.Join(h.cfg.CacheDir, "models--Qwen--Qwen3-Test", "snapshots", repo.commit)
	if got != wantDir {
		t.Fatalf("got %s, want %s", got, wantDir)
	}
	files := readAll(t, got)
	want := []string{"config.json", "generation_config.json", "model-00001-of-00002.safetensors",
		"model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}
	var names []string
	for n, body := range files {
		names = append(names, n)
		if body != string(repo.files[n].data) {
			t.Errorf("%s: contents differ from the repo's", n)
		}
	}
	sort.Strings(names)
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("snapshot has %v, want %v", names, want)
	}
	// Layout: symlinks into blobs named by etag, refs/main = commit.
	target, err := os.Readlink(filepath.Join(got, "model-00001-of-00002.safetensors"))
	if err != nil || target != filepath.Join("..", "..", "blobs", sha256Hex(repo.files["model-00001-of-00002.safetensors"].data)) {
		t.Errorf("shard link: got %q, %v", target, err)
	}
	if target, _ := os.Readlink(filepath.Join(got, "config.json")); !strings.HasSuffix(target, gitBlobSHA1(repo.files["config.json"].data)) {
		t.Errorf("config.json links to %q, want its git blob sha1", target)
	}
	if b, _ := os.ReadFile(filepath.Join(h.cfg.CacheDir, "models--Qwen--Qwen3-Test", "refs", "main")); string(b) != repo.commit {
		t.Errorf("refs/main = %q, want %s", b, repo.commit)
	}
	if n := f.count("cdn:model-00002-of-00002.safetensors"); n != 1 {
		t.Errorf("LFS shard fetched %d times through the CDN redirect, want 1", n)
	}
	if !finished["model-00002-of-00002.safetensors"] || !finished["config.json"] {
		t.Errorf("progress finished for %v, want every file", finished)
	}
	if f.auth[0] != "Bearer secret" {
		t.Errorf("API Authorization %q, want the bearer token", f.auth[0])
	}

	// Second resolve: one cheap API call, no downloads.
	before := f.fileHits()
	again, err := h.Resolve(ctx, "Qwen/Qwen3-Test")
	if err != nil || again != got {
		t.Fatalf("second resolve: got %q, %v", again, err)
	}
	if n := f.fileHits() - before; n != 0 {
		t.Errorf("second resolve made %d file requests, want 0", n)
	}
	// A commit revision with a complete snapshot needs no network at all.
	apis := f.count("api")
	if p, err := h.Resolve(ctx, "Qwen/Qwen3-Test@"+repo.commit); err != nil || p != got {
		t.Fatalf("resolve by commit: got %q, %v", p, err)
	}
	if f.count("api") != apis {
		t.Errorf("resolve by cached commit called the API")
	}
}

func TestResolveGGUF(t *testing.T) {
	repos := testRepos()
	f := newFakeHub(t, repos)
	h := newTestHub(t, f, nil)
	ctx := context.Background()
	tests := []struct {
		ref, want, wantErr string
	}{
		{ref: "Qwen/Qwen3-Test-GGUF", wantErr: "has 2 GGUF files; pick one"},
		{ref: "Qwen/Qwen3-Test-GGUF:Q4_K_M", want: "Qwen3-Test-Q4_K_M.gguf"},
		{ref: "Qwen/Qwen3-Test-GGUF:q8_0", want: "Qwen3-Test-Q8_0.gguf"},
		{ref: "Qwen/Qwen3-Test-GGUF:Qwen3-Test-Q8_0.gguf", want: "Qwen3-Test-Q8_0.gguf"},
		{ref: "Qwen/Qwen3-Test-GGUF:Q", wantErr: "matches 2 .gguf files"},
		{ref: "Qwen/Qwen3-Test-GGUF:IQ2", wantErr: "no .gguf file matches"},
		{ref: "Qwen/Qwen3-Test-GGUF:README.md", wantErr: "must be a .gguf file"},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			got, err := h.Resolve(ctx, tt.ref)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q, %v, want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Base(got) != tt.want {
				t.Fatalf("got %s, want a path ending in %s", got, tt.want)
			}
			b, err := os.ReadFile(got)
			if err != nil || !bytes.Equal(b, repos["Qwen/Qwen3-Test-GGUF"].files[tt.want].data) {
				t.Fatalf("contents of %s differ: %v", got, err)
			}
			if entries, _ := os.ReadDir(filepath.Dir(got)); len(entries) > 2 {
				t.Errorf("snapshot has %d entries, want only the picked GGUF files", len(entries))
			}
		})
	}
}

func TestResumeAfterDroppedConnection(t *testing.T) {
	repos := testRepos()
	f := newFakeHub(t, repos)
	f.drop["model-00001-of-00002.safetensors"] = 12345
	h := newTestHub(t, f, nil)
	got, err := h.Resolve(context.Background(), "Qwen/Qwen3-Test")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(got, "model-00001-of-00002.safetensors")); !bytes.Equal(b, repos["Qwen/Qwen3-Test"].files["model-00001-of-00002.safetensors"].data) {
		t.Fatal("resumed shard differs from the original")
	}
	if !contains(f.ranges, "bytes=12345-") {
		t.Fatalf("CDN saw ranges %q, want a resume from byte 12345", f.ranges)
	}
}

func TestResumePartialFromEarlierRun(t *testing.T) {
	repos := testRepos()
	f := newFakeHub(t, repos)
	h := newTestHub(t, f, nil)
	data := repos["Qwen/Qwen3-Test-GGUF"].files["Qwen3-Test-Q8_0.gguf"].data
	blobs := filepath.Join(h.cfg.CacheDir, "models--Qwen--Qwen3-Test-GGUF", "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(blobs, sha256Hex(data)+".incomplete"), data[:7000], 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := h.Resolve(context.Background(), "Qwen/Qwen3-Test-GGUF:Q8_0")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(got); !bytes.Equal(b, data) {
		t.Fatal("resumed file differs from the original")
	}
	if len(f.ranges) != 1 || f.ranges[0] != "bytes=7000-" {
		t.Fatalf("CDN saw ranges %q, want one request from byte 7000", f.ranges)
	}
}

func TestConcurrentProcessesShareTheCache(t *testing.T) {
	f := newFakeHub(t, testRepos())
	a := newTestHub(t, f, nil)
	b := newTestHub(t, f, func(c *Config) { c.CacheDir = a.cfg.CacheDir })
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, h := range []*Hub{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = h.Resolve(context.Background(), "Qwen/Qwen3-Test")
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("errors: %v", errs)
	}
	for _, name := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "tokenizer.json"} {
		if n := f.count("cdn:" + name); n != 1 {
			t.Errorf("%s downloaded %d times, want 1", name, n)
		}
	}
}

func TestCorruptDownload(t *testing.T) {
	f := newFakeHub(t, testRepos())
	f.corrupt["Qwen3-Test-Q4_K_M.gguf"] = true
	h := newTestHub(t, f, nil)
	_, err := h.Resolve(context.Background(), "Qwen/Qwen3-Test-GGUF:Q4_K_M")
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("got %v, want a sha256 checksum error", err)
	}
	blobs, _ := os.ReadDir(filepath.Join(h.cfg.CacheDir, "models--Qwen--Qwen3-Test-GGUF", "blobs"))
	if len(blobs) != 0 {
		t.Errorf("blobs left after a corrupt download: %v", blobs)
	}
	if _, err := os.Stat(filepath.Join(h.cfg.CacheDir, "models--Qwen--Qwen3-Test-GGUF", "snapshots")); !os.IsNotExist(err) {
		t.Errorf("snapshot created for a corrupt download (%v)", err)
	}
	// Fixed on the server: the next run succeeds.
	f.mu.Lock()
	f.corrupt = map[string]bool{}
	f.mu.Unlock()
	if _, err := h.Resolve(context.Background(), "Qwen/Qwen3-Test-GGUF:Q4_K_M"); err != nil {
		t.Fatal(err)
	}
}

func TestErrors(t *testing.T) {
	f := newFakeHub(t, testRepos())
	h := newTestHub(t, f, nil)
	ctx := context.Background()
	tests := []struct {
		ref      string
		sentinel error
		want     string
	}{
		{"org/gated", ErrUnauthorized, "set HF_TOKEN"},
		{"org/gated", ErrUnauthorized, "gated: accept its terms"},
		{"org/missing", ErrNotFound, "repo org/missing or its revision \"main\" not found"},
		{"Qwen/Qwen3-Test@v9", ErrNotFound, "revision \"v9\" not found"},
	}
	for _, tt := range tests {
		_, err := h.Resolve(ctx, tt.ref)
		if !errors.Is(err, tt.sentinel) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Resolve(%s): got %v, want %v containing %q", tt.ref, err, tt.sentinel, tt.want)
		}
	}
	withToken := newTestHub(t, f, func(c *Config) { c.Token = "secret" })
	if _, err := withToken.Resolve(ctx, "org/gated"); err != nil {
		t.Fatalf("with a token: %v", err)
	}
	badToken := newTestHub(t, f, func(c *Config) { c.Token = "wrong" })
	if _, err := badToken.Resolve(ctx, "org/gated"); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "check that HF_TOKEN is valid") {
		t.Fatalf("with a bad token: got %v", err)
	}
}

func TestCancel(t *testing.T) {
	f := newFakeHub(t, testRepos())
	f.hang["Qwen3-Test-Q8_0.gguf"] = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newTestHub(t, f, func(c *Config) {
		c.ProgressInterval = 0
		c.Progress = func(p Progress) {
			if p.Bytes > 0 && !p.Finished {
				cancel()
			}
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := h.Resolve(ctx, "Qwen/Qwen3-Test-GGUF:Q8_0")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Resolve did not return after cancellation")
	}
	// The partial file is kept for the next run to resume.
	parts, _ := filepath.Glob(filepath.Join(h.cfg.CacheDir, "*", "blobs", "*.incomplete"))
	if len(parts) != 1 {
		t.Fatalf("got partial files %v, want one", parts)
	}
}

func TestStallIsResumed(t *testing.T) {
	repos := testRepos()
	f := newFakeHub(t, repos)
	f.hang["Qwen3-Test-Q4_K_M.gguf"] = true
	h := newTestHub(t, f, func(c *Config) {
		c.StallTimeout = 100 * time.Millisecond
		c.ProgressInterval = 0
		c.Progress = func(p Progress) {
			if p.Bytes > 0 {
				f.mu.Lock()
				f.hang = map[string]bool{} // the retry is served normally
				f.mu.Unlock()
			}
		}
	})
	got, err := h.Resolve(context.Background(), "Qwen/Qwen3-Test-GGUF:Q4_K_M")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(got); !bytes.Equal(b, repos["Qwen/Qwen3-Test-GGUF"].files["Qwen3-Test-Q4_K_M.gguf"].data) {
		t.Fatal("file differs after a stalled transfer")
	}
	if !contains(f.ranges, "bytes=4000-") {
		t.Fatalf("CDN saw ranges %q, want a resume from byte 4000", f.ranges)
	}
}

func TestOfflineFallback(t *testing.T) {
	f := newFakeHub(t, testRepos())
	h := newTestHub(t, f, nil)
	ctx := context.Background()
	first, err := h.Resolve(ctx, "Qwen/Qwen3-Test")
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.down = true
	f.mu.Unlock()
	if got, err := h.Resolve(ctx, "Qwen/Qwen3-Test"); err != nil || got != first {
		t.Fatalf("hub down: got %q, %v, want the cached %s", got, err, first)
	}
	if _, err := h.Resolve(ctx, "Qwen/Qwen3-Test-GGUF:Q8_0"); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), OfflineHint) {
		t.Fatalf("hub down, nothing cached: got %v, want the 503 and how to start offline", err)
	}
	f.srv.Close() // connection refused
	if got, err := h.Resolve(ctx, "Qwen/Qwen3-Test"); err != nil || got != first {
		t.Fatalf("hub gone: got %q, %v, want the cached %s", got, err, first)
	}

	offline := newTestHub(t, f, func(c *Config) { c.Offline = true; c.CacheDir = h.cfg.CacheDir })
	if got, err := offline.Resolve(ctx, "Qwen/Qwen3-Test"); err != nil || got != first {
		t.Fatalf("offline: got %q, %v", got, err)
	}
	if _, err := offline.Resolve(ctx, "Qwen/Other"); !errors.Is(err, ErrNotCached) {
		t.Fatalf("offline, not cached: got %v, want ErrNotCached", err)
	}
	// A snapshot missing a shard is not complete.
	os.Remove(filepath.Join(first, "model-00002-of-00002.safetensors"))
	if _, err := offline.Resolve(ctx, "Qwen/Qwen3-Test"); !errors.Is(err, ErrNotCached) {
		t.Fatalf("offline, incomplete snapshot: got %v, want ErrNotCached", err)
	}
}

func TestTextProgress(t *testing.T) {
	var b bytes.Buffer
	p := TextProgress(&b, true, 0)
	p(Progress{Repo: "Qwen/Q", File: "m.safetensors", Bytes: 3 << 20, Total: 12 << 20, BytesPerSec: 1 << 20})
	p(Progress{Repo: "Qwen/Q", File: "m.safetensors", Bytes: 12 << 20, Total: 12 << 20, Finished: true})
	want := "\rdownload Qwen/Q m.safetensors: 3.0 MiB / 12.0 MiB (25%) 1.0 MiB/s" +
		"\rdownload Qwen/Q m.safetensors: 12.0 MiB / 12.0 MiB (100%) done   \n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	p = TextProgress(&b, false, time.Hour)
	p(Progress{Repo: "r/x", File: "f", Bytes: 10, Total: 100})
	p(Progress{Repo: "r/x", File: "f", Bytes: 50, Total: 100})
	p(Progress{Repo: "r/x", File: "f", Bytes: 100, Total: 100, Finished: true})
	if got := strings.Count(b.String(), "\n"); got != 2 {
		t.Fatalf("log mode printed %d lines, want 2 (first and done): %q", got, b.String())
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
