package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var etagPattern = regexp.MustCompile(`^([0-9a-f]{64}|[0-9a-f]{40})$`)

// normEtag strips the weak marker and quotes of an ETag header value.
func normEtag(v string) string {
	v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
	return strings.ToLower(strings.Trim(v, `"`))
}

// retryable marks download failures worth resuming (dropped connection,
// stall, 5xx, a range answer that does not fit).
type retryable struct{ err error }

func (e *retryable) Error() string { return e.err.Error() }
func (e *retryable) Unwrap() error { return e.err }

var errStalled = errors.New("no data received within the stall timeout")

// newHasher returns the hash the etag is made of: sha256 of the contents for
// LFS files, git's blob sha1 ("blob SIZE\x00" + contents) for the rest.
func newHasher(w want) hash.Hash {
	if len(w.etag) == 64 {
		return sha256.New()
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", w.size)
	return h
}

// head asks for a file's etag and size without downloading it (the metadata
// of the first answer, before any redirect to a CDN).
func (h *Hub) head(ctx context.Context, r Ref, file, u string, w want) (want, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return w, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	h.authorize(req)
	c := *h.client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return w, ctx.Err()
		}
		return w, fmt.Errorf("repo %s: head %s: %w", r.Repo, file, err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return w, apiError(resp, r, file, h.cfg.Token != "")
	}
	w.etag = normEtag(resp.Header.Get("X-Linked-Etag"))
	if w.etag == "" {
		w.etag = normEtag(resp.Header.Get("ETag"))
	}
	size := resp.Header.Get("X-Linked-Size")
	if size == "" && resp.StatusCode == http.StatusOK {
		size = resp.Header.Get("Content-Length")
	}
	if n, err := strconv.ParseInt(size, 10, 64); err == nil && w.size < 0 {
		w.size = n
	}
	if len(w.etag) == 40 && w.size < 0 {
		return w, fmt.Errorf("repo %s: file %s: the hub gave no size to verify its git hash", r.Repo, file)
	}
	return w, nil
}

// download fetches u into blob, resuming BLOB.incomplete, retrying dropped
// transfers, and renaming into place only after size and hash match.
func (h *Hub) download(ctx context.Context, r Ref, file, u, blob string, w want) error {
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return err
	}
	part := blob + ".incomplete"
	var err error
	for attempt := 0; attempt <= h.cfg.Retries; attempt++ {
		if attempt > 0 {
			delay := min(h.backoff<<(attempt-1), 10*time.Second)
			h.log.Warn("download interrupted, resuming", "repo", r.Repo, "file", file, "attempt", attempt, "in", delay, "err", err)
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("download %s of %s: %w", file, r.Repo, ctx.Err())
			case <-t.C:
			}
		}
		err = h.downloadOnce(ctx, r, file, u, part, w)
		if err == nil {
			if err := os.Rename(part, blob); err != nil {
				return fmt.Errorf("download %s of %s: %w", file, r.Repo, err)
			}
			return nil
		}
		if ctx.Err() != nil {
			// The partial file stays for the next run to resume.
			return fmt.Errorf("download %s of %s: %w", file, r.Repo, ctx.Err())
		}
		var re *retryable
		if !errors.As(err, &re) {
			return err
		}
	}
	return fmt.Errorf("download %s of %s: gave up after %d attempts: %w", file, r.Repo, h.cfg.Retries+1, err)
}

// downloadOnce does one GET, appending to part from its current size.
func (h *Hub) downloadOnce(ctx context.Context, r Ref, file, u, part string, w want) error {
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	off := st.Size()
	if w.size >= 0 && off > w.size {
		off = 0
	}
	hs := newHasher(w)
	if off > 0 {
		if _, err := io.CopyN(hs, f, off); err != nil {
			return fmt.Errorf("read %s: %w", part, err)
		}
	}
	restart := func() error {
		off = 0
		hs = newHasher(w)
		return f.Truncate(0)
	}
	if off == 0 {
		if err := f.Truncate(0); err != nil {
			return err
		}
	}
	if w.size < 0 || off < w.size {
		reqCtx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept-Encoding", "identity")
		if off > 0 {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-", off))
		}
		h.authorize(req)
		c := *h.client
		var first *http.Response // the hub's own answer, before redirects
		c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			if first == nil {
				first = req.Response
			}
			return nil
		}
		resp, err := c.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &retryable{fmt.Errorf("download %s of %s: %w", file, r.Repo, err)}
		}
		defer resp.Body.Close()
		if first == nil {
			first = resp
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			if err := restart(); err != nil {
				return err
			}
		case resp.StatusCode == http.StatusPartialContent:
			if start := rangeStart(resp.Header.Get("Content-Range")); start != off {
				_ = restart()
				return &retryable{fmt.Errorf("download %s of %s: asked for bytes from %d, got Content-Range %q", file, r.Repo, off, resp.Header.Get("Content-Range"))}
			}
		case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
			_ = restart()
			return &retryable{fmt.Errorf("download %s of %s: range from %d not satisfiable", file, r.Repo, off)}
		case resp.StatusCode >= 500:
			err := apiError(resp, r, file, h.cfg.Token != "")
			return &retryable{err}
		default:
			return apiError(resp, r, file, h.cfg.Token != "")
		}
		if got := normEtag(first.Header.Get("X-Linked-Etag")); got != "" && got != w.etag {
			// The contents are checked against the listing's hash below;
			// a different header alone is not proof of a bad file.
			h.log.Warn("etag header differs from the file listing", "repo", r.Repo, "file", file, "listing", w.etag, "header", got)
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return err
		}
		watchdog := time.AfterFunc(h.cfg.StallTimeout, func() { cancel(errStalled) })
		defer watchdog.Stop()
		body := &watchedReader{r: resp.Body, reset: func() { watchdog.Reset(h.cfg.StallTimeout) }}
		pr := h.newProgress(r.Repo, file, off, w.size)
		n, err := io.Copy(io.MultiWriter(f, hs, pr), body)
		off += n
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if cause := context.Cause(reqCtx); errors.Is(cause, errStalled) {
				err = cause
			}
			return &retryable{fmt.Errorf("download %s of %s: after %d bytes: %w", file, r.Repo, off, err)}
		}
		if w.size >= 0 && off < w.size {
			return &retryable{fmt.Errorf("download %s of %s: body ended at %d of %d bytes", file, r.Repo, off, w.size)}
		}
		pr.finish()
	}
	if w.size >= 0 && off != w.size {
		f.Close()
		os.Remove(part)
		return fmt.Errorf("download %s of %s: %w: got %d bytes, want %d", file, r.Repo, ErrChecksum, off, w.size)
	}
	if got := hex.EncodeToString(hs.Sum(nil)); got != w.etag {
		f.Close()
		os.Remove(part)
		kind := "sha256"
		if len(w.etag) == 40 {
			kind = "git blob sha1"
		}
		return fmt.Errorf("download %s of %s: %w: %s %s, want %s (partial file removed; run again)", file, r.Repo, ErrChecksum, kind, got, w.etag)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// rangeStart parses the first byte of "bytes START-END/TOTAL" (-1 if bad).
func rangeStart(v string) int64 {
	v, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return -1
	}
	s, _, ok := strings.Cut(v, "-")
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// watchedReader calls reset after every read that returned data (the stall
// watchdog).
type watchedReader struct {
	r     io.Reader
	reset func()
}

func (w *watchedReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.reset()
	}
	return n, err
}
