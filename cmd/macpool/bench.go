package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/cpu"
	"github.com/macpool/macpool/engine/cpu/kernels"
	_ "github.com/macpool/macpool/engine/qwen"
	"github.com/macpool/macpool/engine/synth"
	"github.com/macpool/macpool/engine/tensor"
)

func init() {
	register("bench", "measure prefill and decode speed of a model (or a random model of a real shape)", runBench)
}

// benchResult is the --json output.
type benchResult struct {
	Model        string  `json:"model"`
	Quant        string  `json:"quant"`
	Threads      int     `json:"threads"`
	Impl         string  `json:"impl"`
	Layers       int     `json:"layers"`
	PromptTokens int     `json:"prompt_tokens"`
	GenTokens    int     `json:"gen_tokens"`
	PrefillTokS  float64 `json:"prefill_tok_s"`
	DecodeTokS   float64 `json:"decode_tok_s"`
	// DecodeMedianTokS is 1 / the median time of one decoded token over all
	// runs: on a shared machine it is far less disturbed by other processes'
	// time slices than the mean.
	DecodeMedianTokS float64 `json:"decode_median_tok_s"`
	// DecodeAllocs is the heap allocations per decoded token (whole process).
	DecodeAllocs  float64 `json:"decode_allocs_per_token"`
	BandwidthGBs  float64 `json:"bandwidth_gb_s"`
	BytesPerToken float64 `json:"bytes_per_token"`
	LoadSeconds   float64 `json:"load_s"`
	LoadAvg       string  `json:"load_avg,omitempty"`
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", stderr)
	model := fs.String("model", "", "model folder or .gguf file")
	synthetic := fs.String("synthetic", "", "random-weight model of a real shape: "+strings.Join(synth.Shapes(), ", "))
	quant := fs.String("quant", "q8_0", "with --synthetic: bf16, f32, q8_0, q4_0, mlx4, mlx8")
	quantize := fs.String("quantize", "", "quantize float matrices at load: q8 or q4")
	layers := fs.Int("layers", 0, "with --synthetic: keep only the first N layers (big shapes in little memory)")
	promptTokens := fs.Int("prompt-tokens", 512, "prompt length (prefill, one batch)")
	genTokens := fs.Int("gen-tokens", 128, "tokens decoded one at a time after the prompt")
	threads := fs.Int("threads", 0, "CPU threads (0 = every core)")
	repeat := fs.Int("repeat", 1, "runs; the best of each figure is reported")
	exact := fs.Bool("exact", false, "float32 activations for quantized weights (see engine.Options.ExactMatMul)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	concurrency := fs.Int("concurrency", 0, "concurrent streams through the serving scheduler (0: one stream on the bare model)")
	cachedPrefix := fs.Int("cached-prefix", 0, "with --concurrency: prompt tokens shared with a warm-up request (prefix cache)")
	seed := fs.Uint64("seed", 1, "seed of the synthetic weights and prompt")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed runs to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case (*model == "") == (*synthetic == ""):
		return fmt.Errorf("%w: give exactly one of --model and --synthetic", errUsage)
	case *promptTokens < 1 || *genTokens < 1:
		return fmt.Errorf("%w: --prompt-tokens %d and --gen-tokens %d must be at least 1", errUsage, *promptTokens, *genTokens)
	case *concurrency < 0:
		return fmt.Errorf("%w: --concurrency %d must not be negative", errUsage, *concurrency)
	case *threads < 0 || *repeat < 1:
		return fmt.Errorf("%w: --threads %d must not be negative, --repeat %d at least 1", errUsage, *threads, *repeat)
	}
	if err := resolveModelFlag(ctx, model, stderr); err != nil { // hub: repo id → cache path
		return err
	}
	cfg := cpu.DefaultConfig()
	if *threads > 0 {
		cfg.Threads = *threads
	}
	cfg.ExactMatMul = *exact
	switch *quantize {
	case "":
	case "q8", "q8_0":
		cfg.Quantize = tensor.Q8_0
	case "q4", "q4_0":
		cfg.Quantize = tensor.Q4_0
	default:
		return fmt.Errorf("%w: --quantize %q: want q8 or q4", errUsage, *quantize)
	}

	// The source: a synthetic model or a checkpoint, wrapped to record the
	// bytes of every tensor the architecture binds.
	var src engine.Source
	res := benchResult{Threads: cfg.Threads, Impl: kernels.Impl(), PromptTokens: *promptTokens, GenTokens: *genTokens}
	if *synthetic != "" {
		q, err := synth.ParseQuant(*quant)
		if err != nil {
			return fmt.Errorf("%w: --quant: %v", errUsage, err)
		}
		c, err := synth.Config(*synthetic)
		if err != nil {
			return fmt.Errorf("%w: --synthetic: %v", errUsage, err)
		}
		sm, err := synth.New(c, q, *seed, *layers)
		if err != nil {
			return err
		}
		src, res.Model, res.Quant = sm, *synthetic, string(q)
	} else {
		ck, err := checkpoint.Open(*model)
		if err != nil {
			return err
		}
		defer ck.Close()
		src, res.Model, res.Quant = ck, *model, "stored"
	}
	if *quantize != "" {
		res.Quant += "→" + cfg.Quantize.String()
	}
	rec := &recordingSource{Source: src, quantize: cfg.Quantize, bytes: map[string]int{}}
	be, err := cpu.New(cfg)
	if err != nil {
		return err
	}
	defer be.Close()
	start := time.Now()
	m, err := engine.New(be, rec)
	if err != nil {
		return err
	}
	defer m.Close()
	res.LoadSeconds = time.Since(start).Seconds()
	c := m.Config()
	res.Layers = c.NumHiddenLayers
	if !*asJSON {
		fmt.Fprintf(stderr, "%s (%s, %d layers): built in %.1fs, %s kernels, %d threads\n",
			res.Model, res.Quant, c.NumHiddenLayers, res.LoadSeconds, res.Impl, cfg.Threads)
	}
	if *concurrency > 0 {
		return runBenchConcurrent(ctx, m, res, *concurrency, *cachedPrefix, *seed, *asJSON, stdout)
	}

	r := rand.New(rand.NewPCG(*seed, 2))
	prompt := make([]int, *promptTokens)
	for i := range prompt {
		prompt[i] = r.IntN(m.VocabSize())
	}
	// Warm-up (page in mapped weights, size scratch buffers).
	if err := benchRun(ctx, m, prompt[:min(16, len(prompt))], 2, nil); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var tokens []time.Duration
	for range *repeat {
		var t benchTimes
		if err := benchRun(ctx, m, prompt, *genTokens, &t); err != nil {
			return err
		}
		res.PrefillTokS = max(res.PrefillTokS, float64(*promptTokens)/t.prefill.Seconds())
		res.DecodeTokS = max(res.DecodeTokS, float64(*genTokens)/t.decode.Seconds())
		tokens = append(tokens, t.tokens...)
		res.DecodeAllocs = float64(t.allocs) / float64(*genTokens)
	}
	slices.Sort(tokens)
	res.DecodeMedianTokS = 1 / tokens[len(tokens)/2].Seconds()
	res.BytesPerToken = rec.bytesPerToken(c, *promptTokens+*genTokens/2)
	res.BandwidthGBs = res.BytesPerToken * res.DecodeTokS / 1e9
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "prefill  %8.1f tok/s  (%d-token prompt)\n", res.PrefillTokS, res.PromptTokens)
	fmt.Fprintf(stdout, "decode   %8.1f tok/s  (%d tokens after the prompt; median token %.1f tok/s)\n", res.DecodeTokS, res.GenTokens, res.DecodeMedianTokS)
	fmt.Fprintf(stdout, "allocs   %8.0f per decoded token\n", res.DecodeAllocs)
	fmt.Fprintf(stdout, "memory   %8.1f GB/s   (%.3f GB of weights + KV cache per decoded token)\n", res.BandwidthGBs, res.BytesPerToken/1e9)
	if res.LoadAvg != "" {
		fmt.Fprintf(stdout, "load average during the run: %s\n", res.LoadAvg)
	}
	return nil
}

