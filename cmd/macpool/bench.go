package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/macpool/macpool/bench"
	"github.com/macpool/macpool/engine/synth"
	"github.com/macpool/macpool/runner"
)

func init() {
	register("bench", "measure prefill and decode speed of a model (or a random model of a real shape)", runBench)
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	c := bench.DefaultConfig()
	fs := newFlagSet("bench", stderr)
	fs.StringVar(&c.Model, "model", "", "model folder or .gguf file")
	fs.StringVar(&c.Synthetic, "synthetic", "", "random-weight model of a real shape: "+strings.Join(synth.Shapes(), ", "))
	fs.StringVar(&c.Quant, "quant", c.Quant, "with --synthetic: bf16, f32, q8_0, q4_0, mlx4, mlx8")
	fs.StringVar(&c.Quantize, "quantize", "", "quantize float matrices at load: q8 or q4")
	fs.IntVar(&c.Layers, "layers", 0, "with --synthetic: keep only the first N layers (big shapes in little memory)")
	fs.IntVar(&c.PromptTokens, "prompt-tokens", c.PromptTokens, "prompt length (prefill, one batch)")
	fs.IntVar(&c.GenTokens, "gen-tokens", c.GenTokens, "tokens decoded one at a time after the prompt")
	fs.IntVar(&c.Threads, "threads", 0, "CPU threads (0 = every core)")
	fs.IntVar(&c.Repeat, "repeat", c.Repeat, "runs; the best of each figure is reported")
	fs.BoolVar(&c.ExactMatMul, "exact", false, "float32 activations for quantized weights (see engine.Options.ExactMatMul)")
	fs.BoolVar(&c.PreciseHybrid, "precise-hybrid", false, "float32 activations for linear-attention projections and MoE routers only (engine.Options.PreciseHybrid)")
	fs.BoolVar(&c.JSON, "json", false, "print one JSON object")
	backend := backendFlag(fs)
	fs.IntVar(&c.Concurrency, "concurrency", 0, "concurrent streams through the serving scheduler (0: one stream on the bare model)")
	fs.IntVar(&c.CachedPrefix, "cached-prefix", 0, "with --concurrency: prompt tokens shared with a warm-up request (prefix cache)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the synthetic weights and prompt")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the timed runs to this file")
	fs.BoolVar(&c.KVF16, "kv-f16", c.KVF16, "KV cache in half precision, as the worker (paged) and llama.cpp keep it (cpu.Config.KVF16; -kv-f16=false: float32)")
	fs.Var(&c.KVCache, "kv-cache", runner.KVCacheHelp+"; overrides --kv-f16")
	fs.BoolVar(&c.LlamaBench, "llama-bench", false, "measure as llama-bench does (pp N, tg M): the decode starts from an empty cache instead of after the prompt")
	fs.StringVar(&c.WriteGGUF, "write-gguf", "", "with --synthetic (dense, qwen3-moe and hybrid qwen3.5/3.6 shapes, q8_0/q4_0/bf16/f32): write the model to this .gguf file as llama.cpp lays it out and exit")
	fs.StringVar(&c.WriteMLX, "write-mlx", "", "with --synthetic (dense qwen2/qwen3 shapes): write the model as an MLX/safetensors checkpoint folder and exit")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c.Backend = *backend
	defer func() { err = reportEmulatedHost(*backend, stderr, err) }()
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := resolveModelFlag(ctx, &c.Model, stderr); err != nil { // hub: repo id → cache path
		return err
	}
	err = bench.Run(ctx, c, stdout, stderr)
	if errors.Is(err, bench.ErrConfig) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return err
}
