package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/tensor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newBackend(t testing.TB, threads int) *Backend {
	t.Helper()
	b, err := New(Config{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func randn(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func tensorOf(b *Backend, rows, cols int, v []float32) *Tensor {
	t := b.NewTensor(rows, cols)
	b.Write(t, v)
	return t.(*Tensor)
}

// host encodes v ([rows, cols]) in format f, returning the tensor and the
// exactly representable float32 values it holds.
func host(t *testing.T, r *rand.Rand, f tensor.Format, rows, cols int) (*tensor.Host, []float32) {
	t.Helper()
	v := randn(r, rows*cols)
	h := &tensor.Host{Name: "w", Format: f, Shape: []int{rows, cols}}
	if rows == 1 {
		h.Shape = []int{cols}
	}
	switch f {
	case tensor.F32:
		h.Data = make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(h.Data[4*i:], math.Float32bits(x))
		}
	case tensor.BF16:
		h.Data = make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(h.Data[2*i:], tensor.F32ToBF16(x))
		}
	case tensor.F16:
		h.Data = make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(h.Data[2*i:], tensor.F32ToF16(x))
		}
	case tensor.Q8_0: // blocks of 32: f16 scale + 32 int8
		if cols%32 != 0 {
			t.Fatalf("Q8_0 cols %d", cols)
		}
		nb := rows * cols / 32
		h.Data = make([]byte, 34*nb)
		for blk := range nb {
			o := 34 * blk
			binary.LittleEndian.PutUint16(h.Data[o:], tensor.F32ToF16(0.01+r.Float32()*0.05))
			for i := range 32 {
				h.Data[o+2+i] = byte(int8(r.IntN(255) - 127))
			}
		}
	case tensor.Q4_0: // blocks of 32: f16 scale + 16 bytes of 4-bit codes
		nb := rows * cols / 32
		h.Data = make([]byte, 18*nb)
		for blk := range nb {
			o := 18 * blk
			binary.LittleEndian.PutUint16(h.Data[o:], tensor.F32ToF16(0.01+r.Float32()*0.05))
			for i := range 16 {
				h.Data[o+2+i] = byte(r.Uint32())
			}
		}
	case tensor.Q4_K, tensor.Q5_K, tensor.Q6_K: // k-quant super-blocks of 256: random codes and scales, realistic f16 d (kquant)
		if cols%tensor.QKK != 0 {
			t.Fatalf("%v cols %d", f, cols)
		}
		bs := map[tensor.Format]int{tensor.Q4_K: tensor.BlockBytesQ4_K, tensor.Q5_K: tensor.BlockBytesQ5_K, tensor.Q6_K: tensor.BlockBytesQ6_K}[f]
		h.Data = make([]byte, rows*cols/tensor.QKK*bs)
		for i := range h.Data {
			h.Data[i] = byte(r.Uint32())
		}
		for o := 0; o < len(h.Data); o += bs {
			if f == tensor.Q6_K { // d last
				binary.LittleEndian.PutUint16(h.Data[o+bs-2:], tensor.F32ToF16(1e-4+r.Float32()*1e-3))
				continue
			}
			binary.LittleEndian.PutUint16(h.Data[o:], tensor.F32ToF16(1e-3+r.Float32()*1e-2))   // d (Q4_K, Q5_K)
			binary.LittleEndian.PutUint16(h.Data[o+2:], tensor.F32ToF16(1e-3+r.Float32()*1e-2)) // dmin
		}
	default:
		t.Fatalf("format %v", f)
	}
	exact, err := h.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return h, exact
}

func relL2(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

func check(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	if e := relL2(got, want); e > tol || math.IsNaN(e) {
		t.Errorf("%s: relative L2 error %.3g, want <= %.3g", what, e, tol)
	}
}

// TestMatMul checks every format against float64 sums of the exactly
// decoded weights. With ExactMatMul the error is float32 rounding; by
// default quantized weights meet int8-quantized activations (llama.cpp's
// scheme), which costs up to ~1% relative error.
func TestMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, cfg := range []Config{{Threads: 1, ExactMatMul: true}, {Threads: 3, ExactMatMul: true}, {Threads: 2}} {
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		threads := cfg.Threads
		for _, f := range []tensor.Format{tensor.F32, tensor.BF16, tensor.F16, tensor.Q8_0} {
			// N*K above vectorLimit so matrices stay in their stored format.
			N, K := 517, 131
			tol := 1e-6
			if f == tensor.Q8_0 {
				N, K = 431, 160
				if !cfg.ExactMatMul {
					tol = 2e-2
				}
			}
			for _, M := range []int{1, 2, 3, 5, 37} {
				for _, withBias := range []bool{false, true} {
					t.Run(fmt.Sprintf("threads%d/exact%v/%v/M%d/bias%v", threads, cfg.ExactMatMul, f, M, withBias), func(t *testing.T) {
						h, wv := host(t, r, f, N, K)
						w, err := b.Upload(h)
						if err != nil {
							t.Fatal(err)
						}
						var bias engine.Weight
						var bv []float32
						if withBias {
							bh, v := host(t, r, tensor.BF16, 1, N)
							bv = v
							if bias, err = b.Upload(bh); err != nil {
								t.Fatal(err)
							}
						}
						x := randn(r, M*K)
						dst := b.NewTensor(M, N)
						b.MatMul(dst, tensorOf(b, M, K, x), w, bias)
						want := make([]float32, M*N)
						for m := range M {
							for n := range N {
								var s float64
								for k := range K {
									s += float64(x[m*K+k]) * float64(wv[n*K+k])
								}
								if bv != nil {
									s += float64(bv[n])
								}
								want[m*N+n] = float32(s)
							}
						}
						check(t, "matmul", dst.(*Tensor).data, want, tol)
					})
				}
			}
		}
	}
}

func TestUploadKeepsStoredFormat(t *testing.T) {
	b := newBackend(t, 1)
	r := rand.New(rand.NewPCG(3, 4))
	h, _ := host(t, r, tensor.BF16, 300, 301)
	w, err := b.Upload(h)
	if err != nil {
		t.Fatal(err)
	}
	cw := w.(*Weight)
	if cw.u16 == nil || cw.f32 != nil || &cw.u16[0] != (*uint16)(unsafePointer(h.Data)) {
		t.Errorf("bf16 matrix was copied or decoded at upload")
	}
	bad := &tensor.Host{Name: "bad", Format: tensor.BF16, Shape: []int{4, 4}, Data: make([]byte, 10)}
	if _, err := b.Upload(bad); err == nil {
		t.Errorf("upload of a short tensor: no error")
	}
}

func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	b := newBackend(t, 2)
	for _, tc := range []struct {
		rows, cols, dim int
		offset          float32
	}{{3, 37, 37, 0}, {5, 3 * 13, 13, 0}, {2, 40, 8, 1}} {
		t.Run(fmt.Sprintf("%dx%d/d%d/off%g", tc.rows, tc.cols, tc.dim, tc.offset), func(t *testing.T) {
			x := randn(r, tc.rows*tc.cols)
			wh, wv := host(t, r, tensor.BF16, 1, tc.dim)
			w, _ := b.Upload(wh)
			dst := b.NewTensor(tc.rows, tc.cols)
			const eps = 1e-6
			b.RMSNorm(dst, tensorOf(b, tc.rows, tc.cols, x), w, engine.NormParams{Dim: tc.dim, Eps: eps, Offset: tc.offset})
			want := make([]float32, len(x))
			for c := 0; c < len(x); c += tc.dim {
				var ss float64
				for _, v := range x[c : c+tc.dim] {
					ss += float64(v) * float64(v)
				}
				s := 1 / math.Sqrt(ss/float64(tc.dim)+eps)
				for i := range tc.dim {
					want[c+i] = float32(float64(x[c+i]) * s * float64(tc.offset+wv[i]))
				}
			}
			check(t, "rmsnorm", dst.(*Tensor).data, want, 1e-6)
			// In place gives the same.
			xt := tensorOf(b, tc.rows, tc.cols, x)
			b.RMSNorm(xt, xt, w, engine.NormParams{Dim: tc.dim, Eps: eps, Offset: tc.offset})
			check(t, "rmsnorm in place", xt.data, want, 1e-6)
		})
	}
}

