// Package hub fetches models from the Hugging Face Hub into a local cache so
// that a model flag can name a local folder, a local .gguf file or a Hub repo
// id (see Ref for the grammar).
//
// The cache uses huggingface_hub's layout, so it can be shared with Python
// tools (point both at the same folder, e.g. ~/.cache/huggingface/hub):
//
//	CACHE/models--ORG--NAME/blobs/ETAG             file contents (ETAG = sha256 for LFS files, git blob sha1 otherwise)
//	CACHE/models--ORG--NAME/blobs/ETAG.incomplete  a download in progress (resumed with an HTTP Range request)
//	CACHE/models--ORG--NAME/refs/REVISION          the commit a branch or tag pointed at when last resolved
//	CACHE/models--ORG--NAME/snapshots/COMMIT/FILE  relative symlink to ../../blobs/ETAG
//
// A blob is renamed into place only after its size and hash matched, and a
// snapshot entry is linked only to a complete blob, so anything present under
// snapshots/ is complete and verified.
//
// Network use per Resolve: one small API request that maps the revision to a
// commit and lists the files (skipped entirely when the revision is a commit
// whose snapshot is complete), then one GET per missing file. When the Hub
// cannot be reached (connection error, timeout, 5xx) and the cache holds a
// complete snapshot for the revision, Resolve uses it and logs a warning;
// Config.Offline makes that the only mode.
package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Sentinel errors, wrapped with the repo, revision or file they concern.
var (
	// ErrUnauthorized: the Hub answered 401 or 403 (private or gated repo, or
	// a bad token; the Hub also answers 401 for repos that do not exist when
	// no token is sent).
	ErrUnauthorized = errors.New("not authorized")
	// ErrNotFound: the repo, revision or file does not exist.
	ErrNotFound = errors.New("not found")
	// ErrChecksum: a downloaded file's size or hash differs from what the
	// Hub announced. The partial file has been removed.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrNotCached: offline, and the cache has no complete snapshot.
	ErrNotCached = errors.New("not in the cache")
)

// Config configures a Hub client.
type Config struct {
	// CacheDir is the cache root (huggingface_hub's HF_HUB_CACHE). Required.
	CacheDir string
	// Endpoint is the Hub's base URL (HF_ENDPOINT), e.g. a mirror.
	Endpoint string
	// Token is sent as "Authorization: Bearer" to the Endpoint (never to the
	// CDN a download redirects to on another host). Empty for public repos.
	Token string
	// HTTPClient does the requests; nil uses a client with a 30 s response
	// header timeout and no overall timeout (downloads are long).
	HTTPClient *http.Client
	// Progress, when set, is called from the downloading goroutine at the
	// start and end of every file and at most every ProgressInterval between.
	Progress func(Progress)
	// ProgressInterval throttles Progress calls.
	ProgressInterval time.Duration
	// Offline uses only the cache (HF_HUB_OFFLINE=1).
	Offline bool
	// Retries is how many times a failed download is resumed before giving up.
	Retries int
	// StallTimeout aborts and resumes a download that received no byte for
	// this long.
	StallTimeout time.Duration
	// Logger receives warnings (offline fallback, retries); nil discards.
	Logger *slog.Logger
}

// DefaultConfig returns a Config for huggingface.co; CacheDir is left for the
// caller (cmd/macpool derives it from the environment).
func DefaultConfig() Config {
	return Config{
		Endpoint:         "https://huggingface.co",
		ProgressInterval: 250 * time.Millisecond,
		Retries:          5,
		StallTimeout:     60 * time.Second,
	}
}

// Validate checks the configuration; messages name the violated constraint.
func (c Config) Validate() error {
	if c.CacheDir == "" {
		return errors.New("hub cache dir must be set")
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("hub endpoint %q must be an http(s) URL", c.Endpoint)
	}
	if c.ProgressInterval < 0 {
		return fmt.Errorf("hub progress interval %v must not be negative", c.ProgressInterval)
	}
	if c.Retries < 0 {
		return fmt.Errorf("hub retries %d must not be negative", c.Retries)
	}
	if c.StallTimeout <= 0 {
		return fmt.Errorf("hub stall timeout %v must be positive", c.StallTimeout)
	}
	return nil
}

// Hub resolves model references to local paths, downloading as needed.
// It is safe for concurrent use by one process; two processes downloading
// the same file into one cache at the same time is not supported.
type Hub struct {
	cfg     Config
	client  *http.Client
	log     *slog.Logger
	backoff time.Duration // first retry delay, doubled per attempt (tests shorten it)
}

// New returns a Hub for cfg.
func New(cfg Config) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Endpoint = strings.TrimRight(cfg.Endpoint, "/")
	h := &Hub{cfg: cfg, client: cfg.HTTPClient, log: cfg.Logger, backoff: 500 * time.Millisecond}
	if h.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = 30 * time.Second
		h.client = &http.Client{Transport: tr}
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.log = h.log.With("component", "hub")
	return h, nil
}

