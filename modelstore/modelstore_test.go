package modelstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/macpool/macpool/modelstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const chunk = 1 << 10 // 1 KiB chunks keep the tests small

// writeModel writes a folder of random files (nested, one empty, one hidden).
func writeModel(t *testing.T, dir string, seed uint64) map[string][]byte {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	files := map[string][]byte{
		"config.json":              []byte(`{"model_type":"qwen3"}`),
		"model.safetensors":        randBytes(r, 5*chunk+123),
		"sub/shard-2.safetensors":  randBytes(r, 3*chunk),
		"empty.txt":                {},
		"tokenizer/tokenizer.json": randBytes(r, chunk/2),
	}
	for p, b := range files {
		writeFile(t, filepath.Join(dir, p), b)
	}
	writeFile(t, filepath.Join(dir, ".hidden"), []byte("not shared"))
	return files
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestBuildManifest(t *testing.T) {
	dir := t.TempDir()
	files := writeModel(t, dir, 1)
	m, err := modelstore.Build(context.Background(), dir, chunk)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if got, want := len(m.Files), len(files); got != want {
		t.Fatalf("got %d files, want %d (hidden files must be skipped)", got, want)
	}
	var total int64
	for _, f := range m.Files {
		b, ok := files[f.Path]
		if !ok {
			t.Fatalf("unexpected file %q", f.Path)
		}
		if f.Size != int64(len(b)) || f.SHA256 != sha(b) {
			t.Errorf("%s: got size %d sha %s, want %d %s", f.Path, f.Size, f.SHA256[:8], len(b), sha(b)[:8])
		}
		if want := (len(b) + chunk - 1) / chunk; len(f.Chunks) != want {
			t.Errorf("%s: got %d chunks, want %d", f.Path, len(f.Chunks), want)
		}
		for i := range f.Chunks {
			off, n := m.ChunkRange(f, i)
			if err := m.VerifyChunk(f, i, b[off:off+n]); err != nil {
				t.Errorf("VerifyChunk(%s, %d): %v", f.Path, i, err)
			}
		}
		total += f.Size
	}
	if m.Size() != total {
		t.Errorf("Size() = %d, want %d", m.Size(), total)
	}
	// A flipped byte fails verification with ErrChecksum.
	f := m.Files[slices.IndexFunc(m.Files, func(f modelstore.File) bool { return f.Path == "model.safetensors" })]
	b := bytes.Clone(files[f.Path][:chunk])
	b[7] ^= 1
	if err := m.VerifyChunk(f, 0, b); !errors.Is(err, modelstore.ErrChecksum) {
		t.Errorf("VerifyChunk of a corrupted chunk: got %v, want ErrChecksum", err)
	}
	// The digest names the content, not the chunking.
	m2, err := modelstore.Build(context.Background(), dir, 4*chunk)
	if err != nil {
		t.Fatal(err)
	}
	if m.Digest() != m2.Digest() {
		t.Errorf("digest depends on chunk size: %s vs %s", m.Digest(), m2.Digest())
	}
	writeFile(t, filepath.Join(dir, "config.json"), []byte(`{"model_type":"qwen2"}`))
	m3, err := modelstore.Build(context.Background(), dir, chunk)
	if err != nil {
		t.Fatal(err)
	}
	if m3.Digest() == m.Digest() {
		t.Error("digest unchanged after a file changed")
	}
}

func TestBuildManifestSingleFileAndHubBlobs(t *testing.T) {
	dir := t.TempDir()
	data := []byte(strings.Repeat("gguf", 700))
	// Hugging Face cache layout: the snapshot links to a blob named by its sha256.
	blobs := filepath.Join(dir, "blobs")
	writeFile(t, filepath.Join(blobs, sha(data)), data)
	snap := filepath.Join(dir, "snapshots", "abc")
	os.MkdirAll(snap, 0o755)
	if err := os.Symlink(filepath.Join("..", "..", "blobs", sha(data)), filepath.Join(snap, "m-Q4.gguf")); err != nil {
		t.Fatal(err)
	}
	m, err := modelstore.Build(context.Background(), filepath.Join(snap, "m-Q4.gguf"), chunk)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Single || len(m.Files) != 1 || m.Files[0].Path != "m-Q4.gguf" || m.Files[0].SHA256 != sha(data) {
		t.Fatalf("got %+v, want one file m-Q4.gguf", m)
	}
	// A blob whose content does not match its name (the source's hash) is refused.
	bad := bytes.Clone(data)
	bad[0] ^= 1
	writeFile(t, filepath.Join(blobs, sha(data)), bad)
	if _, err := modelstore.Build(context.Background(), snap, chunk); !errors.Is(err, modelstore.ErrChecksum) {
		t.Fatalf("Build with a corrupted hub blob: got %v, want ErrChecksum", err)
	}
}

func TestManifestValidate(t *testing.T) {
	good := func() *modelstore.Manifest {
		return &modelstore.Manifest{Version: 1, ChunkSize: chunk, Files: []modelstore.File{
			{Path: "a/b.bin", Size: chunk + 1, SHA256: sha(nil), Chunks: []string{sha(nil), sha(nil)}},
		}}
	}
	tests := []struct {
		name string
		edit func(m *modelstore.Manifest)
		want string
	}{
		{"ok", func(*modelstore.Manifest) {}, ""},
		{"dotdot", func(m *modelstore.Manifest) { m.Files[0].Path = "../etc/passwd" }, "unsafe file path"},
		{"absolute", func(m *modelstore.Manifest) { m.Files[0].Path = "/etc/passwd" }, "unsafe file path"},
		{"hidden", func(m *modelstore.Manifest) { m.Files[0].Path = ".macpool-fetch.json" }, "unsafe file path"},
		{"unclean", func(m *modelstore.Manifest) { m.Files[0].Path = "a//b" }, "unsafe file path"},
		{"duplicate", func(m *modelstore.Manifest) { m.Files = append(m.Files, m.Files[0]) }, "listed twice"},
		{"chunks", func(m *modelstore.Manifest) { m.Files[0].Chunks = m.Files[0].Chunks[:1] }, "has 1 chunk hashes, want 2"},
		{"hex", func(m *modelstore.Manifest) { m.Files[0].SHA256 = "XYZ" }, "not 64 lowercase hex"},
		{"chunk size", func(m *modelstore.Manifest) { m.ChunkSize = 0 }, "chunk size 0"},
		{"version", func(m *modelstore.Manifest) { m.Version = 9 }, "version 9"},
		{"empty", func(m *modelstore.Manifest) { m.Files = nil }, "no files"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := good()
			tc.edit(m)
			err := m.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, modelstore.ErrBadManifest) {
				t.Fatalf("got %v, want ErrBadManifest containing %q", err, tc.want)
			}
		})
	}
}