func TestRope(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	b := newBackend(t, 2)
	for _, tc := range []struct{ heads, hd, rot int }{{3, 16, 16}, {2, 12, 8}, {5, 10, 2}} {
		t.Run(fmt.Sprintf("h%d/hd%d/rot%d", tc.heads, tc.hd, tc.rot), func(t *testing.T) {
			rows := 7
			x := randn(r, rows*tc.heads*tc.hd)
			pos := []int{0, 1, 5, 100, 3, 2047, 9}
			xt := tensorOf(b, rows, tc.heads*tc.hd, x)
			p := engine.RopeParams{Heads: tc.heads, HeadDim: tc.hd, RotaryDim: tc.rot, Theta: 10000}
			b.Rope(xt, pos, p)
			want := append([]float32(nil), x...)
			half := tc.rot / 2
			for rr := range rows {
				for h := range tc.heads {
					o := rr*tc.heads*tc.hd + h*tc.hd
					for i := range half {
						a := float64(pos[rr]) / math.Pow(10000, float64(2*i)/float64(tc.rot))
						x1, x2 := float64(x[o+i]), float64(x[o+i+half])
						want[o+i] = float32(x1*math.Cos(a) - x2*math.Sin(a))
						want[o+i+half] = float32(x2*math.Cos(a) + x1*math.Sin(a))
					}
				}
			}
			check(t, "rope", xt.data, want, 1e-5)
		})
	}
}

