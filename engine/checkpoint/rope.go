package checkpoint

import (
	"fmt"
	"math"
)

// Rope scaling types of RopeScaling.Type.
const (
	RopeLinear = "linear" // positions divided by Factor (inverse frequencies / Factor)
	RopeYaRN   = "yarn"   // YaRN (arXiv 2309.00071) as transformers computes it
)

// RopeScaling is the rotary-embedding scaling of a config, read from
// rope_parameters (transformers 5) or rope_scaling (4.x), with the
// defaults transformers 5 fills in (engine.RopeFrequencies does the maths).
// The zero value is no scaling.
type RopeScaling struct {
	// Type is "" (none: rope_type default or mrope), RopeLinear or RopeYaRN.
	Type string
	// Factor scales the context length (both types). For yarn without
	// factor it is max_position_embeddings / original_max_position_embeddings.
	Factor float64

	// YaRN only.
	// OriginalMaxPositionEmbeddings is the pre-training context; it defaults
	// to max_position_embeddings, as transformers' standardisation does.
	OriginalMaxPositionEmbeddings int
	// AttentionFactor multiplies cos and sin; 0 = derived from Factor
	// (0.1·ln(Factor)+1, or the MScale/MScaleAllDim ratio when both are set).
	AttentionFactor float64
	// BetaFast and BetaSlow bound the ramp between extrapolated and
	// interpolated frequencies (rotations); 0 = 32 and 1.
	BetaFast, BetaSlow float64
	// MScale and MScaleAllDim (DeepSeek style) derive AttentionFactor when
	// both are non-zero.
	MScale, MScaleAllDim float64
	// NoTruncate is truncate: false (the correction range is not rounded
	// to whole dimensions).
	NoTruncate bool

	// at is the config field the values came from ("rope_scaling",
	// "text_config.rope_parameters", ...), for errors.
	at string
}

// Field is the config.json object the scaling was read from, for errors
// ("rope_scaling" when it was built by hand).
func (s RopeScaling) Field() string {
	if s.at == "" {
		return "rope_scaling"
	}
	return s.at
}

// Validate checks a rope scaling; errors name the config field.
func (s RopeScaling) Validate() error {
	at := s.Field()
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
	switch s.Type {
	case "":
		return nil
	case RopeLinear, RopeYaRN:
	default:
		return fmt.Errorf("field %s.rope_type: %q is not supported (supported: default, mrope, linear, yarn)", at, s.Type)
	}
	if bad(s.Factor) || s.Factor < 1 {
		return fmt.Errorf("field %s.factor: %v must be a number >= 1", at, s.Factor)
	}
	if s.Type == RopeLinear {
		return nil
	}
	if s.OriginalMaxPositionEmbeddings <= 0 {
		return fmt.Errorf("field %s.original_max_position_embeddings: %d must be positive (or set max_position_embeddings)", at, s.OriginalMaxPositionEmbeddings)
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"attention_factor", s.AttentionFactor}, {"beta_fast", s.BetaFast}, {"beta_slow", s.BetaSlow}, {"mscale", s.MScale}, {"mscale_all_dim", s.MScaleAllDim}} {
		if bad(p.v) || p.v < 0 {
			return fmt.Errorf("field %s.%s: %v must be a finite number >= 0", at, p.name, p.v)
		}
	}
	return nil
}

// ropeTypeOf reads rope_type (or the older "type") of a scaling object;
// default and mrope (plain rotary over 1-D text positions) are "".
func ropeTypeOf(sub *fields) (string, string) {
	for _, k := range []string{"rope_type", "type"} {
		v, at, ok := sub.lookup(k)
		if !ok {
			continue
		}
		t, isStr := v.(string)
		if !isStr {
			sub.fail("field %s: want a string, got %v", at, v)
			return "", at
		}
		if t == "default" || t == "mrope" {
			t = ""
		}
		return t, at
	}
	return "", sub.primaryAt + "rope_type"
}

