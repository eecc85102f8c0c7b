package main

import (
	"context"
	"io"
	"os"

	"github.com/macpool/macpool/hub"
)

// Model references: every --model flag goes through resolveModelFlag, so it
// can be a local folder, a local .gguf file or a Hugging Face repo id
// (ORG/NAME[@REVISION][:FILE-or-QUANT], see hub.Ref), with the cache and
// token that the huggingface_hub environment names (hub.ConfigFromEnv).

// resolveModelFlag replaces *model with a local path, downloading the model
// from the Hub into the cache when it names a repo. Progress goes to stderr.
func resolveModelFlag(ctx context.Context, model *string, stderr io.Writer) error {
	if *model == "" || hub.IsLocal(*model) {
		return nil
	}
	cfg, err := hub.ConfigFromEnv(os.Getenv, stderr)
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