// naiveAttention computes causal GQA attention of rows q (positions
// pos0..pos0+n-1) over keys/values k, v ([pos0+n, kvHeads*hd]) in float64.
func naiveAttention(q, k, v []float32, n, pos0, heads, kvHeads, hd int) []float32 {
	out := make([]float32, n*heads*hd)
	group := heads / kvHeads
	scale := 1 / math.Sqrt(float64(hd))
	for i := range n {
		for h := range heads {
			kh := h / group
			L := pos0 + i + 1
			s := make([]float64, L)
			mx := math.Inf(-1)
			for j := range L {
				var d float64
				for x := range hd {
					d += float64(q[(i*heads+h)*hd+x]) * float64(k[(j*kvHeads+kh)*hd+x])
				}
				s[j] = d * scale
				mx = math.Max(mx, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			for x := range hd {
				var acc float64
				for j := range L {
					acc += s[j] * float64(v[(j*kvHeads+kh)*hd+x])
				}
				out[(i*heads+h)*hd+x] = float32(acc / sum)
			}
		}
	}
	return out
}

func TestAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	b := newBackend(t, 3)
	heads, kvHeads, hd := 6, 2, 9
	qd, kvd := heads*hd, kvHeads*hd
	p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd)))}
	// Three sequences: each has a prefix already cached, then new rows.
	type seq struct{ prefix, n int }
	specs := []seq{{0, 5}, {11, 1}, {3, 19}}
	var attn []engine.AttnSeq
	var allK, allV [][]float32
	T := 0
	for _, s := range specs {
		kv, err := b.NewKV(kvHeads, hd)
		if err != nil {
			t.Fatal(err)
		}
		k, v := randn(r, (s.prefix+s.n)*kvd), randn(r, (s.prefix+s.n)*kvd)
		allK, allV = append(allK, k), append(allV, v)
		if s.prefix > 0 {
			b.StoreKV(tensorOf(b, s.prefix, kvd, k[:s.prefix*kvd]), tensorOf(b, s.prefix, kvd, v[:s.prefix*kvd]),
				[]engine.AttnSeq{{KV: kv, Row: 0, N: s.prefix, Pos: 0}})
		}
		attn = append(attn, engine.AttnSeq{KV: kv, Row: T, N: s.n, Pos: s.prefix})
		T += s.n
	}
	kNew, vNew := make([]float32, 0, T*kvd), make([]float32, 0, T*kvd)
	for i, s := range specs {
		kNew = append(kNew, allK[i][s.prefix*kvd:]...)
		vNew = append(vNew, allV[i][s.prefix*kvd:]...)
	}
	q := randn(r, T*qd)
	b.StoreKV(tensorOf(b, T, kvd, kNew), tensorOf(b, T, kvd, vNew), attn)
	dst := b.NewTensor(T, qd)
	b.Attention(dst, tensorOf(b, T, qd, q), attn, p)
	for i, s := range specs {
		if got := attn[i].KV.Len(); got != s.prefix+s.n {
			t.Errorf("sequence %d: cache length %d, want %d", i, got, s.prefix+s.n)
		}
		row := attn[i].Row
		want := naiveAttention(q[row*qd:(row+s.n)*qd], allK[i], allV[i], s.n, s.prefix, heads, kvHeads, hd)
		check(t, fmt.Sprintf("attention sequence %d", i), dst.(*Tensor).data[row*qd:(row+s.n)*qd], want, 1e-6)
	}
	// Truncate then rewrite: position 2 of sequence 0 replaced.
	if err := attn[0].KV.Truncate(2); err != nil {
		t.Fatal(err)
	}
	if err := attn[0].KV.Truncate(3); err == nil {
		t.Errorf("truncate beyond length: no error")
	}
	for _, s := range attn {
		s.KV.Free()
	}
}

func TestElementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	b := newBackend(t, 2)
	rows, cols := 13, 29
	n := rows * cols
	x, y := randn(r, n), randn(r, n)
	xt, yt := tensorOf(b, rows, cols, x), tensorOf(b, rows, cols, y)
	dst := b.NewTensor(rows, cols)
	want := make([]float32, n)

	b.SwiGLU(dst, xt, yt)
	for i := range want {
		want[i] = float32(float64(x[i]) / (1 + math.Exp(-float64(x[i]))) * float64(y[i]))
	}
	check(t, "swiglu", dst.(*Tensor).data, want, 1e-6)

	b.SigmoidMul(dst, xt, yt)
	for i := range want {
		want[i] = float32(float64(x[i]) / (1 + math.Exp(-float64(y[i]))))
	}
	check(t, "sigmoidmul", dst.(*Tensor).data, want, 1e-6)

	b.Add(dst, xt, yt)
	for i := range want {
		want[i] = x[i] + y[i]
	}
	check(t, "add", dst.(*Tensor).data, want, 0)

	g := b.NewTensor(3, cols)
	b.Gather(g, xt, []int{12, 0, 5})
	check(t, "gather", g.(*Tensor).data, append(append(append([]float32{}, x[12*cols:13*cols]...), x[:cols]...), x[5*cols:6*cols]...), 0)

	c := b.NewTensor(4, 7)
	b.Copy(c, 1, 2, xt, 3, 10, 2, 5)
	wantC := make([]float32, 28)
	for rr := range 2 {
		copy(wantC[(1+rr)*7+2:(1+rr)*7+7], x[(3+rr)*cols+10:(3+rr)*cols+15])
	}
	check(t, "copy", c.(*Tensor).data, wantC, 0)

	for _, f := range []tensor.Format{tensor.BF16, tensor.F32, tensor.F16, tensor.Q8_0} {
		vocab, hidden := 301, 256
		h, tab := host(t, r, f, vocab, hidden)
		w, err := b.Upload(h)
		if err != nil {
			t.Fatal(err)
		}
		ids := []int{300, 0, 17, 17, 5}
		e := b.NewTensor(len(ids), hidden)
		b.Embed(e, w, ids)
		var wantE []float32
		for _, id := range ids {
			wantE = append(wantE, tab[id*hidden:(id+1)*hidden]...)
		}
		check(t, fmt.Sprintf("embed %v", f), e.(*Tensor).data, wantE, 0)
	}
}

