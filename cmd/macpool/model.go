package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/macpool/macpool/hub"
)

// Model references: every --model flag goes through resolveModelFlag, so it
// can be a local folder, a local .gguf file or a Hugging Face repo id
// (ORG/NAME[@REVISION][:FILE-or-QUANT], see hub.Ref). The environment is the
// one huggingface_hub reads, so the cache is shared with Python tools:
//
//	MACPOOL_MODEL_CACHE  cache folder (overrides the next three)
//	HF_HUB_CACHE         cache folder
//	HF_HOME              cache is $HF_HOME/hub, token file $HF_HOME/token
//	XDG_CACHE_HOME       cache is $XDG_CACHE_HOME/huggingface/hub (default ~/.cache/huggingface/hub)
//	HF_ENDPOINT          Hub URL (default https://huggingface.co), e.g. a mirror
//	HF_TOKEN             access token for gated/private repos (else the
//	                     HF_TOKEN_PATH or $HF_HOME/token file of `hf auth login`)
//	HF_HUB_OFFLINE=1     use only the cache

// resolveModelFlag replaces *model with a local path, downloading the model
// from the Hub into the cache when it names a repo. Progress goes to stderr.
func resolveModelFlag(ctx context.Context, model *string, stderr io.Writer) error {
	if *model == "" || hub.IsLocal(*model) {
		return nil
	}
	cfg, err := hubConfig(os.Getenv, stderr)
	if err != nil {
		return err
	}
	h, err := hub.New(cfg)
	if err != nil {
		return err
	}
	p, err := h.Resolve(ctx, *model)
	if err != nil {
		return err
	}
	*model = p
	return nil
}

// resolveWorkerModel resolves the worker's -model (unless the backend loads
// no model) and, for a Hub ref, names the served model after the ref
// ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B-GGUF:Q4_K_M") unless -model-name is set.
func resolveWorkerModel(ctx context.Context, f *workerFlags, stderr io.Writer) error {
	if f.backend == "test" || f.model == "" || hub.IsLocal(f.model) {
		return nil
	}
	if r, err := hub.ParseRef(f.model); err == nil && f.modelName == "" {
		f.modelName = r.Repo
		if r.File != "" {
			f.modelName += ":" + r.File
		}
	}
	return resolveModelFlag(ctx, &f.model, stderr)
}

// hubConfig builds the hub client configuration from the environment.
func hubConfig(getenv func(string) string, stderr io.Writer) (hub.Config, error) {
	cfg := hub.DefaultConfig()
	if e := getenv("HF_ENDPOINT"); e != "" {
		cfg.Endpoint = e
	}
	hfHome := getenv("HF_HOME")
	if hfHome == "" {
		cacheHome := getenv("XDG_CACHE_HOME")
		if cacheHome == "" {
			home := getenv("HOME")
			if home == "" {
				var err error
				if home, err = os.UserHomeDir(); err != nil {
					return cfg, fmt.Errorf("model cache: set MACPOOL_MODEL_CACHE or HF_HOME: %w", err)
				}
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
	cfg.Progress = hub.TextProgress(stderr, isTerminal(stderr), 10*time.Second)
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
