package modelstore_test

import (
	"context"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/macpool/macpool/modelstore"
)

// benchModel writes a folder with one file of size bytes.
func benchModel(b *testing.B, size int) string {
	b.Helper()
	dir := b.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, size)
	for i := 0; i+8 <= len(buf); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			buf[i+k] = byte(v >> (8 * k))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), buf, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// BenchmarkBuild: hashing speed of a manifest build (MB/s).
func BenchmarkBuild(b *testing.B) {
	const size = 256 << 20
	dir := benchModel(b, size)
	b.SetBytes(size)
	for b.Loop() {
		if _, err := modelstore.Build(context.Background(), dir, modelstore.DefaultChunkSize); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFetchLoopback: a 256 MiB model from two peers on loopback,
// 16 MiB chunks, 4 in flight (MB/s, including verification, the final
// whole-file hash and the rename).
func BenchmarkFetchLoopback(b *testing.B) {
	const size = 256 << 20
	dir := benchModel(b, size)
	var peers []string
	for range 2 {
		s, err := modelstore.NewServer(modelstore.DefaultServerConfig())
		if err != nil {
			b.Fatal(err)
		}
		s.Add("m", dir)
		if _, _, err := s.Manifest(context.Background(), "m"); err != nil {
			b.Fatal(err)
		}
		srv := newHTTPServer(b, s)
		peers = append(peers, srv)
	}
	f, err := modelstore.NewFetcher(modelstore.DefaultFetcherConfig())
	if err != nil {
		b.Fatal(err)
	}
	out := b.TempDir()
	b.SetBytes(size)
	i := 0
	for b.Loop() {
		i++
		dest := filepath.Join(out, strconv.Itoa(i))
		if _, err := f.Fetch(context.Background(), modelstore.Request{Model: "m", Peers: peers, Dest: dest}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(dest)
		b.StartTimer()
	}
}

func newHTTPServer(b *testing.B, s *modelstore.Server) string {
	srv := httptest.NewServer(s.Handler())
	b.Cleanup(srv.Close)
	return srv.URL
}
