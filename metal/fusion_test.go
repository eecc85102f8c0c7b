//go:build linux || darwin

package metal

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/tensor"
	"github.com/macpool/macpool/metal/gpu"
)

// fixtureArchs are the seven fixture architectures (HF), with a GGUF and an
// MLX checkpoint for the quantized kernels.
var fixtureArchs = []string{"hf/qwen2", "hf/qwen3", "hf/qwen3_tied", "hf/qwen3_moe", "hf/qwen3_next", "hf/qwen3_5", "hf/qwen3_5_moe",
	"gguf/qwen3moe-q4_0.gguf", "mlx/qwen3-4bit"}

// loadOn binds a fixture on a new backend of cfg (the test device).
func loadOn(t *testing.T, name string, cfg Config) (*engine.Model, *Backend) {
	t.Helper()
	cfg.Device, cfg.Name = newTestDevice(t), testBackendName
	be, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	ck, err := checkpoint.Open(fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	m, err := engine.New(be, ck)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, be
}

// TestFusionBits: with fusion (RMSNorm into the next matmuls, the matmuls of
// one input in one dispatch, residual adds into the producing matmul or
// moe_down_combine, QK-norm into rope, the MoE route and the shared expert's gate/up into the experts' gate/up, the attention output gate into attention, DeltaNet's conv and conv state, and at decode its conv, rule and gated norm in one dn_step; the KV store into the key's rope)
// every fixture's logits —
// a prefill of all positions and six one-token decode steps, where the
// norm fusion applies — are the same bits as with every op its own
// dispatch, and the fused kernels did run.
func TestFusionBits(t *testing.T) {
	for _, name := range fixtureArchs {
		t.Run(name, func(t *testing.T) {
			run := func(noFuse bool) ([]float32, []DispatchRecord) {
				m, be := loadOn(t, name, Config{NoFusion: noFuse})
				ids := randIDs(5, 9, m.VocabSize())
				c, err := m.NewCache()
				if err != nil {
					t.Fatal(err)
				}
				defer c.Free()
				be.StartTrace()
				out, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: ids[:3], AllLogits: true}})
				if err != nil {
					t.Fatal(err)
				}
				all := out[0]
				for _, id := range ids[3:] {
					out, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: []int{id}}})
					if err != nil {
						t.Fatal(err)
					}
					all = append(all, out[0]...)
				}
				return all, be.StopTrace()
			}
			fused, ft := run(false)
			separate, st := run(true)
			if bad := diffBits(fused, separate); bad > 0 {
				t.Errorf("%d of %d logits differ between fused and separate dispatches", bad, len(fused))
			}
			if countKernel(ft, "rmsnorm_matmul")+countKernel(ft, "matmul_multi") == 0 || countKernel(ft, "matmul_add")+countKernel(ft, "moe_down_combine") == 0 {
				t.Errorf("fused run used no fused kernel: %d rmsnorm_matmul, %d matmul_add", countKernel(ft, "rmsnorm_matmul"), countKernel(ft, "matmul_add"))
			}
			if name != "hf/qwen2" && countKernel(ft, "rmsnorm_rope") == 0 {
				t.Errorf("fused run of a QK-norm model used no rmsnorm_rope")
			}
			if countKernel(st, "dn_conv_state") > 0 && (countKernel(ft, "dn_conv_both")+countKernel(ft, "dn_step") == 0 || countKernel(ft, "dn_conv_state") > 0) {
				t.Errorf("fused run of a DeltaNet model: %d dn_conv_both, %d dn_conv_state", countKernel(ft, "dn_conv_both"), countKernel(ft, "dn_conv_state"))
			}
			if countKernel(st, "dn_rule") > 0 && (countKernel(ft, "dn_step") == 0 || countKernel(ft, "dn_rule") >= countKernel(st, "dn_rule") || countKernel(ft, "dn_gated_norm") >= countKernel(st, "dn_gated_norm")) {
				t.Errorf("fused run of a DeltaNet model: %d dn_step, %d dn_rule, %d dn_gated_norm (separate %d, %d): decode steps must use dn_step", countKernel(ft, "dn_step"), countKernel(ft, "dn_rule"), countKernel(ft, "dn_gated_norm"), countKernel(st, "dn_rule"), countKernel(st, "dn_gated_norm"))
			}
			if name != "hf/qwen2" && countKernel(st, "store_kv") > 0 && (countKernel(ft, "rmsnorm_rope_kv") == 0 || countKernel(ft, "store_kv") > 0) {
				t.Errorf("fused run of a QK-norm model: %d rmsnorm_rope_kv, %d store_kv (the key's rope writes the cache)", countKernel(ft, "rmsnorm_rope_kv"), countKernel(ft, "store_kv"))
			}
			if countKernel(st, "deinterleave") > 0 && countKernel(ft, "deinterleave") > 0 {
				t.Errorf("fused run of a gated-attention model: %d deinterleave (the q projection's matmul_multi splits its output)", countKernel(ft, "deinterleave"))
			}
			if countKernel(st, "moe_route") > 0 && (countKernel(ft, "moe_route_gate_up") == 0 || countKernel(ft, "moe_route") > 0) {
				t.Errorf("fused run of a MoE model: %d moe_route_gate_up, %d moe_route", countKernel(ft, "moe_route_gate_up"), countKernel(ft, "moe_route"))
			}
			if name == "hf/qwen3_5_moe" && countKernel(ft, "matmul_gate_up") >= countKernel(st, "matmul_gate_up") {
				t.Errorf("fused run of a shared-expert MoE: %d matmul_gate_up, separate %d (the shared gate/up joins moe_route_gate_up)", countKernel(ft, "matmul_gate_up"), countKernel(st, "matmul_gate_up"))
			}
			if countKernel(st, "sigmoid_mul") > 0 && (countKernel(ft, "attention_gated") == 0 || countKernel(ft, "sigmoid_mul") > 0) {
				t.Errorf("fused run of a gated-attention model: %d attention_gated, %d sigmoid_mul", countKernel(ft, "attention_gated"), countKernel(ft, "sigmoid_mul"))
			}
			if countKernel(ft, "matmul_multi") == 0 {
				t.Errorf("fused run used no matmul_multi")
			}
			if countKernel(st, "rmsnorm_matmul")+countKernel(st, "matmul_add")+countKernel(st, "rmsnorm_rope")+countKernel(st, "matmul_multi")+countKernel(st, "moe_route_gate_up")+countKernel(st, "attention_gated")+countKernel(st, "dn_step")+countKernel(st, "rmsnorm_rope_kv") != 0 {
				t.Errorf("NoFusion run used fused kernels")
			}
			if len(ft) >= len(st) {
				t.Errorf("fused run: %d dispatches, separate %d", len(ft), len(st))
			}
			t.Logf("%s: %d dispatches fused, %d separate", name, len(ft), len(st))
		})
	}
}

