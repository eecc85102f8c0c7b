// Package bench measures prefill and decode speed of a model, or of a
// random-weight model of a real shape (macpool bench): one stream on the bare
// model, or concurrent streams through the serving scheduler
// (runner.Bench), with the load time, resident memory and the bytes read
// per decoded token. It can also write a synthetic model as a GGUF file or an
// MLX folder. The caller resolves Hugging Face references to paths first.
package bench

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/macpool/macpool/runner"
)

// ErrConfig marks a Config that Validate (or Run, for the shape and the
// formats) refuses: a usage error of macpool bench.
var ErrConfig = errors.New("bad bench configuration")

// Config is one bench run; the fields mirror macpool bench's flags.
type Config struct {
	Model         string // model folder or .gguf file
	Synthetic     string // or a random-weight model of this shape (synth.Shapes)
	Quant         string // with Synthetic: bf16, f32, q8_0, q4_0, mlx4, mlx8
	Quantize      string // quantize float matrices at load: "", q8 or q4
	Layers        int    // with Synthetic: keep only the first N layers
	PromptTokens  int
	GenTokens     int
	Threads       int // CPU threads (0: every core)
	Repeat        int // runs; the best of each figure is reported
	ExactMatMul   bool
	JSON          bool   // print one JSON object
	Backend       string // as runner.BackendHelp
	Concurrency   int    // concurrent streams through the scheduler (0: one stream on the bare model)
	CachedPrefix  int    // with Concurrency: prompt tokens shared with a warm-up request
	Seed          uint64
	CPUProfile    string         // write a CPU profile of the timed runs here
	KVF16         bool           // half-precision KV cache (the paged one with Concurrency, else the contiguous one)
	KVCache       runner.KVCache // f16, f32 or q8_0: overrides KVF16 when set
	PreciseHybrid bool           // engine.Options.PreciseHybrid
	LlamaBench    bool           // decode from an empty cache, as llama-bench's tg test
	WriteGGUF     string         // with Synthetic: write the model to this .gguf file and stop
	WriteMLX      string         // with Synthetic: write the model as an MLX folder and stop
}

// DefaultConfig is macpool bench's defaults.
func DefaultConfig() Config {
	return Config{Quant: "q8_0", PromptTokens: 512, GenTokens: 128, Repeat: 1, Backend: "auto", Seed: 1, KVF16: true}
}

// Validate checks the constraints between the fields.
func (c Config) Validate() error {
	switch {
	case (c.Model == "") == (c.Synthetic == ""):
		return fmt.Errorf("%w: give exactly one of --model and --synthetic", ErrConfig)
	case c.PromptTokens < 1 || c.GenTokens < 1:
		return fmt.Errorf("%w: --prompt-tokens %d and --gen-tokens %d must be at least 1", ErrConfig, c.PromptTokens, c.GenTokens)
	case c.Concurrency < 0:
		return fmt.Errorf("%w: --concurrency %d must not be negative", ErrConfig, c.Concurrency)
	case c.Threads < 0 || c.Repeat < 1:
		return fmt.Errorf("%w: --threads %d must not be negative, --repeat %d at least 1", ErrConfig, c.Threads, c.Repeat)
	}
	if _, err := quantizeFormat(c.Quantize); err != nil {
		return err
	}
	return nil
}

func quantizeFormat(q string) (tensor.Format, error) {
	switch q {
	case "":
		return 0, nil
	case "q8", "q8_0":
		return tensor.Q8_0, nil
	case "q4", "q4_0":
		return tensor.Q4_0, nil
	}
	return 0, fmt.Errorf("%w: --quantize %q: want q8 or q4", ErrConfig, q)
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
	// LoadCPUSeconds is the CPU time (all threads, user + system) of the
	// load: on a shared machine a steadier figure than LoadSeconds.
	LoadCPUSeconds float64 `json:"load_cpu_s,omitempty"`
	// EmptyContext: decode was measured from an empty cache (--llama-bench).
	EmptyContext bool `json:"decode_from_empty_context,omitempty"`
	// Resident memory after loading (Linux /proc/self/status, bytes): all,
	// anonymous (heap: packed/quantized copies, KV), file-backed (mapped
	// checkpoint pages); FileBytes is the size of --model when it is a file.
	RSSBytes     int64 `json:"rss_bytes,omitempty"`
	RSSAnonBytes int64 `json:"rss_anon_bytes,omitempty"`
	RSSFileBytes int64 `json:"rss_file_bytes,omitempty"`
	// RSSLoadBytes is the growth of the resident size from before the
	// model was built to after (the model's share of RSSBytes).
	RSSLoadBytes int64  `json:"rss_load_bytes,omitempty"`
	FileBytes    int64  `json:"file_bytes,omitempty"`
	LoadAvg      string `json:"load_avg,omitempty"`

	// Backend figures of a GPU backend (--backend metal, metal-emulated).
	*benchBackend
}

