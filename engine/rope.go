package engine

import (
	"fmt"
	"math"

	"github.com/macpool/macpool/engine/checkpoint"
)

// NewRopeParams returns the rotary parameters of a model's attention
// layers (Heads is left for the caller to set per call): the inverse
// frequencies of c's rope_theta over rotaryDim dimensions with c's rope
// scaling applied, and the attention factor. Computed once at load.
func NewRopeParams(c *Config, headDim, rotaryDim int) (RopeParams, error) {
	inv, af, err := RopeFrequencies(c.RopeTheta, rotaryDim, c.RopeScaling)
	if err != nil {
		return RopeParams{}, err
	}
	return RopeParams{HeadDim: headDim, RotaryDim: rotaryDim, Theta: c.RopeTheta, InvFreq: inv, AttentionFactor: af}, nil
}

// Tables returns the inverse frequencies and attention factor a backend
// applies: InvFreq and AttentionFactor, or the unscaled defaults when
// they are unset. It panics on a table of the wrong length (programmer
// error, like the other op shape checks).
func (p RopeParams) Tables() ([]float32, float32) {
	af := p.AttentionFactor
	if af == 0 {
		af = 1
	}
	if p.InvFreq == nil {
		return defaultInvFreq(p.Theta, p.RotaryDim), af
	}
	if len(p.InvFreq) != p.RotaryDim/2 {
		panic(fmt.Sprintf("rope: %d inverse frequencies for rotary dim %d", len(p.InvFreq), p.RotaryDim))
	}
	return p.InvFreq, af
}

// defaultInvFreq is transformers' default rotary table in float32:
// 1 / theta^(float32(2i)/dim).
func defaultInvFreq(theta float64, dim int) []float32 {
	inv := make([]float32, dim/2)
	for i := range inv {
		inv[i] = 1 / posFreq(theta, i, dim)
	}
	return inv
}

// posFreq is theta^(2i/dim) rounded to float32, the exponent formed in
// float32 as torch does (arange(0, dim, 2).float() / dim).
func posFreq(theta float64, i, dim int) float32 {
	e := float32(2*i) / float32(dim)
	return float32(math.Pow(theta, float64(e)))
}

// RopeFrequencies computes the inverse frequencies (rotaryDim/2 values)
// and the factor that multiplies cos and sin for a rope scaling, the way
// transformers 5's modeling_rope_utils does (_compute_default_rope_parameters,
// _compute_linear_scaling_rope_parameters, _compute_yarn_parameters),
// rounding to float32 where it computes in float32. Verified against
// transformers' tables in testdata/rope/inv_freq.json.
func RopeFrequencies(theta float64, rotaryDim int, s checkpoint.RopeScaling) ([]float32, float32, error) {
	if !(theta > 0) || rotaryDim <= 0 || rotaryDim%2 != 0 {
		return nil, 0, fmt.Errorf("rope: rope_theta %v and rotary dim %d: need a positive theta and a positive even dim", theta, rotaryDim)
	}
	if err := s.Validate(); err != nil {
		return nil, 0, err
	}
	switch s.Type {
	case "":
		return defaultInvFreq(theta, rotaryDim), 1, nil
	case checkpoint.RopeLinear:
		// Positions divided by factor, applied to the frequencies instead.
		inv := defaultInvFreq(theta, rotaryDim)
		for i := range inv {
			inv[i] /= float32(s.Factor)
		}
		return inv, 1, nil
	case checkpoint.RopeYaRN:
		inv, af := yarn(theta, rotaryDim, s)
		return inv, af, nil
	}
	return nil, 0, fmt.Errorf("field %s.rope_type: %q is not supported", s.Field(), s.Type)
}

// yarnMScale is YaRN's attention scale 0.1·m·ln(factor) + 1 (1 for factor ≤ 1).
func yarnMScale(factor, m float64) float64 {
	if factor <= 1 {
		return 1
	}
	return 0.1*m*math.Log(factor) + 1
}

// yarn blends, per frequency, the original (extrapolated) inverse
// frequency with the one divided by the factor (interpolated): dimensions
// that rotate more than BetaFast times over the original context keep
// theirs, those under BetaSlow rotations are interpolated, with a linear
// ramp between (over the dimension index).
func yarn(theta float64, dim int, s checkpoint.RopeScaling) ([]float32, float32) {
	factor := s.Factor
	af := s.AttentionFactor
	if af == 0 {
		if s.MScale != 0 && s.MScaleAllDim != 0 {
			af = yarnMScale(factor, s.MScale) / yarnMScale(factor, s.MScaleAllDim)
		} else {
			af = yarnMScale(factor, 1)
		}
	}
	betaFast, betaSlow := s.BetaFast, s.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	// The dimension whose frequency makes rot rotations over the original context.
	corrDim := func(rot float64) float64 {
		return float64(dim) * math.Log(float64(s.OriginalMaxPositionEmbeddings)/(rot*2*math.Pi)) / (2 * math.Log(theta))
	}
	low, high := corrDim(betaFast), corrDim(betaSlow)
	if !s.NoTruncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = max(low, 0), min(high, float64(dim-1))
	if low == high {
		high += 0.001 // as transformers: avoid dividing by zero
	}
	span := float32(high - low)
	inv := make([]float32, dim/2)
	for i := range inv {
		pf := posFreq(theta, i, dim)
		extra := 1 / pf
		inter := 1 / float32(float32(factor)*pf)
		ramp := float32(float32(i)-float32(low)) / span
		ramp = min(max(ramp, 0), 1)
		keep := 1 - ramp // share of the extrapolated frequency
		inv[i] = float32(inter*float32(1-keep)) + float32(extra*keep)
	}
	return inv, float32(af)
}