// peer serves dir as model name, through wrap (fault injection) if set.
func peer(t *testing.T, name, dir string, secret []byte, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	cfg := modelstore.DefaultServerConfig()
	cfg.ChunkSize = chunk
	cfg.Secret = secret
	s, err := modelstore.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Add(name, dir)
	var h http.Handler = s.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func fetcher(t *testing.T, secret []byte) *modelstore.Fetcher {
	t.Helper()
	cfg := modelstore.DefaultFetcherConfig()
	cfg.RetryWait = 0
	cfg.Secret = secret
	f, err := modelstore.NewFetcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func checkTree(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatalf("read fetched %s: %v", p, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("fetched %s differs from the source", p)
		}
	}
	if _, err := os.Stat(dir + ".partial"); !os.IsNotExist(err) {
		t.Errorf("partial folder left behind: %v", err)
	}
}

func TestFetchFromTwoPeers(t *testing.T) {
	src := t.TempDir()
	files := writeModel(t, src, 2)
	a := peer(t, "org/m", src, nil, nil)
	b := peer(t, "org/m", src, nil, nil)
	var reports []modelstore.Progress
	var mu sync.Mutex
	cfg := modelstore.DefaultFetcherConfig()
	cfg.ProgressInterval = 1 // every chunk
	cfg.Progress = func(p modelstore.Progress) { mu.Lock(); reports = append(reports, p); mu.Unlock() }
	f, err := modelstore.NewFetcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "models", "org--m")
	res, err := f.Fetch(context.Background(), modelstore.Request{Model: "org/m", Peers: []string{a.URL, b.URL}, Dest: dest})
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, dest, files)
	if res.Path != dest || res.Fetched != res.Manifest.Size() || res.BadChunks != 0 {
		t.Errorf("got path %s fetched %d bad %d, want %s %d 0", res.Path, res.Fetched, res.BadChunks, dest, res.Manifest.Size())
	}
	if res.PeerBytes[a.URL] == 0 || res.PeerBytes[b.URL] == 0 {
		t.Errorf("chunks not spread over both peers: %v", res.PeerBytes)
	}
	mu.Lock()
	last := reports[len(reports)-1]
	mu.Unlock()
	if !last.Done || last.Bytes != last.Total || last.Total != res.Manifest.Size() {
		t.Errorf("last progress %+v, want done with %d bytes", last, res.Manifest.Size())
	}
	// The fetched folder's manifest equals the source's, and a second
	// fetch is answered from disk (the peers are gone).
	m, err := modelstore.Build(context.Background(), dest, chunk)
	if err != nil {
		t.Fatal(err)
	}
	if m.Digest() != res.Manifest.Digest() {
		t.Error("fetched folder hashes differently from the source")
	}
	a.Close()
	b.Close()
	res2, err := f.Fetch(context.Background(), modelstore.Request{Model: "org/m", Peers: []string{a.URL}, Dest: dest})
	if err != nil || res2.Fetched != 0 || res2.Manifest.Digest() != m.Digest() {
		t.Fatalf("second fetch: got %+v, %v; want the finished folder without network", res2, err)
	}
}