// TestFusedKernelsBits compares each fused kernel with the dispatches it
// replaces on random data, in every matmul format, for 1-8 rows (the norm
// fusion) and 13 rows (the add epilogue), with and without a bias.
func TestFusedKernelsBits(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const K, N = 512, 40
	formats := []tensor.Format{tensor.F32, tensor.BF16, tensor.F16, tensor.Q8_0, tensor.Q4_0, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K}
	for _, f := range formats {
		hw := hostOf(r, f, N, K)
		nw, bias := vecHost(r, K), vecHost(r, N)
		xv, resv := randn(r, 13*K), randn(r, 13*N)
		for _, rows := range []int{1, 3, 8, 13} {
			for _, withBias := range []bool{false, true} {
				run := func(noFuse bool) ([]float32, []float32, []float32, int) {
					be, err := New(Config{Device: newTestDevice(t), Name: testBackendName, NoFusion: noFuse})
					if err != nil {
						t.Fatal(err)
					}
					defer be.Close()
					w, _ := be.Upload(hw)
					n, _ := be.Upload(nw)
					var bw engine.Weight
					if withBias {
						bw, _ = be.Upload(bias)
					}
					x, h, y, res := be.NewTensor(rows, K), be.NewTensor(rows, K), be.NewTensor(rows, N), be.NewTensor(rows, N)
					be.Write(x, xv[:rows*K])
					be.Write(res, resv[:rows*N])
					be.StartTrace()
					be.RMSNorm(h, x, n, engine.NormParams{Dim: K, Eps: 1e-6, Offset: 1})
					be.MatMul(y, h, w, bw)
					be.Add(res, res, y)
					tr := be.StopTrace()
					out := func(t2 engine.Tensor, n int) []float32 {
						v := make([]float32, n)
						if err := be.Read(t2, v); err != nil {
							t.Fatal(err)
						}
						return v
					}
					return out(h, rows*K), out(y, rows*N), out(res, rows*N), len(tr)
				}
				h1, y1, r1, n1 := run(false)
				h2, y2, r2, n2 := run(true)
				if diffBits(h1, h2)+diffBits(y1, y2)+diffBits(r1, r2) > 0 {
					t.Errorf("%v rows %d bias %v: fused norm/matmul/add differ from separate (%d, %d, %d values)", f, rows, withBias, diffBits(h1, h2), diffBits(y1, y2), diffBits(r1, r2))
				}
				want := 2 // norm+matmul, add (at most 8 rows); else norm, matmul+add
				if n2 != 3 || n1 != want {
					t.Errorf("%v rows %d: %d dispatches fused (want %d), %d separate (want 3)", f, rows, n1, want, n2)
				}
			}
		}
	}
}