type benchTimes struct {
	prefill, decode time.Duration
	tokens          []time.Duration // each decoded token
	allocs          uint64          // heap allocations while decoding
}

// benchRun prefills prompt into a fresh cache and decodes gen tokens
// greedily, timing both phases.
func benchRun(ctx context.Context, m *engine.Model, prompt []int, gen int, t *benchTimes) error {
	c, err := m.NewCache()
	if err != nil {
		return err
	}
	defer c.Free()
	start := time.Now()
	out, err := m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: prompt}})
	if err != nil {
		return err
	}
	var ms runtime.MemStats
	if t != nil {
		runtime.ReadMemStats(&ms)
		t.allocs = ms.Mallocs
	}
	mid := time.Now()
	last := mid
	for range gen {
		tok := engine.Argmax(out[0])
		if out, err = m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: []int{tok}}}); err != nil {
			return err
		}
		if t != nil {
			now := time.Now()
			t.tokens = append(t.tokens, now.Sub(last))
			last = now
		}
	}
	if t != nil {
		t.prefill, t.decode = mid.Sub(start), time.Since(mid)
		runtime.ReadMemStats(&ms)
		t.allocs = ms.Mallocs - t.allocs
	}
	return nil
}

// recordingSource notes the stored size of every tensor bound, as the
// backend will hold it (after --quantize).
type recordingSource struct {
	engine.Source
	quantize tensor.Format
	bytes    map[string]int
}