// corruptOnce flips a byte in the first response for the chunk at offset
// off of file path, counting how often that chunk was asked for.
func corruptOnce(path string, off int64, hits *atomic.Int32) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == modelstore.PathFile && r.URL.Query().Get("path") == path &&
				strings.HasPrefix(r.Header.Get("Range"), "bytes="+strconv.FormatInt(off, 10)+"-") {
				if hits.Add(1) == 1 {
					rec := httptest.NewRecorder()
					next.ServeHTTP(rec, r)
					body := rec.Body.Bytes()
					body[len(body)/2] ^= 0xff
					for k, v := range rec.Header() {
						w.Header()[k] = v
					}
					w.WriteHeader(rec.Code)
					w.Write(body)
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// The test: a model pulled by B from A with a corrupted chunk
// injected is detected and re-fetched.
func TestFetchCorruptChunkRefetched(t *testing.T) {
	for _, tc := range []struct {
		name  string
		peers int
	}{{"same peer after retry", 1}, {"other peer", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			files := writeModel(t, src, 3)
			var hits atomic.Int32
			// Every peer corrupts the first answer for chunk 2 of the weights.
			wrap := corruptOnce("model.safetensors", 2*chunk, &hits)
			var urls []string
			for range tc.peers {
				urls = append(urls, peer(t, "m", src, nil, wrap).URL)
			}
			dest := filepath.Join(t.TempDir(), "m")
			res, err := fetcher(t, nil).Fetch(context.Background(), modelstore.Request{Model: "m", Peers: urls, Dest: dest})
			if err != nil {
				t.Fatal(err)
			}
			checkTree(t, dest, files)
			if res.BadChunks != 1 {
				t.Errorf("got %d bad chunks, want 1", res.BadChunks)
			}
			if got := hits.Load(); got != 2 {
				t.Errorf("corrupted chunk asked %d times, want 2 (bad + re-fetch)", got)
			}
		})
	}
}

func TestFetchGivesUpOnAlwaysCorruptPeer(t *testing.T) {
	src := t.TempDir()
	writeModel(t, src, 4)
	bad := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != modelstore.PathFile {
				next.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			if len(body) > 0 {
				body[0] ^= 1
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(body)
		})
	}
	p := peer(t, "m", src, nil, bad)
	dest := filepath.Join(t.TempDir(), "m")
	_, err := fetcher(t, nil).Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{p.URL}, Dest: dest})
	if err == nil || !(errors.Is(err, modelstore.ErrChecksum) || strings.Contains(err.Error(), "every peer failed")) {
		t.Fatalf("got %v, want a checksum failure", err)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Errorf("dest exists after a failed fetch: %v", err)
	}
}

