package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine/sample"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/runner"
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
	model := fs.String("model", "", "model folder (config.json, *.safetensors; tokenizer.json for text) or .gguf file")
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
	// The sampler is the runner's; built here only to report bad
	// parameters as usage errors before the model loads.
	if _, err := sample.New(sample.Params{Temperature: float32(*temperature), TopP: float32(*topP), Seed: *seed}); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var ids []int
	if set["tokens"] {
		var err error
		if ids, err = parseIDs(*tokens); err != nil {
			return fmt.Errorf("%w: --tokens: %v", errUsage, err)
		}
	}
	rc := runner.DefaultConfig()
	rc.ModelDir, rc.Backend, rc.Threads, rc.Quantize, rc.ExactMatMul = *model, *backend, *threads, *quantize, *exact
	rc.MaxSeqs, rc.AllowNoEOS = 1, true
	rc.TokensOnly = !set["prompt"] && *output == "ids"
	r, err := runner.New(rc, nil)
	switch {
	case errors.Is(err, runner.ErrNoTokenizer) && set["prompt"]:
		return fmt.Errorf("--prompt needs a tokenizer: %w", err)
	case errors.Is(err, runner.ErrNoTokenizer):
		return fmt.Errorf("--output text needs a tokenizer (or use --output ids): %w", err)
	case err != nil:
		return err
	}
	defer r.Close()
	if set["prompt"] {
		if ids = r.Tokenizer().Encode(*prompt); len(ids) == 0 {
			return fmt.Errorf("%w: --prompt encodes to no tokens", errUsage)
		}
	}
	if err := checkVocab(ids, r.Model().VocabSize()); err != nil {
		return err
	}
	return generate(ctx, r, completion(ids, *maxTokens, *temperature, *topP, *seed), *output == "text", stdout, stderr)
}

// completion is the job of macpool run. Every sampling parameter is set,
// so that the checkpoint's generation_config defaults, which a server
// applies to what a request leaves out, do not change run's sampling.
func completion(ids []int, maxTokens int, temperature, topP float64, seed uint64) *job.Job {
	zero, topK, s := 0.0, 0, int64(seed)
	return &job.Job{ID: "run", Kind: job.KindCompletion, Completion: &openai.CompletionRequest{
		Prompt: openai.Prompt{Tokens: [][]int{ids}}, MaxTokens: &maxTokens, Temperature: &temperature, TopP: &topP,
		TopK: &topK, MinP: &zero, RepetitionPenalty: &zero, Seed: &s}}
}

// generate runs j on r, streaming the text of the events (asText) or the
// ids reported with them (space-separated) to stdout, then a newline; the
// timing line goes to stderr. The runner reports the end-of-sequence id
// with the last event and never its text, so ids include it and text
// does not.
func generate(ctx context.Context, r *runner.Runner, j *job.Job, asText bool, stdout, stderr io.Writer) error {
	start := time.Now()
	var firstAt time.Time
	generated, first := 0, true
	genErr := r.GenerateResume(ctx, j, nil, func(ev *job.Event, toks []int) error {
		if len(toks) > 0 && firstAt.IsZero() {
			firstAt = time.Now()
		}
		generated += len(toks)
		if asText {
			_, err := io.WriteString(stdout, ev.Text)
			return err
		}
		for _, id := range toks {
			sep := " "
			if first {
				sep, first = "", false
			}
			if _, err := fmt.Fprintf(stdout, "%s%d", sep, id); err != nil {
				return err
			}
		}
		return nil
	})
	if _, err := io.WriteString(stdout, "\n"); err != nil && genErr == nil {
		genErr = err
	}
	if generated > 0 {
		n := len(j.Completion.Prompt.Tokens[0])
		pre, dec := firstAt.Sub(start).Seconds(), time.Since(firstAt).Seconds()
		fmt.Fprintf(stderr, "prompt: %d tokens in %.2fs (%.1f tok/s); generated: %d tokens, %.1f tok/s after the first\n",
			n, pre, float64(n)/pre, generated, float64(generated-1)/max(dec, 1e-9))
	}
	return genErr
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
