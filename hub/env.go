package hub

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ConfigFromEnv builds the client configuration from the environment that
// huggingface_hub reads, so the cache is shared with Python tools; getenv
// is os.Getenv in the product. Progress and logs go to stderr.
//
//	MACPOOL_MODEL_CACHE  cache folder (overrides the next three)
//	HF_HUB_CACHE         cache folder
//	HF_HOME              cache is $HF_HOME/hub, token file $HF_HOME/token
//	XDG_CACHE_HOME       cache is $XDG_CACHE_HOME/huggingface/hub (default ~/.cache/huggingface/hub)
//	HF_ENDPOINT          Hub URL (default https://huggingface.co), e.g. a mirror
//	HF_TOKEN             access token for gated/private repos (else the
//	                     HF_TOKEN_PATH or $HF_HOME/token file of `hf auth login`)
//	HF_HUB_OFFLINE=1     use only the cache
func ConfigFromEnv(getenv func(string) string, stderr io.Writer) (Config, error) {
	cfg := DefaultConfig()
	if e := getenv("HF_ENDPOINT"); e != "" {
		cfg.Endpoint = e
	}
	hfHome := getenv("HF_HOME")
	if hfHome == "" {
		cacheHome := getenv("XDG_CACHE_HOME")
		if cacheHome == "" {
			home := getenv("HOME")
			if home == "" {
				return cfg, errors.New("model cache: set MACPOOL_MODEL_CACHE or HF_HOME: $HOME is not defined")
			}
			cacheHome = filepath.Join(home, ".cache")
		}
		hfHome = filepath.Join(cacheHome, "huggingface")
	}
	switch {
	case getenv("MACPOOL_MODEL_CACHE") != "":
		cfg.CacheDir = getenv("MACPOOL_MODEL_CACHE")
	case getenv("HF_HUB_CACHE") != "":
		cfg.CacheDir = getenv("HF_HUB_CACHE")
	default:
		cfg.CacheDir = filepath.Join(hfHome, "hub")
	}
	cfg.Token = getenv("HF_TOKEN")
	if cfg.Token == "" {
		cfg.Token = getenv("HUGGING_FACE_HUB_TOKEN")
	}
	if cfg.Token == "" {
		path := getenv("HF_TOKEN_PATH")
		if path == "" {
			path = filepath.Join(hfHome, "token")
		}
		if b, err := os.ReadFile(path); err == nil {
			cfg.Token = strings.TrimSpace(string(b))
		}
	}
	switch strings.ToLower(getenv("HF_HUB_OFFLINE")) {
	case "1", "true", "yes", "on":
		cfg.Offline = true
	}
	cfg.Progress = TextProgress(stderr, isTerminal(stderr), 10*time.Second)
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	return cfg, cfg.Validate()
}

// isTerminal reports whether w is a character device (a terminal), where a
// progress line can be redrawn in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Resolver returns a function that downloads ref (ConfigFromEnv's hub,
// made anew each time so the environment is read then) and reports its
// progress: a worker's source of placed Hugging Face models.
func Resolver(getenv func(string) string, stderr io.Writer) func(ctx context.Context, ref string, progress func(bytes, total int64)) (string, error) {
	return func(ctx context.Context, ref string, progress func(bytes, total int64)) (string, error) {
		hc, err := ConfigFromEnv(getenv, stderr)
		if err != nil {
			return "", err
		}
		hc.Progress = func(p Progress) { progress(p.Bytes, p.Total) }
		h, err := New(hc)
		if err != nil {
			return "", err
		}
		return h.Resolve(ctx, ref)
	}
}