// An interrupted fetch resumes: chunks verified by the first run are not
// downloaded again, and a chunk damaged on disk meanwhile is.
func TestFetchResume(t *testing.T) {
	src := t.TempDir()
	files := writeModel(t, src, 5)
	var served atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The first peer serves 4 chunks, then the fetch is interrupted.
	stopAfter := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == modelstore.PathFile {
				if served.Add(1) > 4 {
					cancel()
					<-r.Context().Done()
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
	p1 := peer(t, "m", src, nil, stopAfter)
	dest := filepath.Join(t.TempDir(), "m")
	cfg := modelstore.DefaultFetcherConfig()
	cfg.Parallel = 1
	cfg.Shuffle = false // the first chunks in manifest order, one of them damaged below
	f1, _ := modelstore.NewFetcher(cfg)
	if _, err := f1.Fetch(ctx, modelstore.Request{Model: "m", Peers: []string{p1.URL}, Dest: dest}); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted fetch: got %v, want context.Canceled", err)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Fatalf("dest exists after an interrupted fetch: %v", err)
	}
	// Damage one chunk the first run wrote (the first chunk of the first
	// file in manifest order that has data).
	m, _ := modelstore.Build(context.Background(), src, chunk)
	var damaged string
	for _, f := range m.Files {
		if f.Size > 0 {
			damaged = f.Path
			break
		}
	}
	pf := filepath.Join(dest+".partial", damaged)
	b, err := os.ReadFile(pf)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1
	os.WriteFile(pf, b, 0o644)

	var served2 atomic.Int32
	count := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == modelstore.PathFile {
				served2.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}
	p2 := peer(t, "m", src, nil, count)
	res, err := fetcher(t, nil).Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{p2.URL}, Dest: dest})
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, dest, files)
	total := 0
	for _, f := range m.Files {
		total += len(f.Chunks)
	}
	// 4 chunks verified by the first run, one of them damaged: 3 resumed.
	if res.Resumed == 0 || res.Resumed+res.Fetched != m.Size() {
		t.Errorf("resumed %d + fetched %d, want a resumed part and a total of %d", res.Resumed, res.Fetched, m.Size())
	}
	if got, want := int(served2.Load()), total-3; got != want {
		t.Errorf("second run downloaded %d chunks, want %d (total %d - 3 resumed)", got, want, total)
	}
}

func TestServerAuthAndErrors(t *testing.T) {
	src := t.TempDir()
	writeModel(t, src, 6)
	secret := []byte("cluster secret")
	p := peer(t, "m", src, secret, nil)
	dest := filepath.Join(t.TempDir(), "m")
	if _, err := fetcher(t, nil).Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{p.URL}, Dest: dest}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("fetch without the secret: got %v, want 401", err)
	}
	if _, err := fetcher(t, []byte("wrong")).Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{p.URL}, Dest: dest}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("fetch with a wrong secret: got %v, want 401", err)
	}
	f := fetcher(t, secret)
	if _, err := f.Fetch(context.Background(), modelstore.Request{Model: "other", Peers: []string{p.URL}, Dest: dest}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("fetch of an unknown model: got %v, want 404", err)
	}
	for _, q := range []string{"?model=m&path=../../etc/passwd", "?model=m&path=.hidden", "?model=m"} {
		req, _ := http.NewRequest(http.MethodGet, p.URL+modelstore.PathFile+q, nil)
		req.Header.Set("Authorization", "Bearer "+modelstore.Token(secret))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET file%s: got %d, want 404", q, resp.StatusCode)
		}
	}
	if _, err := f.Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{p.URL}, Dest: dest}); err != nil {
		t.Fatalf("fetch with the secret: %v", err)
	}
}

