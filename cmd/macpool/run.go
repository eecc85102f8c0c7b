package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/macpool/macpool/engine"
	_ "github.com/macpool/macpool/engine/cpu"  // registers the "cpu" backend
	_ "github.com/macpool/macpool/engine/qwen" // registers the Qwen model types
	"github.com/macpool/macpool/engine/sample"
	"github.com/macpool/macpool/engine/tokenizer"
)

func init() {
	register("run", "generate a continuation of a prompt with a local model", runRun)
}

// runRun loads --model, prefills the prompt (--prompt text through the
// model's tokenizer, or --tokens ids) and streams the continuation to
// stdout as text, or as space-separated ids on one line (--output ids).
// Generation stops after --max-tokens or at an EOS id of the config,
// generation_config or tokenizer.
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlagSet("run", stderr)
	model := fs.String("model", "", "model folder (config.json, *.safetensors; tokenizer.json for text)")
	prompt := fs.String("prompt", "", "prompt text (encoded with the model's tokenizer)")
	tokens := fs.String("tokens", "", "prompt token ids, comma-separated (instead of --prompt)")
	maxTokens := fs.Int("max-tokens", 256, "most tokens to generate")
	temperature := fs.Float64("temperature", 0, "sampling temperature (0 = greedy)")
	topP := fs.Float64("top-p", 0, "nucleus sampling probability mass (0 = off)")
	seed := fs.Uint64("seed", 0, "random seed (the draw at step i depends only on seed and i)")
	output := fs.String("output", "text", "output format: text or ids")
	threads := fs.Int("threads", 0, "CPU threads (0 = every core)")
	quantize := fs.String("quantize", "", "quantize float weight matrices at load: q8 or q4")
	exact := fs.Bool("exact", false, "multiply quantized weights with float32 activations (slower, exact)")
	backend := backendFlag(fs)
	defer func() { err = reportEmulatedHost(*backend, stderr, err) }()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := given(fs)
	switch {
	case *model == "":
		return fmt.Errorf("%w: --model is required", errUsage)
	case set["prompt"] == set["tokens"]:
		return fmt.Errorf("%w: give exactly one of --prompt and --tokens", errUsage)
	case *maxTokens < 1:
		return fmt.Errorf("%w: --max-tokens %d must be at least 1", errUsage, *maxTokens)
	case *output != "text" && *output != "ids":
		return fmt.Errorf("%w: --output %q must be text or ids", errUsage, *output)
	case *threads < 0:
		return fmt.Errorf("%w: --threads %d must not be negative", errUsage, *threads)
	}
	if err := resolveModelFlag(ctx, model, stderr); err != nil { // hub: repo id → cache path
		return err
	}
	sampler, err := sample.New(sample.Params{Temperature: float32(*temperature), TopP: float32(*topP), Seed: *seed})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var ids []int
	if set["tokens"] {
		if ids, err = parseIDs(*tokens); err != nil {
			return fmt.Errorf("%w: --tokens: %v", errUsage, err)
		}
	}
	var tok *tokenizer.Tokenizer
	if set["prompt"] || *output == "text" {
		if tok, err = loadTokenizer(*model); err != nil {
			if set["prompt"] {
				return fmt.Errorf("--prompt needs a tokenizer: %w", err)
			}
			return fmt.Errorf("--output text needs a tokenizer (or use --output ids): %w", err)
		}
	}
	if set["prompt"] {
		if ids = tok.Encode(*prompt); len(ids) == 0 {
			return fmt.Errorf("%w: --prompt encodes to no tokens", errUsage)
		}
	}

	m, err := engine.Load(*model, engine.Options{Backend: *backend, Threads: *threads, Quantize: *quantize, ExactMatMul: *exact})
	if err != nil {
		return err
	}
	defer m.Close()
	if err := checkVocab(ids, m.VocabSize()); err != nil {
		return err
	}
	stop := m.EOSTokenIDs()
	if tok != nil {
		stop = append(stop, tok.EOSTokenIDs()...)
	}
	isStop := func(id int) bool {
		for _, s := range stop {
			if s == id {
				return true
			}
		}
		return false
	}

	var emit func(int) error
	var stream *tokenizer.Stream
	if *output == "text" {
		stream = tok.NewStream()
		emit = func(id int) error {
			if isStop(id) {
				return nil
			}
			_, err := io.WriteString(stdout, stream.Add(id))
			return err
		}
	} else {
		first := true
		emit = func(id int) error {
			sep := " "
			if first {
				sep, first = "", false
			}
			_, err := fmt.Fprintf(stdout, "%s%d", sep, id)
			return err
		}
	}
	start := time.Now()
	var firstAt time.Time
	timed := func(id int) error {
		if firstAt.IsZero() {
			firstAt = time.Now()
		}
		return emit(id)
	}
	var gs engine.Sampler = sampler
	if *temperature == 0 {
		gs = engine.Greedy{} // the same argmax; on a GPU backend it runs there (metal)
	}
	gen, genErr := m.Generate(ctx, ids, *maxTokens, gs, stop, timed)
	defer func() {
		if len(gen) == 0 {
			return
		}
		end := time.Now()
		pre, dec := firstAt.Sub(start).Seconds(), end.Sub(firstAt).Seconds()
		fmt.Fprintf(stderr, "prompt: %d tokens in %.2fs (%.1f tok/s); generated: %d tokens, %.1f tok/s after the first\n",
			len(ids), pre, float64(len(ids))/pre, len(gen), float64(len(gen)-1)/max(dec, 1e-9))
	}()
	if stream != nil {
		if _, err := io.WriteString(stdout, stream.Flush()); err != nil && genErr == nil {
			genErr = err
		}
	}
	if _, err := io.WriteString(stdout, "\n"); err != nil && genErr == nil {
		genErr = err
	}
	return genErr
}

// loadTokenizer loads dir/tokenizer.json, reporting a missing file plainly.
func loadTokenizer(dir string) (*tokenizer.Tokenizer, error) {
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no tokenizer.json in %s", dir)
	}
	return tokenizer.Load(dir)
}

// given reports which flags were set on the command line.
func given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// parseIDs parses "1,2, 3" into token ids.
func parseIDs(s string) ([]int, error) {
	var ids []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		id, err := strconv.Atoi(f)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("%q is not a token id", f)
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no token ids")
	}
	return ids, nil
}

// checkVocab names the first id the model has no embedding for.
func checkVocab(ids []int, vocab int) error {
	for i, id := range ids {
		if id >= vocab {
			return fmt.Errorf("%w: token id %d (position %d) is out of range: the model's vocabulary has %d ids", errUsage, id, i, vocab)
		}
	}
	return nil
}
