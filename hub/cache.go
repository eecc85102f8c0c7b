package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// repoDir is the cache folder of one model repo.
func (h *Hub) repoDir(repo string) string {
	return filepath.Join(h.cfg.CacheDir, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

// sibling is one file of the API's file listing (GET .../revision/REV?blobs=true).
type sibling struct {
	RFilename string `json:"rfilename"`
	Size      *int64 `json:"size"`
	BlobID    string `json:"blobId"` // git blob sha1
	LFS       *struct {
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"lfs"`
}

// want is what a downloaded file must match: its size (-1 = unknown) and its
// etag (64 hex: sha256 of an LFS file; 40 hex: git blob sha1; "" = unknown).
type want struct {
	size int64
	etag string
}

func (s sibling) want() want {
	w := want{size: -1, etag: s.BlobID}
	if s.Size != nil {
		w.size = *s.Size
	}
	if s.LFS != nil {
		w.etag = s.LFS.SHA256
		w.size = s.LFS.Size
	}
	w.etag = strings.ToLower(w.etag)
	return w
}

type modelInfo struct {
	SHA      string    `json:"sha"`
	Siblings []sibling `json:"siblings"`
}

// modelInfo asks the Hub which commit r.Revision is and which files it has.
func (h *Hub) modelInfo(ctx context.Context, r Ref) (*modelInfo, error) {
	u := h.cfg.Endpoint + "/api/models/" + r.Repo + "/revision/" + url.PathEscape(r.Revision) + "?blobs=true"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	h.authorize(req)
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("repo %s: %w", r.Repo, ctx.Err())
		}
		return nil, &unreachableError{fmt.Errorf("repo %s: reach the hub: %w", r.Repo, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, apiError(resp, r, "", h.cfg.Token != "")
	}
	var info modelInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("repo %s: %w", r.Repo, ctx.Err())
		}
		return nil, fmt.Errorf("repo %s: parse the hub's file listing: %w", r.Repo, err)
	}
	if !commitPattern.MatchString(info.SHA) {
		return nil, fmt.Errorf("repo %s: the hub's file listing has no commit sha (got %q)", r.Repo, info.SHA)
	}
	return &info, nil
}

func (h *Hub) authorize(req *http.Request) {
	if h.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.cfg.Token)
	}
}

// fileURL is where a file of a commit is downloaded from.
func (h *Hub) fileURL(r Ref, commit, file string) string {
	segs := strings.Split(file, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return h.cfg.Endpoint + "/" + r.Repo + "/resolve/" + commit + "/" + strings.Join(segs, "/")
}

// fetch downloads what r needs from the listed commit and returns the path.
func (h *Hub) fetch(ctx context.Context, repo string, r Ref, info *modelInfo) (string, error) {
	commit := info.SHA
	if r.Revision != commit {
		if err := writeFileAtomic(filepath.Join(repo, "refs", filepath.FromSlash(r.Revision)), []byte(commit)); err != nil {
			return "", fmt.Errorf("repo %s: %w", r.Repo, err)
		}
	}
	byName := make(map[string]sibling, len(info.Siblings))
	names := make([]string, 0, len(info.Siblings))
	for _, s := range info.Siblings {
		if !safeRelPath(s.RFilename) {
			continue // never write outside the snapshot
		}
		byName[s.RFilename] = s
		names = append(names, s.RFilename)
	}
	sel, err := selectFiles(r, names)
	if err != nil {
		return "", err
	}
	snap := filepath.Join(repo, "snapshots", commit)
	get := func(files []string) error {
		for _, f := range files {
			s, ok := byName[f]
			if !ok {
				return fmt.Errorf("repo %s@%s: file %s (named in %s) %w", r.Repo, r.Revision, f, safetensorsIndex, ErrNotFound)
			}
			if err := h.ensure(ctx, r, commit, repo, snap, f, s.want()); err != nil {
				return err
			}
		}
		return nil
	}
	if err := get(sel.files()); err != nil {
		return "", err
	}
	if sel.index != "" {
		data, err := os.ReadFile(filepath.Join(snap, sel.index))
		if err != nil {
			return "", err
		}
		shards, err := shardsFromIndex(data)
		if err != nil {
			return "", fmt.Errorf("repo %s@%s: %w", r.Repo, r.Revision, err)
		}
		if err := get(shards); err != nil {
			return "", err
		}
	}
	if sel.gguf != "" {
		return filepath.Join(snap, filepath.FromSlash(sel.gguf)), nil
	}
	return snap, nil
}

// ensure makes snap/file a link to its verified blob, downloading the blob
// unless the cache has it.
func (h *Hub) ensure(ctx context.Context, r Ref, commit, repo, snap, file string, w want) error {
	dst := filepath.Join(snap, filepath.FromSlash(file))
	if st, err := os.Stat(dst); err == nil && st.Mode().IsRegular() && (w.size < 0 || st.Size() == w.size) {
		return nil
	}
	u := h.fileURL(r, commit, file)
	if w.etag == "" {
		// Mirrors may list files without blob ids: ask the file's headers.
		var err error
		if w, err = h.head(ctx, r, file, u, w); err != nil {
			return err
		}
	}
	if !etagPattern.MatchString(w.etag) {
		return fmt.Errorf("repo %s@%s: file %s: the hub gave no usable etag (%q)", r.Repo, r.Revision, file, w.etag)
	}
	blob := filepath.Join(repo, "blobs", w.etag)
	if !blobOK(blob, w) {
		if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
			return err
		}
		// Lock files live where huggingface_hub keeps its own: CACHE/.locks/REPO/ETAG.lock.
		lock := filepath.Join(h.cfg.CacheDir, ".locks", filepath.Base(repo), w.etag+".lock")
		if err := os.MkdirAll(filepath.Dir(lock), 0o755); err != nil {
			return err
		}
		unlock, err := lockFile(ctx, lock)
		if err != nil {
			return fmt.Errorf("repo %s: lock %s: %w", r.Repo, file, err)
		}
		// Another process may have finished it while we waited.
		if !blobOK(blob, w) {
			err = h.download(ctx, r, file, u, blob, w)
		}
		unlock()
		if err != nil {
			return err
		}
	}
	if err := linkBlob(blob, dst); err != nil {
		return fmt.Errorf("repo %s: link %s: %w", r.Repo, file, err)
	}
	return nil
}

// blobOK reports whether the blob is present with the expected size.
func blobOK(blob string, w want) bool {
	st, err := os.Stat(blob)
	return err == nil && (w.size < 0 || st.Size() == w.size)
}

// cached finds a complete snapshot for r without the network.
func (h *Hub) cached(repo string, r Ref) (string, error) {
	commit := r.Revision
	if !commitPattern.MatchString(commit) {
		b, err := os.ReadFile(filepath.Join(repo, "refs", filepath.FromSlash(r.Revision)))
		if err != nil {
			return "", fmt.Errorf("revision %q of %s %w", r.Revision, r.Repo, ErrNotCached)
		}
		commit = strings.TrimSpace(string(b))
	}
	snap := filepath.Join(repo, "snapshots", commit)
	var names []string
	_ = filepath.WalkDir(snap, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, tmpLinkSuffix) {
			return nil
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() { // skips dangling links
			rel, _ := filepath.Rel(snap, p)
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if len(names) == 0 {
		return "", fmt.Errorf("snapshot %s of %s %w", commit, r.Repo, ErrNotCached)
	}
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	sel, err := selectFiles(r, names)
	if err != nil {
		return "", err
	}
	if sel.index != "" {
		data, err := os.ReadFile(filepath.Join(snap, sel.index))
		if err != nil {
			return "", err
		}
		if sel.shards, err = shardsFromIndex(data); err != nil {
			return "", err
		}
	}
	for _, f := range sel.files() {
		if !have[f] {
			return "", fmt.Errorf("snapshot %s of %s lacks %s: %w", commit, r.Repo, f, ErrNotCached)
		}
	}
	if sel.gguf != "" {
		return filepath.Join(snap, filepath.FromSlash(sel.gguf)), nil
	}
	return snap, nil
}

const tmpLinkSuffix = ".tmp-link"

// linkBlob points dst at blob with a relative symlink (a hard link where
// symlinks are not allowed), replacing dst atomically.
func linkBlob(blob, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(dst), blob)
	if err != nil {
		return err
	}
	tmp := dst + tmpLinkSuffix
	_ = os.Remove(tmp)
	if err := os.Symlink(rel, tmp); err != nil {
		if err := os.Link(blob, tmp); err != nil {
			return err
		}
	}
	return os.Rename(tmp, dst)
}

// writeFileAtomic writes data to p through a temporary file and a rename.
func writeFileAtomic(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), p)
	}
	if werr != nil {
		os.Remove(f.Name())
	}
	return werr
}