func countKernel(trace []DispatchRecord, name string) int {
	n := 0
	for _, d := range trace {
		if d.Kernel == name {
			n++
		}
	}
	return n
}

// TestNormRopeBits: QK-norm of q and k followed by their ropes (the order
// the models use) take two rmsnorm_rope dispatches with the bits of the
// four separate ones, for full and partial rotary, zero-centred weights,
// 1-300 rows (positions up to 4,000).
func TestNormRopeBits(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		heads, kvHeads, hd, rot, rows int
		offset                        float32
	}{{4, 2, 64, 64, 1, 0}, {8, 2, 128, 32, 3, 1}, {2, 1, 256, 64, 300, 0}} {
		nq, nk := vecHost(r, c.hd), vecHost(r, c.hd)
		qv, kv := randn(r, c.rows*c.heads*c.hd), randn(r, c.rows*c.kvHeads*c.hd)
		pos := make([]int, c.rows)
		for i := range pos {
			pos[i] = r.IntN(4000)
		}
		run := func(noFuse bool) ([]float32, []float32, int) {
			be, err := New(Config{Device: newTestDevice(t), Name: testBackendName, NoFusion: noFuse})
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			wq, _ := be.Upload(nq)
			wk, _ := be.Upload(nk)
			q, k := be.NewTensor(c.rows, c.heads*c.hd), be.NewTensor(c.rows, c.kvHeads*c.hd)
			be.Write(q, qv)
			be.Write(k, kv)
			be.StartTrace()
			np := engine.NormParams{Dim: c.hd, Eps: 1e-6, Offset: c.offset}
			be.RMSNorm(q, q, wq, np)
			be.RMSNorm(k, k, wk, np)
			rp := engine.RopeParams{Heads: c.heads, HeadDim: c.hd, RotaryDim: c.rot, Theta: 1e6}
			be.Rope(q, pos, rp)
			rp.Heads = c.kvHeads
			be.Rope(k, pos, rp)
			n := len(be.StopTrace())
			qo, ko := make([]float32, len(qv)), make([]float32, len(kv))
			if err := be.Read(q, qo); err != nil {
				t.Fatal(err)
			}
			if err := be.Read(k, ko); err != nil {
				t.Fatal(err)
			}
			return qo, ko, n
		}
		q1, k1, n1 := run(false)
		q2, k2, n2 := run(true)
		if bad := diffBits(q1, q2) + diffBits(k1, k2); bad > 0 {
			t.Errorf("%+v: %d values differ between rmsnorm_rope and rmsnorm + rope", c, bad)
		}
		if n1 != 2 || n2 != 4 {
			t.Errorf("%+v: %d dispatches fused (want 2), %d separate (want 4)", c, n1, n2)
		}
	}
}

// TestMatMulMultiBits: up to four matmuls of one x (the q, k, v projections;
// a linear-attention layer's four), in formats that differ per matrix, one
// with a bias, after the norm that produced x or without one, take one
// matmul_multi dispatch with the bits of the separate dispatches.
func TestMatMulMultiBits(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const K = 256
	mats := []struct {
		f tensor.Format
		n int
	}{{tensor.Q4_0, 40}, {tensor.BF16, 24}, {tensor.F32, 8}, {tensor.Q6_K, 12}}
	var hosts []*tensor.Host
	for _, m := range mats {
		hosts = append(hosts, hostOf(r, m.f, m.n, K))
	}
	nw, bias := vecHost(r, K), vecHost(r, 24)
	xv := randn(r, 8*K)
	for _, rows := range []int{1, 5, 8} {
		for _, count := range []int{2, 3, 4} {
			for _, norm := range []bool{false, true} {
				run := func(noFuse bool) ([][]float32, int) {
					be, err := New(Config{Device: newTestDevice(t), Name: testBackendName, NoFusion: noFuse})
					if err != nil {
						t.Fatal(err)
					}
					defer be.Close()
					x, h := be.NewTensor(rows, K), be.NewTensor(rows, K)
					be.Write(x, xv[:rows*K])
					nwt, _ := be.Upload(nw)
					bw, _ := be.Upload(bias)
					var outs []engine.Tensor
					var ws []engine.Weight
					for j := range count {
						w, err := be.Upload(hosts[j])
						if err != nil {
							t.Fatal(err)
						}
						ws = append(ws, w)
						outs = append(outs, be.NewTensor(rows, mats[j].n))
					}
					be.StartTrace()
					in := x
					if norm {
						be.RMSNorm(h, x, nwt, engine.NormParams{Dim: K, Eps: 1e-6})
						in = h
					}
					for j := range count {
						var b engine.Weight
						if j == 1 {
							b = bw
						}
						be.MatMul(outs[j], in, ws[j], b)
					}
					be.Add(outs[0], outs[0], outs[0]) // any later op flushes the group
					n := len(be.StopTrace())
					var res [][]float32
					for j, o := range append(outs, h) {
						if j == count && !norm {
							break
						}
						v := make([]float32, o.Rows()*o.Cols())
						if err := be.Read(o, v); err != nil {
							t.Fatal(err)
						}
						res = append(res, v)
					}
					return res, n
				}
				fused, nf := run(false)
				sep, ns := run(true)
				for j := range fused {
					if bad := diffBits(fused[j], sep[j]); bad > 0 {
						t.Errorf("rows %d, %d matrices, norm %v: output %d: %d values differ", rows, count, norm, j, bad)
					}
				}
				wantSep := count + 1
				if norm {
					wantSep++
				}
				if nf != 2 || ns != wantSep {
					t.Errorf("rows %d, %d matrices, norm %v: %d dispatches fused (want 2), %d separate (want %d)", rows, count, norm, nf, ns, wantSep)
				}
			}
		}
	}
}

