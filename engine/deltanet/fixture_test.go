package deltanet

// A self-contained float32 forward of the four hybrid/MoE fixture models, written straight
// from docs/hybrid-models.md on top of this package and engine/moe. It checks the maths
// (layouts, norm conventions, gates, routing) against the transformers references
// independently of the engine's backends.

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/macpool/macpool/engine/checkpoint"

	"github.com/macpool/macpool/engine/moe"
)

type refModel struct {
	cfg *checkpoint.Config
	ck  *checkpoint.Checkpoint
	w   map[string][]float32
}

func (m *refModel) get(t testing.TB, name string) []float32 {
	if v, ok := m.w[name]; ok {
		return v
	}
	h, err := m.ck.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	m.w[name] = v
	return v
}

// linear: y [T, out] = x [T, in] · Wᵀ.
func linear(x []float32, T, in int, w []float32) []float32 {
	out := len(w) / in
	y := make([]float32, T*out)
	for t := 0; t < T; t++ {
		xr := x[t*in : (t+1)*in]
		for o := 0; o < out; o++ {
			var s float64
			for i, v := range w[o*in : (o+1)*in] {
				s += float64(v) * float64(xr[i])
			}
			y[t*out+o] = float32(s)
		}
	}
	return y
}

func rmsnorm(x []float32, dim int, w []float32, offset, eps float32) []float32 {
	y := make([]float32, len(x))
	for r := 0; r < len(x)/dim; r++ {
		xr := x[r*dim : (r+1)*dim]
		var ss float32
		for _, v := range xr {
			ss += v * v
		}
		inv := float32(1 / math.Sqrt(float64(ss/float32(dim)+eps)))
		for i, v := range xr {
			y[r*dim+i] = v * inv * (offset + w[i])
		}
	}
	return y
}

func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

type layerState struct {
	k, v  [][]float32 // per position
	conv  []float32
	delta []float32
}

type refState struct {
	pos    int
	layers []*layerState
}

func (m *refModel) newState() *refState {
	c := m.cfg
	s := &refState{}
	d := Dims{NumKeyHeads: c.LinearNumKeyHeads, NumValueHeads: c.LinearNumValueHeads, KeyDim: c.LinearKeyHeadDim, ValueDim: c.LinearValueHeadDim}
	for i := 0; i < c.NumHiddenLayers; i++ {
		ls := &layerState{}
		if c.IsLinearAttention(i) {
			ls.conv = make([]float32, (c.LinearConvKernelDim-1)*d.ConvDim())
			ls.delta = make([]float32, d.StateSize())
		}
		s.layers = append(s.layers, ls)
	}
	return s
}

func (m *refModel) forward(t testing.TB, s *refState, ids []int) []float32 {
	c := m.cfg
	H, T := c.HiddenSize, len(ids)
	eps := float32(c.RMSNormEps)
	var off float32
	if c.ModelType != "qwen3_moe" {
		off = 1
	}
	emb := m.get(t, "model.embed_tokens.weight")
	x := make([]float32, T*H)
	for i, id := range ids {
		copy(x[i*H:], emb[id*H:(id+1)*H])
	}
	for l := 0; l < c.NumHiddenLayers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		h := rmsnorm(x, H, m.get(t, p+"input_layernorm.weight"), off, eps)
		var mix []float32
		if c.IsLinearAttention(l) {
			mix = m.deltaNet(t, p+"linear_attn.", s.layers[l], h, T)
		} else {
			mix = m.attention(t, p+"self_attn.", s.layers[l], s.pos, h, T, off)
		}
		for i := range x {
			x[i] += mix[i]
		}
		h = rmsnorm(x, H, m.get(t, p+"post_attention_layernorm.weight"), off, eps)
		var y []float32
		if c.IsMoELayer(l) {
			y = m.moeBlock(t, p+"mlp.", h, T)
		} else {
			y = m.mlp(t, p+"mlp.", h, T)
		}
		for i := range x {
			x[i] += y[i]
		}
	}
	s.pos += T
	x = rmsnorm(x, H, m.get(t, "model.norm.weight"), off, eps)
	return linear(x, T, H, m.get(t, "lm_head.weight"))
}

func (m *refModel) mlp(t testing.TB, p string, h []float32, T int) []float32 {
	H := m.cfg.HiddenSize
	g := linear(h, T, H, m.get(t, p+"gate_proj.weight"))
	u := linear(h, T, H, m.get(t, p+"up_proj.weight"))
	moe.SwiGLU(g, g, u)
	return linear(g, T, len(g)/T, m.get(t, p+"down_proj.weight"))
}

