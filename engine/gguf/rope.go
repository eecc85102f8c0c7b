package gguf

import (
	"fmt"
	"math"
)

// Rope scaling types of RopeScaling.Type (the strings llama.cpp writes to
// ARCH.rope.scaling.type, which are also transformers' rope_type names).
const (
	RopeLinear = "linear"
	RopeYaRN   = "yarn"
)

// RopeScaling is the rotary-embedding scaling a GGUF file declares, with the
// meaning of checkpoint.RopeScaling's fields. llama.cpp's converter writes it
// from the Hugging Face rope_parameters / rope_scaling:
//
//	ARCH.rope.scaling.type                    "linear" | "yarn" (rope_type)
//	ARCH.rope.scaling.factor                  factor
//	ARCH.rope.scaling.original_context_length original_max_position_embeddings (yarn)
//	ARCH.rope.scaling.yarn_attn_factor        attention_factor (yarn, only when the config sets it)
//	ARCH.rope.scaling.yarn_beta_fast/_slow    beta_fast / beta_slow (yarn, only when set)
//	ARCH.rope.scaling.yarn_ext_factor         extrapolation_factor (not a transformers field)
//
// so reading those keys back gives the scaling transformers computes with.
// truncate, mscale and mscale_all_dim are not written by the converter for
// these architectures (transformers' defaults: truncate true, no mscale).
// The zero value is no scaling.
type RopeScaling struct {
	Type                  string  // "", RopeLinear or RopeYaRN
	Factor                float64 // >= 1
	OriginalContextLength int     // yarn: pre-training context (default: context_length)
	AttentionFactor       float64 // yarn: 0 = derived from Factor
	BetaFast, BetaSlow    float64 // yarn: 0 = transformers' defaults (32, 1)
}

// ropeScaling reads ARCH.rope.scaling.* into c.RopeScaling. Files with a
// scaling this engine would compute differently from transformers (longrope,
// an extrapolation mix other than 1, DeepSeek's log multiplier) are refused
// rather than run with wrong positions.
func (r *metaReader) ropeScaling(c *Config) {
	p := r.a + ".rope.scaling."
	bad := func(format string, args ...any) { r.errs = append(r.errs, fmt.Sprintf(format, args...)) }
	float := func(key string) (float64, bool) {
		if _, ok := r.f.Value(p + key); !ok {
			return 0, false
		}
		v, ok := r.f.Float(p + key)
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
			bad("%s%s is not a finite number", p, key)
			return 0, false
		}
		return v, true
	}
	typ := ""
	if v, ok := r.f.Value(p + "type"); ok {
		s, isStr := v.(string)
		if !isStr {
			bad("%stype is not a string", p)
			return
		}
		typ = s
	}
	factor, hasFactor := float("factor")
	if !hasFactor {
		// Files from before rope.scaling.* (llama.cpp reads it as the factor too).
		if v, ok := r.f.Float(r.a + ".rope.scale_linear"); ok {
			factor, hasFactor = v, true
		}
	}
	if typ == "" && hasFactor && factor != 1 {
		typ = RopeLinear // llama.cpp's default scaling type when only a factor is given
	}
	switch typ {
	case "", "none":
		return
	case RopeLinear, RopeYaRN:
	default:
		bad("%stype %q is not supported (supported: none, linear, yarn)", p, typ)
		return
	}
	s := RopeScaling{Type: typ, Factor: factor}
	if !hasFactor {
		bad("%sfactor missing (rope scaling %s needs it)", p, typ)
	} else if factor < 1 {
		bad("%sfactor %v must be >= 1", p, factor)
	}
	if typ == RopeYaRN {
		s.OriginalContextLength = c.MaxPositionEmbeddings
		if _, ok := r.f.Value(p + "original_context_length"); ok {
			v, ok := r.f.Int(p + "original_context_length")
			if !ok || v <= 0 {
				bad("%soriginal_context_length is not a positive integer", p)
			}
			s.OriginalContextLength = v
		}
		if s.OriginalContextLength <= 0 {
			bad("%soriginal_context_length missing (and no %s.context_length)", p, r.a)
		}
		for _, k := range []struct {
			key string
			dst *float64
		}{{"yarn_attn_factor", &s.AttentionFactor}, {"yarn_beta_fast", &s.BetaFast}, {"yarn_beta_slow", &s.BetaSlow}} {
			if v, ok := float(k.key); ok {
				if v <= 0 {
					bad("%s%s %v must be positive", p, k.key, v)
				}
				*k.dst = v
			}
		}
		// llama.cpp's own knobs without a transformers counterpart: accept
		// only the values that compute what transformers does.
		if v, ok := float("yarn_ext_factor"); ok && v != 1 {
			bad("%syarn_ext_factor %v is not supported (transformers' YaRN blends with 1)", p, v)
		}
		if v, ok := float("yarn_log_multiplier"); ok && v != 0 {
			bad("%syarn_log_multiplier %v is not supported (DeepSeek-style mscale)", p, v)
		}
	}
	if v, ok := float("attn_factor"); ok && v != 1 {
		bad("%sattn_factor %v is not supported", p, v)
	}
	c.RopeScaling = s
}

// RopeMeta is the metadata llama.cpp's converter writes for s (nil for no
// scaling).
func RopeMeta(arch string, s RopeScaling) []Meta {
	if s.Type == "" {
		return nil
	}
	p := arch + ".rope.scaling."
	meta := []Meta{{p + "type", s.Type}, {p + "factor", float32(s.Factor)}}
	if s.Type != RopeYaRN {
		return meta
	}
	meta = append(meta, Meta{p + "original_context_length", uint32(s.OriginalContextLength)})
	for _, k := range []struct {
		key string
		v   float64
	}{{"yarn_attn_factor", s.AttentionFactor}, {"yarn_beta_fast", s.BetaFast}, {"yarn_beta_slow", s.BetaSlow}} {
		if k.v != 0 {
			meta = append(meta, Meta{p + k.key, float32(k.v)})
		}
	}
	return meta
}