func (s *recordingSource) Tensor(name string) (*tensor.Host, error) {
	h, err := s.Source.Tensor(name)
	if err != nil {
		return nil, err
	}
	n := len(h.Data)
	for _, a := range []*tensor.Host{h.Scales, h.Biases} {
		if a != nil {
			n += len(a.Data)
		}
	}
	switch h.Format {
	case tensor.F32, tensor.F16, tensor.BF16:
		if s.quantize != 0 && len(h.Shape) == 2 && h.Rows() > 1 && h.Cols()%32 == 0 {
			per := 34
			if s.quantize == tensor.Q4_0 {
				per = 18
			}
			n = h.Numel() / 32 * per
		}
	}
	s.bytes[name] = n
	return h, nil
}

// bytesPerToken estimates the bytes a decoded token reads: every matrix
// once (MoE experts: the top-k share), one embedding row, the KV cache of
// the full-attention layers at context ctxLen (float32) and the recurrent
// state of the linear-attention layers.
func (s *recordingSource) bytesPerToken(c *engine.Config, ctxLen int) float64 {
	var total float64
	for name, n := range s.bytes {
		switch {
		case name == "model.embed_tokens.weight" && !(c.TieWordEmbeddings && !s.Has("lm_head.weight")):
			total += float64(n) / float64(c.VocabSize)
		case strings.Contains(name, ".mlp.experts.") && c.NumExperts > 0:
			total += float64(n) * float64(c.NumExpertsPerTok) / float64(c.NumExperts)
		default:
			total += float64(n)
		}
	}
	hd := c.HeadDim
	if hd == 0 && c.NumAttentionHeads > 0 {
		hd = c.HiddenSize / c.NumAttentionHeads
	}
	kvh := c.NumKeyValueHeads
	if kvh == 0 {
		kvh = c.NumAttentionHeads
	}
	for i := range c.NumHiddenLayers {
		if c.IsLinearAttention(i) {
			total += float64(4 * c.LinearNumValueHeads * c.LinearKeyHeadDim * c.LinearValueHeadDim)
		} else {
			total += float64(2 * kvh * hd * 4 * ctxLen)
		}
	}
	return total
}