// Run measures as cfg says and prints the figures (text or JSON) on
// stdout, progress on stderr.
func Run(ctx context.Context, bc Config, stdout, stderr io.Writer) error {
	if err := bc.Validate(); err != nil {
		return err
	}
	cfg := cpu.DefaultConfig()
	if bc.Threads > 0 {
		cfg.Threads = bc.Threads
	}
	cfg.ExactMatMul = bc.ExactMatMul
	cfg.KVF16 = bc.KVF16
	bc.KVCache.Apply(&cfg.KVF16, &cfg.KVQ8)
	cfg.PreciseHybrid = bc.PreciseHybrid
	cfg.Quantize, _ = quantizeFormat(bc.Quantize)

	// The source: a synthetic model or a checkpoint, wrapped to record the
	// bytes of every tensor the architecture binds.
	var src engine.Source
	res := benchResult{Threads: cfg.Threads, Impl: kernels.Impl(), PromptTokens: bc.PromptTokens, GenTokens: bc.GenTokens}
	fullLayers := 0 // the synthetic shape's depth
	if bc.Synthetic != "" {
		q, err := synth.ParseQuant(bc.Quant)
		if err != nil {
			return fmt.Errorf("%w: --quant: %v", ErrConfig, err)
		}
		c, err := synth.Config(bc.Synthetic)
		if err != nil {
			return fmt.Errorf("%w: --synthetic: %v", ErrConfig, err)
		}
		fullLayers = c.NumHiddenLayers // before --layers cuts it
		sm, err := synth.New(c, q, bc.Seed, bc.Layers)
		if err != nil {
			return err
		}
		src, res.Model, res.Quant = sm, bc.Synthetic, string(q)
		if bc.WriteGGUF != "" {
			return writeSyntheticGGUF(sm, bc.WriteGGUF, stderr)
		}
		if bc.WriteMLX != "" {
			return writeSyntheticMLX(sm, bc.Synthetic, bc.Layers, bc.WriteMLX, stderr)
		}
	} else {
		ck, err := checkpoint.Open(bc.Model)
		if err != nil {
			return err
		}
		defer ck.Close()
		src, res.Model, res.Quant = ck, bc.Model, "stored"
		if st, err := os.Stat(bc.Model); err == nil && st.Mode().IsRegular() {
			res.FileBytes = st.Size()
		}
	}
	if bc.Quantize != "" {
		res.Quant += "→" + cfg.Quantize.String()
	}
	rec := &recordingSource{Source: src, quantize: cfg.Quantize, bytes: map[string]int{}}
	be, err := newBenchBackend(bc.Backend, cfg, bc.Quantize)
	if err != nil {
		return err
	}
	defer be.Close()
	if be.Name() != "cpu" {
		res.Impl = be.Name() // the CPU kernels are not what runs
	}
	rssBefore, _, _ := residentBytes()
	cpuBefore := processCPU()
	start := time.Now()
	m, err := engine.New(be, rec)
	if err != nil {
		return err
	}
	defer m.Close()
	res.LoadSeconds = time.Since(start).Seconds()
	res.LoadCPUSeconds = processCPU() - cpuBefore
	res.RSSBytes, res.RSSAnonBytes, res.RSSFileBytes = residentBytes()
	res.RSSLoadBytes = res.RSSBytes - rssBefore
	c := m.Config()
	res.Layers = c.NumHiddenLayers
	if !bc.JSON {
		fmt.Fprintf(stderr, "%s (%s, %d layers): built in %.2fs (%.2fs CPU), %s kernels, %d threads\n",
			res.Model, res.Quant, c.NumHiddenLayers, res.LoadSeconds, res.LoadCPUSeconds, res.Impl, cfg.Threads)
		if res.RSSBytes > 0 {
			fmt.Fprintf(stderr, "resident %.3f GB after load (anonymous %.3f, file-backed %.3f; %.3f GB added by the load)", float64(res.RSSBytes)/1e9,
				float64(res.RSSAnonBytes)/1e9, float64(res.RSSFileBytes)/1e9, float64(res.RSSLoadBytes)/1e9)
			if res.FileBytes > 0 {
				fmt.Fprintf(stderr, "; file %.3f GB, added/file %.3f", float64(res.FileBytes)/1e9, float64(res.RSSLoadBytes)/float64(res.FileBytes))
			}
			fmt.Fprintln(stderr)
		}
	}
	if bc.CPUProfile != "" {
		f, err := os.Create(bc.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if bc.Concurrency > 0 {
		return runBenchConcurrent(ctx, m, res, bc.Concurrency, bc.CachedPrefix, bc.Seed, bc.JSON, stdout)
	}

	r := rand.New(rand.NewPCG(bc.Seed, 2))
	prompt := make([]int, bc.PromptTokens)
	for i := range prompt {
		prompt[i] = r.IntN(m.VocabSize())
	}
	// Warm-up (page in mapped weights, size scratch buffers).
	if err := benchRun(ctx, m, prompt[:min(16, len(prompt))], 2, false, nil); err != nil {
		return err
	}
	res.EmptyContext = bc.LlamaBench
	var tokens []time.Duration
	for range bc.Repeat {
		var t benchTimes
		if err := benchRun(ctx, m, prompt, bc.GenTokens, bc.LlamaBench, &t); err != nil {
			return err
		}
		res.PrefillTokS = max(res.PrefillTokS, float64(bc.PromptTokens)/t.prefill.Seconds())
		res.DecodeTokS = max(res.DecodeTokS, float64(bc.GenTokens)/t.decode.Seconds())
		tokens = append(tokens, t.tokens...)
		res.DecodeAllocs = float64(t.allocs) / float64(bc.GenTokens)
	}
	slices.Sort(tokens)
	res.DecodeMedianTokS = 1 / tokens[len(tokens)/2].Seconds()
	ctxLen := bc.PromptTokens + bc.GenTokens/2
	if bc.LlamaBench {
		ctxLen = bc.GenTokens / 2
	}
	res.BytesPerToken = rec.bytesPerToken(c, ctxLen)
	res.BandwidthGBs = res.BytesPerToken * res.DecodeTokS / 1e9
	res.benchBackend = backendFigures(be, res.BandwidthGBs)
	predictTo := stdout
	if bc.JSON {
		predictTo = stderr
	}
	if err := printPredicted(ctx, predictTo, m, be, bc.PromptTokens, max(fullLayers, c.NumHiddenLayers)); err != nil {
		return err
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if bc.JSON {
		enc := json.NewEncoder(stdout)
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "prefill  %8.1f tok/s  (%d-token prompt)\n", res.PrefillTokS, res.PromptTokens)
	after := "after the prompt"
	if res.EmptyContext {
		after = "from an empty cache"
	}
	fmt.Fprintf(stdout, "decode   %8.1f tok/s  (%d tokens %s; median token %.1f tok/s)\n", res.DecodeTokS, res.GenTokens, after, res.DecodeMedianTokS)
	fmt.Fprintf(stdout, "allocs   %8.0f per decoded token\n", res.DecodeAllocs)
	fmt.Fprintf(stdout, "memory   %8.1f GB/s   (%.3f GB of weights + KV cache per decoded token)\n", res.BandwidthGBs, res.BytesPerToken/1e9)
	printBackendFigures(stdout, res.benchBackend)
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
// greedily, timing both phases. With empty, the decode runs in a second
// fresh cache starting from the prompt's first token, as llama-bench's
// "tg" test does (its "pp" and "tg" tests each start from an empty cache).
func benchRun(ctx context.Context, m *engine.Model, prompt []int, gen int, empty bool, t *benchTimes) error {
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
	prefill := time.Since(start)
	if empty {
		e, err := m.NewCache()
		if err != nil {
			return err
		}
		defer e.Free()
		if out, err = m.Forward(ctx, []engine.Seq{{Cache: e, Tokens: prompt[:1]}}); err != nil {
			return err
		}
		c = e
	}
	var ms runtime.MemStats
	if t != nil {
		runtime.ReadMemStats(&ms)
		t.allocs = ms.Mallocs
	}
	mid := time.Now()
	last := mid
	tok := engine.Argmax(out[0])
	for range gen {
		if tok, err = benchStep(ctx, m, c, tok); err != nil {
			return err
		}
		if t != nil {
			now := time.Now()
			t.tokens = append(t.tokens, now.Sub(last))
			last = now
		}
	}
	if t != nil {
		t.prefill, t.decode = prefill, time.Since(mid)
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