func (m *refModel) moeBlock(t testing.TB, p string, h []float32, T int) []float32 {
	c := m.cfg
	H := c.HiddenSize
	logits := linear(h, T, H, m.get(t, p+"gate.weight"))
	r := moe.RouteBatch(logits, T, c.NumExperts, c.NumExpertsPerTok, c.NormTopKProb)
	out := make([]float32, T*H)
	for _, a := range r.ByExpert(c.NumExperts) {
		for i, tok := range a.Tokens {
			y := m.mlp(t, fmt.Sprintf("%sexperts.%d.", p, a.Expert), h[tok*H:(tok+1)*H], 1)
			moe.Accumulate(out[tok*H:(tok+1)*H], r.Weights[tok*r.K+a.Slots[i]], y)
		}
	}
	if c.SharedExpertIntermediateSize > 0 {
		y := m.mlp(t, p+"shared_expert.", h, T)
		g := linear(h, T, H, m.get(t, p+"shared_expert_gate.weight"))
		for tok := 0; tok < T; tok++ {
			moe.Accumulate(out[tok*H:(tok+1)*H], moe.SharedGate(g[tok]), y[tok*H:(tok+1)*H])
		}
	}
	return out
}

func (m *refModel) attention(t testing.TB, p string, ls *layerState, pos0 int, h []float32, T int, off float32) []float32 {
	c := m.cfg
	H, nh, nkv, hd := c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	eps := float32(c.RMSNormEps)
	gated := c.ModelType != "qwen3_moe"
	qg := linear(h, T, H, m.get(t, p+"q_proj.weight"))
	q := make([]float32, T*nh*hd)
	gate := make([]float32, T*nh*hd)
	if gated {
		for tok := 0; tok < T; tok++ {
			for hh := 0; hh < nh; hh++ {
				src := qg[tok*2*nh*hd+hh*2*hd:]
				copy(q[tok*nh*hd+hh*hd:tok*nh*hd+(hh+1)*hd], src[:hd])
				copy(gate[tok*nh*hd+hh*hd:tok*nh*hd+(hh+1)*hd], src[hd:2*hd])
			}
		}
	} else {
		q = qg
	}
	k := linear(h, T, H, m.get(t, p+"k_proj.weight"))
	v := linear(h, T, H, m.get(t, p+"v_proj.weight"))
	q = rmsnorm(q, hd, m.get(t, p+"q_norm.weight"), off, eps)
	k = rmsnorm(k, hd, m.get(t, p+"k_norm.weight"), off, eps)
	rot := int(float64(hd) * c.PartialRotaryFactor)
	rope := func(x []float32, heads, pos int) {
		half := rot / 2
		for hh := 0; hh < heads; hh++ {
			xh := x[hh*hd : (hh+1)*hd]
			for j := 0; j < half; j++ {
				invf := float32(1 / math.Pow(c.RopeTheta, float64(2*j)/float64(rot)))
				ang := float32(pos) * invf
				cs, sn := float32(math.Cos(float64(ang))), float32(math.Sin(float64(ang)))
				a, b := xh[j], xh[j+half]
				xh[j] = a*cs - b*sn
				xh[j+half] = b*cs + a*sn
			}
		}
	}
	for tok := 0; tok < T; tok++ {
		rope(q[tok*nh*hd:(tok+1)*nh*hd], nh, pos0+tok)
		rope(k[tok*nkv*hd:(tok+1)*nkv*hd], nkv, pos0+tok)
		ls.k = append(ls.k, k[tok*nkv*hd:(tok+1)*nkv*hd])
		ls.v = append(ls.v, v[tok*nkv*hd:(tok+1)*nkv*hd])
	}
	out := make([]float32, T*nh*hd)
	scale := float32(1 / math.Sqrt(float64(hd)))
	for tok := 0; tok < T; tok++ {
		n := pos0 + tok + 1
		for hh := 0; hh < nh; hh++ {
			kh := hh / (nh / nkv)
			qh := q[tok*nh*hd+hh*hd : tok*nh*hd+(hh+1)*hd]
			sc := make([]float32, n)
			mx := float32(math.Inf(-1))
			for j := 0; j < n; j++ {
				var s float32
				for i, qv := range qh {
					s += qv * ls.k[j][kh*hd+i]
				}
				sc[j] = s * scale
				mx = max(mx, sc[j])
			}
			var sum float32
			for j := range sc {
				sc[j] = float32(math.Exp(float64(sc[j] - mx)))
				sum += sc[j]
			}
			o := out[tok*nh*hd+hh*hd : tok*nh*hd+(hh+1)*hd]
			for j := 0; j < n; j++ {
				moe.Accumulate(o, sc[j]/sum, ls.v[j][kh*hd:(kh+1)*hd])
			}
		}
	}
	if gated {
		for i := range out {
			out[i] *= sigmoid(gate[i])
		}
	}
	return linear(out, T, nh*hd, m.get(t, p+"o_proj.weight"))
}

