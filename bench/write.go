package bench

// Config.WriteGGUF / WriteMLX and the resident-memory figures: a synthetic
// model written as a GGUF file can be loaded back with Config.Model to
// measure load time and resident size against the file size (the target:
// within 10%, under 2 s for 1 GB).

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/gguf"
	"github.com/macpool/macpool/engine/synth"
	"github.com/macpool/macpool/engine/tensor"
)

// writeSyntheticGGUF writes every tensor of a synthetic model to path as
// llama.cpp lays it out: dense and Qwen3-MoE models (experts stacked into
// ffn_*_exps), and the hybrids qwen3_next, qwen3_5_text, qwen3_5_moe_text
// (gguf.HybridTensors).
func writeSyntheticGGUF(sm *synth.Model, path string, stderr io.Writer) error {
	c := sm.Config()
	gc := &gguf.Config{ModelType: c.ModelType, HiddenSize: c.HiddenSize, IntermediateSize: c.IntermediateSize,
		NumHiddenLayers: c.NumHiddenLayers, NumAttentionHeads: c.NumAttentionHeads, NumKeyValueHeads: c.NumKeyValueHeads,
		HeadDim: c.HeadDim, VocabSize: c.VocabSize, MaxPositionEmbeddings: c.MaxPositionEmbeddings,
		RMSNormEps: c.RMSNormEps, RopeTheta: c.RopeTheta, BOSTokenID: c.BOSTokenID, EOSTokenIDs: c.EOSTokenIDs,
		NumExperts: c.NumExperts, NumExpertsPerTok: c.NumExpertsPerTok, MoEIntermediateSize: c.MoEIntermediateSize,
		NormTopKProb: c.NormTopKProb, PartialRotaryFactor: c.PartialRotaryFactor, LayerTypes: c.LayerTypes,
		SharedExpertIntermediateSize: c.SharedExpertIntermediateSize, TieWordEmbeddings: c.TieWordEmbeddings,
		LinearConvKernelDim: c.LinearConvKernelDim, LinearKeyHeadDim: c.LinearKeyHeadDim, LinearValueHeadDim: c.LinearValueHeadDim,
		LinearNumKeyHeads: c.LinearNumKeyHeads, LinearNumValueHeads: c.LinearNumValueHeads}
	meta, err := gguf.ModelMeta(gc)
	if err != nil {
		return err
	}
	if gguf.IsHybrid(c.ModelType) {
		start := time.Now()
		var size int64
		ts, err := gguf.HybridTensors(gc, sm.Names(), func(name string) (*tensor.Host, error) {
			h, err := sm.Tensor(name)
			if err == nil {
				size += int64(len(h.Data))
			}
			return h, err
		})
		if err != nil {
			return fmt.Errorf("write gguf: %w", err)
		}
		if err := gguf.Write(path, meta, ts); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s: %d tensors, %.3f GB of tensor data in %.1fs\n", path, len(ts), float64(size)/1e9, time.Since(start).Seconds())
		return nil
	}
	if c.PartialRotaryFactor != 1 || c.SharedExpertIntermediateSize > 0 {
		return fmt.Errorf("write gguf: %s is not a dense, Qwen3-MoE or hybrid Qwen model", c.ModelType)
	}
	start := time.Now()
	var ts []gguf.WriteTensor
	var size int64
	stacks := map[string][]*tensor.Host{} // stacked GGUF name → experts in order
	var order []string
	for _, name := range sm.Names() {
		h, err := sm.Tensor(name)
		if err != nil {
			return err
		}
		size += int64(len(h.Data))
		if g, e, ok := gguf.ExpertGGUFName(name); ok {
			if _, seen := stacks[g]; !seen {
				order = append(order, g)
			}
			for len(stacks[g]) <= e {
				stacks[g] = append(stacks[g], nil)
			}
			stacks[g][e] = h
			continue
		}
		g, ok := gguf.GGUFName(name)
		if !ok {
			return fmt.Errorf("write gguf: tensor %s has no GGUF name", name)
		}
		ts = append(ts, gguf.WriteTensor{Name: g, Host: h})
	}
	for _, g := range order {
		h, err := gguf.StackExperts(g, stacks[g])
		if err != nil {
			return fmt.Errorf("write gguf: %w", err)
		}
		ts = append(ts, gguf.WriteTensor{Name: g, Host: h})
	}
	if err := gguf.Write(path, meta, ts); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s: %d tensors, %.3f GB of tensor data in %.1fs\n", path, len(ts), float64(size)/1e9, time.Since(start).Seconds())
	return nil
}

// residentBytes reads VmRSS, RssAnon and RssFile of this process (Linux;
// zeros elsewhere).
func residentBytes() (rss, anon, file int64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		fields := bytes.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseInt(string(fields[0]), 10, 64)
		if err != nil {
			continue
		}
		switch string(k) {
		case "VmRSS":
			rss = n << 10
		case "RssAnon":
			anon = n << 10
		case "RssFile":
			file = n << 10
		}
	}
	return rss, anon, file
}

// writeSyntheticMLX writes sm (built from shape with layers) as a checkpoint
// folder: MLX affine for mlx4/mlx8, plain safetensors for the float quants.
func writeSyntheticMLX(sm *synth.Model, shape string, layers int, dir string, stderr io.Writer) error {
	cfg, err := synth.ConfigJSON(shape, layers)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := checkpoint.WriteMLX(dir, cfg, sm); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s in %.1fs\n", dir, time.Since(start).Seconds())
	return nil
}