// A peer serving other content than the wanted digest is not used.
func TestFetchDigestPicksPeers(t *testing.T) {
	good, other := t.TempDir(), t.TempDir()
	files := writeModel(t, good, 7)
	writeModel(t, other, 8)
	pg := peer(t, "m", good, nil, nil)
	po := peer(t, "m", other, nil, nil)
	m, _ := modelstore.Build(context.Background(), good, chunk)
	dest := filepath.Join(t.TempDir(), "m")
	res, err := fetcher(t, nil).Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{po.URL, pg.URL}, Dest: dest, Digest: m.Digest()})
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, dest, files)
	if res.PeerBytes[po.URL] != 0 {
		t.Errorf("peer with other content supplied %d bytes", res.PeerBytes[po.URL])
	}
	_, err = fetcher(t, nil).Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{po.URL}, Dest: filepath.Join(t.TempDir(), "x"), Digest: m.Digest()})
	if err == nil || !strings.Contains(err.Error(), "no peer serves digest") {
		t.Fatalf("only a peer with other content: got %v, want no peer serves digest", err)
	}
}

// A disk without room for the model fails the fetch up front.
func TestFetchNoSpace(t *testing.T) {
	src := t.TempDir()
	writeModel(t, src, 9)
	p := peer(t, "m", src, nil, nil)
	if free, err := modelstore.FreeSpace(t.TempDir()); err != nil || free == 0 {
		t.Fatalf("free space of a temp dir: %d, %v", free, err)
	}
	// The probe sees the real partial folder; report 100 bytes free.
	var probed string
	defer modelstore.SetDiskFree(func(dir string) (int64, error) { probed = dir; return 100, nil })()
	dest := filepath.Join(t.TempDir(), "m")
	_, err := fetcher(t, nil).Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{p.URL}, Dest: dest})
	if !errors.Is(err, modelstore.ErrNoSpace) || !strings.Contains(err.Error(), "100 free") {
		t.Fatalf("got %v, want ErrNoSpace with 100 free", err)
	}
	if probed != dest+".partial" {
		t.Errorf("probed %q, want the partial folder", probed)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Errorf("dest exists after a refused fetch: %v", err)
	}
}

// A single-file model (a .gguf) travels as a folder holding that file;
// Result.Path names the file.
func TestFetchSingleFile(t *testing.T) {
	data := randBytes(rand.New(rand.NewPCG(10, 1)), 3*chunk+5)
	src := filepath.Join(t.TempDir(), "qwen3-Q4_K_M.gguf")
	writeFile(t, src, data)
	p := peer(t, "q:Q4_K_M", src, nil, nil)
	dest := filepath.Join(t.TempDir(), "q")
	res, err := fetcher(t, nil).Fetch(context.Background(), modelstore.Request{Model: "q:Q4_K_M", Peers: []string{p.URL}, Dest: dest})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dest, "qwen3-Q4_K_M.gguf"); res.Path != want || !res.Manifest.Single {
		t.Fatalf("path %s single %v, want %s and a single-file manifest", res.Path, res.Manifest.Single, want)
	}
	got, err := os.ReadFile(res.Path)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("fetched file differs (%v)", err)
	}
	m, err := modelstore.LoadManifest(dest)
	if err != nil || modelstore.ModelPath(dest, m) != res.Path {
		t.Fatalf("LoadManifest: %v, path %v", err, m)
	}
}