// parseRopeScaling reads the scaling of rope_parameters (transformers 5)
// and rope_scaling (4.x). When both name a scaling they must agree;
// otherwise the one that names a scaling is used.
func parseRopeScaling(f *fields, name string, maxPos int) (RopeScaling, error) {
	obj := func(key string) *fields {
		v, at, ok := f.lookup(key)
		if !ok {
			return nil
		}
		m, isObj := v.(map[string]any)
		if !isObj {
			f.fail("field %s: want an object, got %v", at, v)
			return nil
		}
		return &fields{file: name, primary: m, primaryAt: at + "."}
	}
	params, legacy := obj("rope_parameters"), obj("rope_scaling")
	if f.err != nil {
		return RopeScaling{}, f.err
	}
	var src *fields
	var typ, typeAt string
	if params != nil {
		typ, typeAt = ropeTypeOf(params)
		if params.err != nil {
			return RopeScaling{}, params.err
		}
		if typ != "" {
			src = params
		}
	}
	if legacy != nil {
		lt, lat := ropeTypeOf(legacy)
		if legacy.err != nil {
			return RopeScaling{}, legacy.err
		}
		switch {
		case lt == "":
		case src == nil:
			src, typ, typeAt = legacy, lt, lat
		case lt != typ:
			return RopeScaling{}, fmt.Errorf("%s: field %s %q conflicts with %s %q", name, lat, lt, typeAt, typ)
		}
	}
	if src == nil {
		return RopeScaling{}, nil
	}
	s := RopeScaling{Type: typ, at: src.primaryAt[:len(src.primaryAt)-1]}
	if typ != RopeLinear && typ != RopeYaRN {
		// dynamic, longrope, llama3, ...: other maths; refuse rather than be silently wrong.
		return RopeScaling{}, fmt.Errorf("%s: field %s: %q is not supported (supported: default, mrope, linear, yarn)", name, typeAt, typ)
	}
	s.Factor = src.float(0, "factor")
	if typ == RopeYaRN {
		s.OriginalMaxPositionEmbeddings = src.int(maxPos, "original_max_position_embeddings")
		if _, _, ok := src.lookup("factor"); !ok && s.OriginalMaxPositionEmbeddings > 0 {
			// transformers: the ratio of the two contexts when factor is absent.
			s.Factor = float64(maxPos) / float64(s.OriginalMaxPositionEmbeddings)
		}
		s.AttentionFactor = src.float(0, "attention_factor")
		if v, at, ok := src.lookup("attention_factor"); ok && s.AttentionFactor <= 0 && src.err == nil {
			return RopeScaling{}, fmt.Errorf("%s: field %s: %v must be positive", name, at, v)
		}
		s.BetaFast = src.float(0, "beta_fast")
		s.BetaSlow = src.float(0, "beta_slow")
		s.MScale = src.float(0, "mscale")
		s.MScaleAllDim = src.float(0, "mscale_all_dim")
		s.NoTruncate = !src.bool(true, "truncate")
	}
	if src.err != nil {
		return RopeScaling{}, src.err
	}
	if _, _, ok := src.lookup("factor"); !ok && typ == RopeLinear {
		return RopeScaling{}, fmt.Errorf("%s: field %s.factor is missing (rope_type linear needs it)", name, s.at)
	}
	if err := s.Validate(); err != nil {
		return RopeScaling{}, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

// ContextLength is the longest context the model is configured for:
// max_position_embeddings, or with YaRN factor × original_max_position_embeddings
// when that is longer (Qwen3: 40960 without scaling, 131072 with the model
// card's factor 4 over 32768). Linear scaling keeps max_position_embeddings
// (such configs usually state the extended length there).
func (c *Config) ContextLength() int {
	n := c.MaxPositionEmbeddings
	if s := c.RopeScaling; s.Type == RopeYaRN {
		if y := s.Factor * float64(s.OriginalMaxPositionEmbeddings); y > float64(n) && y < math.MaxInt32 {
			n = int(y)
		}
	}
	return n
}
