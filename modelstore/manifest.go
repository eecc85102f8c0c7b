// Package modelstore moves model folders between the machines of a cluster:
// a Manifest describes a model's files (sizes, SHA-256 of every file and of
// every fixed-size chunk), a Server lets peers read a node's models by chunk
// over HTTP, and a Fetcher downloads a model from several peers at once,
// verifying every chunk, re-fetching bad ones from another peer, resuming
// after a restart, and renaming the finished folder into place atomically.
//
// A model is fetched from its source (Hugging Face or a local path) once per
// cluster; every other node pulls it from the peers that already have it.
package modelstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// DefaultChunkSize is the unit of transfer and verification (16 MiB).
const DefaultChunkSize = 16 << 20

// manifestVersion is the version of the manifest format.
const manifestVersion = 1

// Sentinel errors.
var (
	// ErrChecksum: data does not match its SHA-256 in the manifest or the
	// source's hash (a Hugging Face LFS blob name).
	ErrChecksum = errors.New("sha-256 mismatch")
	// ErrUnknownModel: the server does not hold the model.
	ErrUnknownModel = errors.New("unknown model")
	// ErrBadManifest: a manifest violates its invariants.
	ErrBadManifest = errors.New("bad manifest")
	// ErrNoSpace: the destination's disk has not enough room for the model.
	ErrNoSpace = errors.New("not enough disk space")
)

// File is one file of a model.
type File struct {
	Path   string   `json:"path"`   // slash-separated, relative to the model root
	Size   int64    `json:"size"`   // bytes
	SHA256 string   `json:"sha256"` // hex SHA-256 of the whole file
	Chunks []string `json:"chunks"` // hex SHA-256 of each ChunkSize piece; the last may be shorter
}

// Manifest lists a model's files. Chunk i of a file covers the bytes
// [i*ChunkSize, min((i+1)*ChunkSize, Size)).
type Manifest struct {
	Version   int   `json:"version"`
	ChunkSize int64 `json:"chunk_size"`
	// Single is set when the model is one file (a .gguf) rather than a
	// folder: the model's path is then the folder joined with Files[0].Path.
	Single bool   `json:"single,omitempty"`
	Files  []File `json:"files"`
}

// Size is the total size of the model's files in bytes.
func (m *Manifest) Size() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Digest identifies the model's content: the SHA-256 over the sorted
// (path, file SHA-256) pairs. It does not depend on the chunk size, so
// manifests of the same files built by different nodes agree.
func (m *Manifest) Digest() string {
	h := sha256.New()
	files := slices.Clone(m.Files)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%d\x00%s\n", f.Path, f.Size, f.SHA256)
	}
	if m.Single {
		h.Write([]byte("single\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// chunkCount is the number of chunks of a file of size bytes.
func chunkCount(size, chunk int64) int {
	if size <= 0 {
		return 0
	}
	return int((size + chunk - 1) / chunk)
}

// ChunkRange returns the byte offset and length of chunk i of f.
func (m *Manifest) ChunkRange(f File, i int) (off, n int64) {
	off = int64(i) * m.ChunkSize
	n = min(m.ChunkSize, f.Size-off)
	return off, n
}

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate checks the invariants a fetcher relies on: safe unique relative
// paths, chunk lists that match the sizes, well-formed hashes. A manifest
// from a peer is outside input.
func (m *Manifest) Validate() error {
	if m.Version != manifestVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrBadManifest, m.Version, manifestVersion)
	}
	if m.ChunkSize < 1<<10 || m.ChunkSize > 1<<30 {
		return fmt.Errorf("%w: chunk size %d must be in [1 KiB, 1 GiB]", ErrBadManifest, m.ChunkSize)
	}
	if len(m.Files) == 0 {
		return fmt.Errorf("%w: no files", ErrBadManifest)
	}
	if m.Single && len(m.Files) != 1 {
		return fmt.Errorf("%w: single-file model with %d files", ErrBadManifest, len(m.Files))
	}
	seen := map[string]bool{}
	for _, f := range m.Files {
		if !safePath(f.Path) {
			return fmt.Errorf("%w: unsafe file path %q", ErrBadManifest, f.Path)
		}
		if seen[f.Path] {
			return fmt.Errorf("%w: file %q listed twice", ErrBadManifest, f.Path)
		}
		seen[f.Path] = true
		if f.Size < 0 {
			return fmt.Errorf("%w: file %q has negative size %d", ErrBadManifest, f.Path, f.Size)
		}
		if !hexSHA256.MatchString(f.SHA256) {
			return fmt.Errorf("%w: file %q sha256 %q is not 64 lowercase hex digits", ErrBadManifest, f.Path, f.SHA256)
		}
		if want := chunkCount(f.Size, m.ChunkSize); len(f.Chunks) != want {
			return fmt.Errorf("%w: file %q of %d bytes has %d chunk hashes, want %d", ErrBadManifest, f.Path, f.Size, len(f.Chunks), want)
		}
		for i, c := range f.Chunks {
			if !hexSHA256.MatchString(c) {
				return fmt.Errorf("%w: file %q chunk %d sha256 %q is not 64 lowercase hex digits", ErrBadManifest, f.Path, i, c)
			}
		}
	}
	return nil
}

// safePath accepts clean relative slash paths without "..", hidden
// components (the fetcher's own state files start with a dot) or drive
// letters.
func safePath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.Contains(p, ":") || path.Clean(p) != p {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." || strings.HasPrefix(part, ".") {
			return false
		}
	}
	return true
}