func TestConfigAndClose(t *testing.T) {
	if _, err := New(Config{Threads: 0}); err == nil || err.Error() != "cpu threads 0 must be at least 1" {
		t.Errorf("threads 0: got %v", err)
	}
	b, err := New(Config{Threads: 4})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	b.Close() // idempotent; goleak checks the workers are gone
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

// BenchmarkAttentionDecode: one query row of Qwen3-0.6B's attention shape
// (16 q heads, 8 kv heads, head_dim 128) over 4096 cached positions.
func BenchmarkAttentionDecode(b *testing.B) {
	be := newBackend(b, runtimeThreads())
	r := rand.New(rand.NewPCG(1, 1))
	const heads, kvHeads, hd, L = 16, 8, 128, 4096
	kv, _ := be.NewKV(kvHeads, hd)
	k := tensorOf(be, L, kvHeads*hd, randn(r, L*kvHeads*hd))
	v := tensorOf(be, L, kvHeads*hd, randn(r, L*kvHeads*hd))
	be.StoreKV(k, v, []engine.AttnSeq{{KV: kv, N: L - 1}})
	q := tensorOf(be, 1, heads*hd, randn(r, heads*hd))
	k1 := tensorOf(be, 1, kvHeads*hd, randn(r, kvHeads*hd))
	dst := be.NewTensor(1, heads*hd)
	p := engine.AttnParams{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.088}
	seq := []engine.AttnSeq{{KV: kv, N: 1, Pos: L - 1}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		be.StoreKV(k1, k1, seq)
		be.Attention(dst, q, seq, p)
	}
}

func runtimeThreads() int { return DefaultConfig().Threads }

// TestRopeReusedAngles checks that Rope's cached angles follow every change
// of what they depend on — the positions (same slice rewritten, other
// length), the theta (inverse frequencies) and the attention factor — by
// comparing a sequence of calls on one backend with each call on a fresh
// one, bit for bit.
func TestRopeReusedAngles(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	b := newBackend(t, 2)
	pos := []int{0, 1, 2, 3, 4, 5}
	type call struct {
		pos   []int
		theta float64
		af    float32
	}
	calls := []call{
		{[]int{0, 1, 2, 3, 4, 5}, 10000, 0},
		{[]int{0, 1, 2, 3, 4, 5}, 10000, 0}, // reused
		{[]int{6, 1, 2, 3, 4, 5}, 10000, 0}, // one position moved, same slice
		{[]int{6, 1, 2}, 10000, 0},
		{[]int{6, 1, 2}, 1e6, 0},
		{[]int{6, 1, 2}, 1e6, 0.5},
	}
	for i, c := range calls {
		pos = append(pos[:0], c.pos...)
		p := engine.RopeParams{Heads: 2, HeadDim: 8, RotaryDim: 8, Theta: c.theta, AttentionFactor: c.af}
		x := randn(r, len(pos)*16)
		got := tensorOf(b, len(pos), 16, x)
		b.Rope(got, pos, p)
		fresh := newBackend(t, 2)
		want := tensorOf(fresh, len(pos), 16, x)
		fresh.Rope(want, append([]int(nil), c.pos...), p)
		for j := range want.data {
			if math.Float32bits(got.data[j]) != math.Float32bits(want.data[j]) {
				t.Fatalf("call %d (%+v) value %d: %v after earlier calls, %v on a fresh backend", i, c, j, got.data[j], want.data[j])
			}
		}
	}
}