// IsLocal reports whether model names an existing file or folder; Resolve
// returns such names unchanged.
func IsLocal(model string) bool {
	_, err := os.Stat(model)
	return err == nil
}

// Resolve turns a model reference into a local path: an existing file or
// folder is returned as is; a Hub ref (see Ref) is fetched into the cache and
// the snapshot folder (safetensors) or the .gguf file inside it is returned.
func (h *Hub) Resolve(ctx context.Context, model string) (string, error) {
	if model == "" {
		return "", errors.New("empty model reference")
	}
	if IsLocal(model) {
		return model, nil
	}
	if looksLikePath(model) {
		return "", fmt.Errorf("model %s: no such file or folder", model)
	}
	r, err := ParseRef(model)
	if err != nil {
		return "", fmt.Errorf("%w (and no local file or folder has that name)", err)
	}
	return h.ResolveRef(ctx, r)
}

// looksLikePath reports whether s can only be meant as a local path.
func looksLikePath(s string) bool {
	return filepath.IsAbs(s) || strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") ||
		strings.HasPrefix(s, "~") || s == "." || s == ".." ||
		(strings.HasSuffix(strings.ToLower(s), ".gguf") && !strings.Contains(s, ":"))
}

// ResolveRef fetches what r needs into the cache and returns its local path.
func (h *Hub) ResolveRef(ctx context.Context, r Ref) (string, error) {
	repo := h.repoDir(r.Repo)
	if h.cfg.Offline {
		p, err := h.cached(repo, r)
		if err != nil {
			return "", fmt.Errorf("%s (offline): %w", r, err)
		}
		return p, nil
	}
	if commitPattern.MatchString(r.Revision) {
		if p, err := h.cached(repo, r); err == nil {
			return p, nil
		}
	}
	info, err := h.modelInfo(ctx, r)
	if err != nil {
		if ctx.Err() == nil && isUnreachable(err) {
			p, cerr := h.cached(repo, r)
			if cerr == nil {
				h.log.Warn("hub unreachable, using the cached snapshot", "model", r.String(), "err", err)
				return p, nil
			}
			return "", fmt.Errorf("%w (no complete cached copy to fall back to; %s)", err, OfflineHint)
		}
		return "", err
	}
	return h.fetch(ctx, repo, r, info)
}

// OfflineHint tells how to start without the Hub; it ends the error of a
// model that is neither reachable nor cached.
const OfflineHint = "to start offline, pass a local folder or .gguf file, e.g. a tiny random model: macpool testmodel -out /tmp/tiny && macpool up --model /tmp/tiny"

// unreachableError marks failures to reach the Hub at all (transport errors,
// 5xx): the cases where a cached snapshot is used instead.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

func isUnreachable(err error) bool {
	var u *unreachableError
	return errors.As(err, &u)
}

// apiError turns a non-2xx Hub answer into an error naming what was asked.
// what is "repo X@REV" or "file F of X@REV".
func apiError(resp *http.Response, r Ref, file string, tokenSet bool) error {
	code := resp.Header.Get("X-Error-Code")
	msg := resp.Header.Get("X-Error-Message")
	if msg == "" {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg = strings.TrimSpace(string(b))
	}
	detail := ""
	if msg != "" {
		detail = " (hub says: " + msg + ")"
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		hint := "set HF_TOKEN to a Hugging Face access token that can read it"
		if tokenSet {
			hint = "check that HF_TOKEN is valid and its account can read the repo"
		}
		if code == "GatedRepo" {
			hint = "it is gated: accept its terms on https://huggingface.co/" + r.Repo + " and " + hint
		}
		return fmt.Errorf("repo %s: %w (HTTP %d): the repo is private, gated or does not exist; %s%s",
			r.Repo, ErrUnauthorized, resp.StatusCode, hint, detail)
	case resp.StatusCode == http.StatusNotFound:
		switch {
		case code == "RevisionNotFound":
			return fmt.Errorf("repo %s: revision %q %w%s", r.Repo, r.Revision, ErrNotFound, detail)
		case code == "EntryNotFound" || (file != "" && code != "RepoNotFound"):
			return fmt.Errorf("repo %s@%s: file %s %w%s", r.Repo, r.Revision, file, ErrNotFound, detail)
		}
		return fmt.Errorf("repo %s or its revision %q %w%s", r.Repo, r.Revision, ErrNotFound, detail)
	case resp.StatusCode >= 500:
		return &unreachableError{fmt.Errorf("repo %s: hub error HTTP %d%s", r.Repo, resp.StatusCode, detail)}
	}
	return fmt.Errorf("repo %s: unexpected HTTP %d%s", r.Repo, resp.StatusCode, detail)
}