// partialPeer offers dir's model as a fetch in progress whose verified
// chunks are those have() reports (the files are complete on disk, so a
// served chunk is right only if the server checks the bitmap).
func partialPeer(t *testing.T, name, dir string, have func() map[string]string, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	s, err := modelstore.NewServer(modelstore.ServerConfig{ChunkSize: chunk})
	if err != nil {
		t.Fatal(err)
	}
	m, err := modelstore.Build(context.Background(), dir, chunk)
	if err != nil {
		t.Fatal(err)
	}
	s.AddPartial(name, dir, m, have)
	var h http.Handler = s.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// everyOther marks the even chunks of every file as fetched.
func everyOther(m *modelstore.Manifest) map[string]string {
	out := map[string]string{}
	for _, f := range m.Files {
		b := []byte(strings.Repeat("0", len(f.Chunks)))
		for i := 0; i < len(b); i += 2 {
			b[i] = '1'
		}
		out[f.Path] = string(b)
	}
	return out
}

type statusCount struct {
	mu    sync.Mutex
	codes map[int]int
}

func (c *statusCount) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		if r.URL.Path == modelstore.PathFile {
			c.mu.Lock()
			if c.codes == nil {
				c.codes = map[int]int{}
			}
			c.codes[rec.Code]++
			c.mu.Unlock()
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

// Peers still fetching the model give the chunks they have; the fetcher
// asks them only for those.
func TestFetchSharesWithPartialPeers(t *testing.T) {
	src := t.TempDir()
	files := writeModel(t, src, 11)
	m, _ := modelstore.Build(context.Background(), src, chunk)
	half := everyOther(m)
	var pc statusCount
	complete := peer(t, "m", src, nil, nil)
	partial := partialPeer(t, "m", src, func() map[string]string { return half }, pc.wrap)

	// The peer protocol: a partial model is marked, lists its bitmaps,
	// refuses chunks it lacks and ranges that are not one chunk.
	resp, err := http.Get(partial.URL + modelstore.PathManifest + "?model=m")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get(modelstore.HeaderPartial) == "" {
		t.Error("partial manifest not marked")
	}
	for rng, want := range map[string]int{
		"bytes=0-1023":    http.StatusPartialContent,               // chunk 0: has it
		"bytes=1024-2047": http.StatusRequestedRangeNotSatisfiable, // chunk 1: not yet
		"bytes=0-99":      http.StatusRequestedRangeNotSatisfiable, // not a whole chunk
		"":                http.StatusRequestedRangeNotSatisfiable, // whole file
	} {
		req, _ := http.NewRequest(http.MethodGet, partial.URL+modelstore.PathFile+"?model=m&path=model.safetensors", nil)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("partial peer, Range %q: got %d, want %d", rng, resp.StatusCode, want)
		}
	}
	pc.mu.Lock()
	pc.codes = nil
	pc.mu.Unlock()

	dest := filepath.Join(t.TempDir(), "m")
	res, err := fetcher(t, nil).Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{complete.URL, partial.URL}, Dest: dest})
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, dest, files)
	if res.PeerBytes[partial.URL] == 0 {
		t.Errorf("the partial peer gave nothing: %v", res.PeerBytes)
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.codes[http.StatusRequestedRangeNotSatisfiable] != 0 {
		t.Errorf("asked the partial peer for chunks it lacks: %v", pc.codes)
	}

	// Only peers still fetching: no usable manifest (the worker waits).
	_, err = fetcher(t, nil).Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{partial.URL}, Dest: filepath.Join(t.TempDir(), "x")})
	if err == nil || !strings.Contains(err.Error(), "no usable manifest") || !strings.Contains(err.Error(), "no peer has the complete model yet") {
		t.Fatalf("partial peers only: got %v", err)
	}
}