// TestDNStepBits: the one-dispatch DeltaNet decode step (dn_step: conv,
// conv state, rule, gated norm) against dn_conv_both, dn_rule and
// dn_gated_norm (NoFusion), bit for bit: outputs and both states after
// steps of 1-8 tokens (dn_step) mixed with longer ones (the separate
// kernels), from fresh and from carried states, two sequences per call,
// head sizes that leave lanes idle and two value heads per key head.
func TestDNStepBits(t *testing.T) {
	p := engine.DeltaNetParams{KeyHeads: 2, ValueHeads: 4, KeyDim: 40, ValueDim: 36, ConvKernel: 4, Eps: 1e-6}
	C, vd, nv := p.ConvDim(), p.ValueHeads*p.ValueDim, p.ValueHeads
	steps := [][2]int{{1, 1}, {3, 1}, {1, 8}, {12, 2}, {1, 1}, {2, 5}, {1, 1}}
	run := func(noFuse bool) ([]float32, int) {
		r := rand.New(rand.NewPCG(11, 12))
		scaled := func(n int, s float32) []float32 {
			v := randn(r, n)
			for i := range v {
				v[i] *= s
			}
			return v
		}
		be, err := New(Config{Device: newTestDevice(t), Name: testBackendName, NoFusion: noFuse})
		if err != nil {
			t.Fatal(err)
		}
		defer be.Close()
		up := func(h *tensor.Host) engine.Weight {
			w, err := be.Upload(h)
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		var w engine.DeltaNetWeights
		w.Conv = up(f32Host(scaled(C*p.ConvKernel, 0.5), C, p.ConvKernel))
		w.ALog = up(f32Host(scaled(nv, 1), nv))
		w.DtBias = up(f32Host(scaled(nv, 1), nv))
		w.Norm = up(f32Host(scaled(p.ValueDim, 1), p.ValueDim))
		var st [2]engine.DeltaNetState
		for i := range st {
			if st[i], err = be.NewDeltaNetState(p); err != nil {
				t.Fatal(err)
			}
		}
		var all []float32
		be.StartTrace()
		for _, s := range steps {
			T := s[0] + s[1]
			in := func(cols int) engine.Tensor {
				x := be.NewTensor(T, cols)
				be.Write(x, scaled(T*cols, 1))
				return x
			}
			qkv, z, bb, a := in(C), in(vd), in(nv), in(nv)
			d := be.NewTensor(T, vd)
			be.GatedDeltaNet(d, qkv, z, bb, a, w, []engine.DeltaNetSeq{
				{State: st[0], Row: 0, N: s[0], Pos: st[0].Len()}, {State: st[1], Row: s[0], N: s[1], Pos: st[1].Len()}}, p)
			v := make([]float32, T*vd)
			if err := be.Read(d, v); err != nil {
				t.Fatal(err)
			}
			all = append(all, v...)
		}
		tr := be.StopTrace()
		for _, s := range st {
			ds := s.(*dnState)
			for _, b := range []gpu.Buffer{ds.conv[ds.cur], ds.rule[ds.cur]} {
				raw := b.Bytes()
				for i := 0; i+4 <= len(raw); i += 4 {
					all = append(all, math.Float32frombits(binary.LittleEndian.Uint32(raw[i:])))
				}
			}
		}
		return all, countKernel(tr, "dn_step")
	}
	fused, nf := run(false)
	separate, ns := run(true)
	if bad := diffBits(fused, separate); bad > 0 {
		t.Errorf("dn_step: %d of %d values (outputs, conv and rule states) differ from the separate kernels", bad, len(fused))
	}
	if nf != 13 || ns != 0 {
		t.Errorf("%d dn_step dispatches fused (want 13), %d separate", nf, ns)
	}
}
