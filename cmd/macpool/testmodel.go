package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/macpool/macpool/engine/testmodel"
)

func init() {
	register("testmodel", "write a tiny random-weight Qwen3 checkpoint (real tokenizer and template) for demos and tests", runTestModel)
}

func runTestModel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("testmodel", stderr)
	out := fs.String("out", "", "folder to write (created if needed)")
	seed := fs.Uint64("seed", 1, "weight seed")
	hidden := fs.Int("hidden", 32, "hidden size")
	layers := fs.Int("layers", 2, "layers")
	tokDir := fs.String("tokenizer", "", "folder with tokenizer.json and tokenizer_config.json (default: the repository's testdata/tokenizers/qwen3)")
	maxPos := fs.Int("max-positions", 4096, "max_position_embeddings (context length) of the model")
	eosBias := fs.Float64("eos-bias", 0, "scale the <|im_end|> embedding by this factor so that the random model ends its turns within a few tokens (agent demos and tests; 0: off)")
	tmpl := fs.String("template", "", "chat template file to use instead of the tokenizer's (e.g. testdata/templates/Qwen3.5-4B.jinja)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("%w: -out is required", errUsage)
	}
	opts := testmodel.Options{Seed: *seed, HiddenSize: *hidden, Layers: *layers, TokenizerDir: *tokDir, MaxPositions: *maxPos, EOSBias: *eosBias}
	if *tmpl != "" {
		b, err := os.ReadFile(*tmpl)
		if err != nil {
			return err
		}
		opts.ChatTemplate = string(b)
	}
	if err := testmodel.Write(*out, opts); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", *out)
	return nil
}