// When the complete peer fails, chunks come from a peer still fetching as
// it gets them; if it never does, the wait ends with an error.
func TestFetchWaitsForPartialPeer(t *testing.T) {
	src := t.TempDir()
	files := writeModel(t, src, 12)
	m, _ := modelstore.Build(context.Background(), src, chunk)
	failing := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == modelstore.PathFile {
				http.Error(w, "disk on fire", http.StatusInternalServerError)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	complete := peer(t, "m", src, nil, failing)
	var grown atomic.Bool
	full := map[string]string{}
	for _, f := range m.Files {
		full[f.Path] = strings.Repeat("1", len(f.Chunks))
	}
	half := everyOther(m)
	partial := partialPeer(t, "m", src, func() map[string]string {
		if grown.Load() {
			return full
		}
		return half
	}, nil)
	cfg := modelstore.DefaultFetcherConfig()
	cfg.PeerStrikes = 1
	cfg.RetryWait = 0
	f, _ := modelstore.NewFetcher(cfg)
	dest := filepath.Join(t.TempDir(), "m")
	done := make(chan error, 1)
	var res *modelstore.Result
	go func() {
		var err error
		res, err = f.Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{complete.URL, partial.URL}, Dest: dest})
		done <- err
	}()
	// The partial peer gets the rest a moment later.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(dest + ".partial"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	grown.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkTree(t, dest, files)
	if res.PeerBytes[complete.URL] != 0 || res.PeerBytes[partial.URL] != m.Size() {
		t.Errorf("peer bytes %v, want everything from the partial peer", res.PeerBytes)
	}

	// It never gets the rest: the wait is bounded by the chunk timeout.
	grown.Store(false)
	cfg.ChunkTimeout = 300 * time.Millisecond
	f, _ = modelstore.NewFetcher(cfg)
	_, err := f.Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{complete.URL, partial.URL}, Dest: filepath.Join(t.TempDir(), "y")})
	if err == nil || !strings.Contains(err.Error(), "no peer had it within") {
		t.Fatalf("got %v, want no peer had it within the timeout", err)
	}
}

// A peer that lacked the model when the fetch began (it started fetching
// the same model a moment later) joins the fetch and supplies chunks.
func TestFetchDiscoversLatePeer(t *testing.T) {
	src := t.TempDir()
	files := writeModel(t, src, 13)
	m, _ := modelstore.Build(context.Background(), src, chunk)
	full := map[string]string{}
	for _, f := range m.Files {
		full[f.Path] = strings.Repeat("1", len(f.Chunks))
	}
	// The complete peer is slow: 100 ms per chunk.
	slow := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == modelstore.PathFile {
				select {
				case <-time.After(100 * time.Millisecond):
				case <-r.Context().Done():
				}
			}
			next.ServeHTTP(w, r)
		})
	}
	complete := peer(t, "m", src, nil, slow)
	lateStore, err := modelstore.NewServer(modelstore.ServerConfig{ChunkSize: chunk})
	if err != nil {
		t.Fatal(err)
	}
	late := httptest.NewServer(lateStore.Handler()) // holds nothing yet: 404
	defer late.Close()

	cfg := modelstore.DefaultFetcherConfig()
	cfg.Parallel = 1
	cfg.PeerRefresh = 50 * time.Millisecond
	var once sync.Once
	cfg.Progress = func(modelstore.Progress) {
		// After the first chunk, the late peer starts offering the model.
		once.Do(func() { lateStore.AddPartial("m", src, m, func() map[string]string { return full }) })
	}
	cfg.ProgressInterval = 1
	f, _ := modelstore.NewFetcher(cfg)
	dest := filepath.Join(t.TempDir(), "m")
	res, err := f.Fetch(context.Background(), modelstore.Request{Model: "m", Peers: []string{complete.URL, late.URL}, Dest: dest})
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, dest, files)
	if res.PeerBytes[late.URL] == 0 {
		t.Errorf("the late peer gave nothing: %v", res.PeerBytes)
	}
}
