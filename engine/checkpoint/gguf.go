package checkpoint

import (
	"errors"
	"fmt"

	"github.com/macpool/macpool/engine/gguf"
	"github.com/macpool/macpool/engine/tensor"
)

// ErrGGUFUnsupported is wrapped by the error for a GGUF file whose
// architecture engine/gguf does not map (it supports qwen2, qwen3, qwen3moe,
// qwen3next, qwen35, qwen35moe).
var ErrGGUFUnsupported = errors.New("gguf not supported")

// openGGUF opens a single-file GGUF checkpoint through engine/gguf, which
// maps its metadata to a Config and its tensors to canonical names (per-expert
// views of the stacked *_exps tensors, logical [out, in] shapes).
func openGGUF(path string) (*Checkpoint, error) { return openGGUFStage(path, nil) }

// openGGUFStage is openGGUF materialising only the tensors of stage s (all
// of them when s is nil).
func openGGUFStage(path string, s *Stage) (*Checkpoint, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	gc, err := f.Config()
	if err == nil {
		cfg := configFromGGUF(gc)
		var tensors map[string]*tensor.Host
		var r Stage
		if s == nil {
			tensors, err = f.Tensors()
		} else if r, err = s.Resolve(cfg.NumHiddenLayers); err == nil {
			tensors, err = stageTensors(f, r, cfg.NumHiddenLayers)
		}
		if err == nil {
			ck, err := New(path, cfg, tensors, f)
			if err == nil && s != nil {
				ck.stage = r
			}
			if err != nil {
				f.Close()
			}
			return ck, err
		}
	}
	f.Close()
	if errors.Is(err, gguf.ErrUnsupportedArchitecture) {
		return nil, fmt.Errorf("checkpoint: %w (%w)", err, ErrGGUFUnsupported)
	}
	return nil, fmt.Errorf("checkpoint: %w", err)
}

func configFromGGUF(g *gguf.Config) *Config {
	return &Config{
		ModelType:                    g.ModelType,
		HiddenSize:                   g.HiddenSize,
		IntermediateSize:             g.IntermediateSize,
		NumHiddenLayers:              g.NumHiddenLayers,
		NumAttentionHeads:            g.NumAttentionHeads,
		NumKeyValueHeads:             g.NumKeyValueHeads,
		HeadDim:                      g.HeadDim,
		VocabSize:                    g.VocabSize,
		MaxPositionEmbeddings:        g.MaxPositionEmbeddings,
		RMSNormEps:                   g.RMSNormEps,
		RopeTheta:                    g.RopeTheta,
		PartialRotaryFactor:          g.PartialRotaryFactor,
		TieWordEmbeddings:            g.TieWordEmbeddings,
		AttentionBias:                g.AttentionBias,
		LayerTypes:                   g.LayerTypes,
		BOSTokenID:                   g.BOSTokenID,
		EOSTokenIDs:                  g.EOSTokenIDs,
		NumExperts:                   g.NumExperts,
		NumExpertsPerTok:             g.NumExpertsPerTok,
		MoEIntermediateSize:          g.MoEIntermediateSize,
		SharedExpertIntermediateSize: g.SharedExpertIntermediateSize,
		DecoderSparseStep:            g.DecoderSparseStep,
		NormTopKProb:                 g.NormTopKProb,
		MLPOnlyLayers:                g.MLPOnlyLayers,
		LinearConvKernelDim:          g.LinearConvKernelDim,
		LinearKeyHeadDim:             g.LinearKeyHeadDim,
		LinearValueHeadDim:           g.LinearValueHeadDim,
		LinearNumKeyHeads:            g.LinearNumKeyHeads,
		LinearNumValueHeads:          g.LinearNumValueHeads,
		RopeScaling:                  ropeFromGGUF(g.RopeScaling),
	}
}

// ropeFromGGUF is the scaling of the Hugging Face config the file was
// converted from (engine/gguf.RopeScaling lists the keys); its errors name
// the GGUF keys (rope.scaling.*).
func ropeFromGGUF(r gguf.RopeScaling) RopeScaling {
	if r.Type == "" {
		return RopeScaling{}
	}
	return RopeScaling{Type: r.Type, Factor: r.Factor, OriginalMaxPositionEmbeddings: r.OriginalContextLength,
		AttentionFactor: r.AttentionFactor, BetaFast: r.BetaFast, BetaSlow: r.BetaSlow, at: "rope.scaling"}
}

// stageTensors is File.Tensors for the tensors stage r holds.
func stageTensors(f *gguf.File, r Stage, layers int) (map[string]*tensor.Host, error) {
	hasHead := f.Has("lm_head.weight")
	out := map[string]*tensor.Host{}
	for _, name := range f.Names() {
		if !r.Holds(name, layers, hasHead) {
			continue
		}
		h, err := f.Tensor(name)
		if err != nil {
			return nil, err
		}
		out[name] = h
	}
	return out, nil
}