func (m *refModel) deltaNet(t testing.TB, p string, ls *layerState, h []float32, T int) []float32 {
	c := m.cfg
	H := c.HiddenSize
	d := Dims{NumKeyHeads: c.LinearNumKeyHeads, NumValueHeads: c.LinearNumValueHeads, KeyDim: c.LinearKeyHeadDim, ValueDim: c.LinearValueHeadDim}
	nk, nv, dk, dv := d.NumKeyHeads, d.NumValueHeads, d.KeyDim, d.ValueDim
	kd, vd, C, r := nk*dk, nv*dv, d.ConvDim(), nv/nk
	var mixed, z, b, a []float32
	if m.ck.Has(p + "in_proj_qkvz.weight") { // Qwen3-Next grouped layout
		qkvz := linear(h, T, H, m.get(t, p+"in_proj_qkvz.weight"))
		ba := linear(h, T, H, m.get(t, p+"in_proj_ba.weight"))
		mixed, z = make([]float32, T*C), make([]float32, T*vd)
		b, a = make([]float32, T*nv), make([]float32, T*nv)
		gw := 2*dk + 2*r*dv
		for tok := 0; tok < T; tok++ {
			row, mrow := qkvz[tok*(2*kd+2*vd):], mixed[tok*C:]
			for g := 0; g < nk; g++ {
				grp := row[g*gw:]
				copy(mrow[g*dk:(g+1)*dk], grp[:dk])
				copy(mrow[kd+g*dk:kd+(g+1)*dk], grp[dk:2*dk])
				copy(mrow[2*kd+g*r*dv:2*kd+(g+1)*r*dv], grp[2*dk:2*dk+r*dv])
				copy(z[tok*vd+g*r*dv:tok*vd+(g+1)*r*dv], grp[2*dk+r*dv:gw])
				bag := ba[tok*2*nv+g*2*r:]
				copy(b[tok*nv+g*r:tok*nv+(g+1)*r], bag[:r])
				copy(a[tok*nv+g*r:tok*nv+(g+1)*r], bag[r:2*r])
			}
		}
	} else {
		mixed = linear(h, T, H, m.get(t, p+"in_proj_qkv.weight"))
		z = linear(h, T, H, m.get(t, p+"in_proj_z.weight"))
		b = linear(h, T, H, m.get(t, p+"in_proj_b.weight"))
		a = linear(h, T, H, m.get(t, p+"in_proj_a.weight"))
	}
	conv := make([]float32, T*C)
	CausalConv1D(conv, mixed, T, C, m.get(t, p+"conv1d.weight"), c.LinearConvKernelDim, ls.conv)
	in := Inputs{T: T, Q: make([]float32, T*kd), K: make([]float32, T*kd), V: make([]float32, T*vd),
		G: make([]float32, T*nv), Beta: make([]float32, T*nv)}
	for tok := 0; tok < T; tok++ {
		row := conv[tok*C:]
		copy(in.Q[tok*kd:(tok+1)*kd], row[:kd])
		copy(in.K[tok*kd:(tok+1)*kd], row[kd:2*kd])
		copy(in.V[tok*vd:(tok+1)*vd], row[2*kd:C])
	}
	Gates(in.Beta, in.G, b, a, m.get(t, p+"A_log"), m.get(t, p+"dt_bias"), T, nv)
	o := make([]float32, T*vd)
	if T > 1 {
		Chunked(d, in, ls.delta, o)
	} else {
		Recurrent(d, in, ls.delta, o)
	}
	GatedRMSNorm(o, o, z, m.get(t, p+"norm.weight"), T*nv, dv, float32(c.RMSNormEps))
	return linear(o, T, vd, m.get(t, p+"out_proj.weight"))
}

type refJSON struct {
	InputIDs     []int `json:"input_ids"`
	LogitsShape  []int `json:"logits_shape"`
	GreedyPrompt []int `json:"greedy_prompt"`
	GreedyOut    []int `json:"greedy_out"`
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

func TestFixtureReference(t *testing.T) {
	for _, name := range []string{"qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("..", "..", "testdata", "hf", name)
			ck, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			m := &refModel{cfg: ck.Config(), ck: ck, w: map[string][]float32{}}
			raw, err := os.ReadFile(filepath.Join(dir, "ref.json"))
			if err != nil {
				t.Fatal(err)
			}
			var ref refJSON
			if err := json.Unmarshal(raw, &ref); err != nil {
				t.Fatal(err)
			}
			lb, err := os.ReadFile(filepath.Join(dir, "ref_logits.f32"))
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, len(lb)/4)
			for i := range want {
				want[i] = math.Float32frombits(binary.LittleEndian.Uint32(lb[i*4:]))
			}
			V := ref.LogitsShape[1]
			got := m.forward(t, m.newState(), ref.InputIDs)
			worst := 0.0
			for p := 0; p < ref.LogitsShape[0]; p++ {
				e := relL2(got[p*V:(p+1)*V], want[p*V:(p+1)*V])
				worst = max(worst, e)
			}
			t.Logf("%s: max per-position logits rel-L2 %.3g", name, worst)
			if worst > 1e-4 {
				t.Errorf("max per-position rel-L2 %.3g, want < 1e-4", worst)
			}
			// Greedy with cache: chunked prefill, recurrent decode.
			s := m.newState()
			logits := m.forward(t, s, ref.GreedyPrompt)
			var out []int
			next := argmax(logits[len(logits)-V:])
			for len(out) < len(ref.GreedyOut) {
				out = append(out, next)
				next = argmax(m.forward(t, s, []int{next}))
			}
			if !slices.Equal(out, ref.GreedyOut) {
				t.Errorf("greedy %v, want %v", out, ref.GreedyOut)
			}
		})
	}
}
