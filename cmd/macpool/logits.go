package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/macpool/macpool/engine"
)

func init() {
	register("logits", "write the logits of every position of a token sequence (float32 LE)", runLogits)
}

// runLogits runs one forward pass of --tokens through --model and writes the
// logits of every position to --out as float32 little-endian, row-major
// [len(tokens) × vocab] (the layout of the fixtures' ref_logits.f32).
func runLogits(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlagSet("logits", stderr)
	model := fs.String("model", "", "model folder")
	tokens := fs.String("tokens", "", "token ids, comma-separated")
	out := fs.String("out", "", "output file")
	threads := fs.Int("threads", 0, "CPU threads (0 = every core)")
	quantize := fs.String("quantize", "", "quantize float weight matrices at load: q8 or q4")
	exact := fs.Bool("exact", false, "multiply quantized weights with float32 activations (slower, exact)")
	backend := backendFlag(fs)
	defer func() { err = reportEmulatedHost(*backend, stderr, err) }()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *model == "":
		return fmt.Errorf("%w: --model is required", errUsage)
	case *tokens == "":
		return fmt.Errorf("%w: --tokens is required", errUsage)
	case *out == "":
		return fmt.Errorf("%w: --out is required", errUsage)
	case *threads < 0:
		return fmt.Errorf("%w: --threads %d must not be negative", errUsage, *threads)
	}
	if err := resolveModelFlag(ctx, model, stderr); err != nil { // hub: repo id → cache path
		return err
	}
	ids, err := parseIDs(*tokens)
	if err != nil {
		return fmt.Errorf("%w: --tokens: %v", errUsage, err)
	}
	m, err := engine.Load(*model, engine.Options{Backend: *backend, Threads: *threads, Quantize: *quantize, ExactMatMul: *exact})
	if err != nil {
		return err
	}
	defer m.Close()
	if err := checkVocab(ids, m.VocabSize()); err != nil {
		return err
	}
	c, err := m.NewCache()
	if err != nil {
		return err
	}
	defer c.Free()
	logits, err := m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: ids, AllLogits: true}})
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := errors.Join(binary.Write(w, binary.LittleEndian, logits[0]), w.Flush()); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", *out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	fmt.Fprintf(stderr, "wrote %d × %d float32 logits to %s\n", len(ids), m.VocabSize(), *out)
	return nil
}