// VerifyChunk checks data against chunk i of f.
func (m *Manifest) VerifyChunk(f File, i int, data []byte) error {
	if i < 0 || i >= len(f.Chunks) {
		return fmt.Errorf("verify %s chunk %d: out of range (%d chunks)", f.Path, i, len(f.Chunks))
	}
	if _, n := m.ChunkRange(f, i); int64(len(data)) != n {
		return fmt.Errorf("verify %s chunk %d: %d bytes, want %d", f.Path, i, len(data), n)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != f.Chunks[i] {
		return fmt.Errorf("verify %s chunk %d: %w: got %s, want %s", f.Path, i, ErrChecksum, got[:12], f.Chunks[i][:12])
	}
	return nil
}

// Build hashes the model at root (a folder, or a single file such as a
// .gguf) into a manifest. Hidden files and folders are skipped; symbolic
// links to files are followed (Hugging Face cache snapshots are links into
// blobs/). A link whose target is named by a 64-hex SHA-256 (an LFS blob of
// the Hugging Face cache) must hash to that name: the source's hash is
// checked, not only recorded.
func Build(ctx context.Context, root string, chunkSize int64) (*Manifest, error) {
	if chunkSize <= 0 {
		chunkSize = DefaultChunkSize
	}
	m := &Manifest{Version: manifestVersion, ChunkSize: chunkSize}
	st, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("build manifest: %w", err)
	}
	var paths []string
	if !st.IsDir() {
		m.Single = true
		paths = []string{filepath.Base(root)}
		root = filepath.Dir(root)
	} else {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == root {
				return nil
			}
			if strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				return nil
			}
			fi, err := os.Stat(p) // follows links
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			paths = append(paths, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("build manifest of %s: %w", root, err)
		}
	}
	slices.Sort(paths)
	for _, rel := range paths {
		if !safePath(rel) {
			return nil, fmt.Errorf("build manifest of %s: file name %q cannot be shared", root, rel)
		}
	}
	// Files (shards) are hashed in parallel, each on up to two cores.
	m.Files = make([]File, len(paths))
	errs := make([]error, len(paths))
	next := make(chan int, len(paths))
	for i := range paths {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(len(paths), max(1, runtime.NumCPU()/2)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, chunkSize)
			for i := range next {
				m.Files[i], errs[i] = hashFile(ctx, filepath.Join(root, filepath.FromSlash(paths[i])), paths[i], buf)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("build manifest of %s: %w", root, err)
	}
	if len(m.Files) == 0 {
		return nil, fmt.Errorf("build manifest of %s: no files", root)
	}
	return m, nil
}

// hashFile hashes one file whole and by chunks of len(buf) bytes.
func hashFile(ctx context.Context, p, rel string, buf []byte) (File, error) {
	fh, err := os.Open(p)
	if err != nil {
		return File{}, err
	}
	defer fh.Close()
	whole := sha256.New()
	out := File{Path: rel}
	for {
		if err := ctx.Err(); err != nil {
			return File{}, err
		}
		n, err := io.ReadFull(fh, buf)
		if n > 0 {
			// The whole-file and the chunk hash of the same bytes on two
			// cores: hashing is most of a build's time.
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); whole.Write(buf[:n]) }()
			s := sha256.Sum256(buf[:n])
			wg.Wait()
			out.Chunks = append(out.Chunks, hex.EncodeToString(s[:]))
			out.Size += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return File{}, fmt.Errorf("read %s: %w", rel, err)
		}
	}
	out.SHA256 = hex.EncodeToString(whole.Sum(nil))
	if out.Chunks == nil {
		out.Chunks = []string{}
	}
	if want := sourceHash(p); want != "" && want != out.SHA256 {
		return File{}, fmt.Errorf("%s: %w: content hashes to %s, the source (blob name) says %s", rel, ErrChecksum, out.SHA256[:12], want[:12])
	}
	return out, nil
}

// sourceHash returns the SHA-256 the source gives for the file at p: the
// Hugging Face cache names LFS blobs by it (snapshots/C/F -> ../../blobs/SHA).
func sourceHash(p string) string {
	t, err := os.Readlink(p)
	if err != nil {
		return ""
	}
	if b := filepath.Base(t); hexSHA256.MatchString(b) {
		return b
	}
	return ""
}
