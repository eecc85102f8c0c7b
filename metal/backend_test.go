//go:build linux || darwin

package metal

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu"
	"github.com/macpool/macpool/engine/tensor"
)

// newEmu returns the metal backend on the test device (emulator on Linux,
// the real GPU on macOS).
func newEmu(t testing.TB) *Backend {
	t.Helper()
	b, err := New(Config{Device: newTestDevice(t), Name: testBackendName})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newCPU(t testing.TB) *cpu.Backend {
	t.Helper()
	b, err := cpu.New(cpu.Config{Threads: 2, ExactMatMul: true})
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

func relL2(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / max(den, 1e-30))
}

// pair holds the same tensor on both backends.
type pair struct {
	m, c engine.Tensor
	rows int
	cols int
}

type both struct {
	t    *testing.T
	m    *Backend
	c    *cpu.Backend
	rand *rand.Rand
}

func newBoth(t *testing.T) *both {
	return &both{t: t, m: newEmu(t), c: newCPU(t), rand: rand.New(rand.NewPCG(1, 2))}
}

func (b *both) tensor(rows, cols int, v []float32) pair {
	p := pair{m: b.m.NewTensor(rows, cols), c: b.c.NewTensor(rows, cols), rows: rows, cols: cols}
	if v == nil {
		v = randn(b.rand, rows*cols)
	}
	b.m.Write(p.m, v)
	b.c.Write(p.c, v)
	return p
}

func (b *both) weight(h *tensor.Host) (engine.Weight, engine.Weight) {
	b.t.Helper()
	wm, err := b.m.Upload(h)
	if err != nil {
		b.t.Fatal(err)
	}
	wc, err := b.c.Upload(h)
	if err != nil {
		b.t.Fatal(err)
	}
	return wm, wc
}

// check compares the tensor on both backends (rel-L2 below tol).
func (b *both) check(name string, p pair, tol float64) {
	b.t.Helper()
	got, want := make([]float32, p.rows*p.cols), make([]float32, p.rows*p.cols)
	if err := b.m.Read(p.m, got); err != nil {
		b.t.Fatal(err)
	}
	if err := b.c.Read(p.c, want); err != nil {
		b.t.Fatal(err)
	}
	if e := relL2(got, want); e >= tol || math.IsNaN(e) {
		b.t.Errorf("%s: relative L2 error %.3g, want < %g", name, e, tol)
	}
}

// hostOf makes a [rows, cols] weight in format f with random contents.
func hostOf(r *rand.Rand, f tensor.Format, rows, cols int) *tensor.Host {
	h := &tensor.Host{Name: "w", Format: f, Shape: []int{rows, cols}}
	v := randn(r, rows*cols)
	switch f {
	case tensor.F32:
		for _, x := range v {
			h.Data = binary.LittleEndian.AppendUint32(h.Data, math.Float32bits(x))
		}
	case tensor.BF16:
		for _, x := range v {
			h.Data = binary.LittleEndian.AppendUint16(h.Data, tensor.F32ToBF16(x))
		}
	case tensor.F16:
		for _, x := range v {
			h.Data = binary.LittleEndian.AppendUint16(h.Data, tensor.F32ToF16(x))
		}
	case tensor.Q8_0, tensor.Q4_0, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K:
		vals, bs, _ := tensor.BlockLayout(f)
		h.Data = make([]byte, rows*cols/vals*bs)
		for i := range h.Data {
			h.Data[i] = byte(r.IntN(256))
		}
		for blk := 0; blk < rows*cols/vals; blk++ {
			b := h.Data[blk*bs : (blk+1)*bs]
			switch f {
			case tensor.Q4_K, tensor.Q5_K: // d, dmin
				binary.LittleEndian.PutUint16(b, tensor.F32ToF16(0.001+0.005*r.Float32()))
				binary.LittleEndian.PutUint16(b[2:], tensor.F32ToF16(0.001+0.005*r.Float32()))
			case tensor.Q6_K: // d last
				binary.LittleEndian.PutUint16(b[bs-2:], tensor.F32ToF16(0.0005+0.001*r.Float32()))
			default:
				binary.LittleEndian.PutUint16(b, tensor.F32ToF16(0.01+0.05*r.Float32()))
			}
		}
	}
	return h
}

func mlxHost(r *rand.Rand, bits, group, rows, cols int) *tensor.Host {
	h := &tensor.Host{Name: "w", Format: tensor.MLXAffine, Shape: []int{rows, cols}, Bits: bits, GroupSize: group}
	h.Data = make([]byte, rows*cols*bits/8)
	for i := range h.Data {
		h.Data[i] = byte(r.IntN(256))
	}
	groups := rows * cols / group
	h.Scales = &tensor.Host{Name: "w.scales", Format: tensor.BF16, Shape: []int{rows, cols / group}}
	h.Biases = &tensor.Host{Name: "w.biases", Format: tensor.F16, Shape: []int{rows, cols / group}}
	for range groups {
		h.Scales.Data = binary.LittleEndian.AppendUint16(h.Scales.Data, tensor.F32ToBF16(0.02*float32(r.NormFloat64())))
		h.Biases.Data = binary.LittleEndian.AppendUint16(h.Biases.Data, tensor.F32ToF16(0.1*float32(r.NormFloat64())))
	}
	return h
}

func vecHost(r *rand.Rand, n int) *tensor.Host {
	h := &tensor.Host{Name: "v", Format: tensor.F32, Shape: []int{n}}
	for _, x := range randn(r, n) {
		h.Data = binary.LittleEndian.AppendUint32(h.Data, math.Float32bits(x))
	}
	return h
}

func TestMatMul(t *testing.T) {
	b := newBoth(t)
	type tc struct {
		name string
		h    *tensor.Host
	}
	var cases []tc
	for _, f := range []tensor.Format{tensor.F32, tensor.F16, tensor.BF16} {
		cases = append(cases, tc{f.String() + "/67x40", hostOf(b.rand, f, 67, 40)})
	}
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0} {
		cases = append(cases, tc{f.String() + "/37x96", hostOf(b.rand, f, 37, 96)})
	}
	cases = append(cases,
		tc{"mlx4/g32/13x64", mlxHost(b.rand, 4, 32, 13, 64)},
		tc{"mlx8/g64/29x128", mlxHost(b.rand, 8, 64, 29, 128)},
		tc{"q4_k/11x512", hostOf(b.rand, tensor.Q4_K, 11, 512)},
		tc{"q6_k/7x256", hostOf(b.rand, tensor.Q6_K, 7, 256)},
		tc{"q5_k/9x768", hostOf(b.rand, tensor.Q5_K, 9, 768)},
	)
	for _, c := range cases {
		wm, wc := b.weight(c.h)
		for _, m := range []int{1, 3, 9, 17} {
			x := b.tensor(m, c.h.Cols(), nil)
			d := pair{m: b.m.NewTensor(m, c.h.Rows()), c: b.c.NewTensor(m, c.h.Rows()), rows: m, cols: c.h.Rows()}
			b.m.MatMul(d.m, x.m, wm, nil)
			b.c.MatMul(d.c, x.c, wc, nil)
			b.check(c.name, d, 1e-5)
		}
	}
	// Bias.
	h := hostOf(b.rand, tensor.BF16, 19, 24)
	wm, wc := b.weight(h)
	bm, bc := b.weight(vecHost(b.rand, 19))
	x := b.tensor(5, 24, nil)
	d := pair{m: b.m.NewTensor(5, 19), c: b.c.NewTensor(5, 19), rows: 5, cols: 19}
	b.m.MatMul(d.m, x.m, wm, bm)
	b.c.MatMul(d.c, x.c, wc, bc)
	b.check("bias", d, 1e-5)
}

func TestEmbedAndElementwise(t *testing.T) {
	b := newBoth(t)
	for _, h := range []*tensor.Host{hostOf(b.rand, tensor.BF16, 50, 40), hostOf(b.rand, tensor.Q8_0, 50, 64), mlxHost(b.rand, 4, 32, 50, 64),
		hostOf(b.rand, tensor.Q4_K, 50, 256), hostOf(b.rand, tensor.Q5_K, 50, 256), hostOf(b.rand, tensor.Q6_K, 50, 256)} {
		wm, wc := b.weight(h)
		ids := []int{3, 49, 0, 7, 7}
		d := pair{m: b.m.NewTensor(len(ids), h.Cols()), c: b.c.NewTensor(len(ids), h.Cols()), rows: len(ids), cols: h.Cols()}
		b.m.Embed(d.m, wm, ids)
		b.c.Embed(d.c, wc, ids)
		b.check("embed "+h.Format.String(), d, 1e-6)
	}
	x, y := b.tensor(7, 300, nil), b.tensor(7, 300, nil)
	for _, op := range []string{"swiglu", "sigmoidmul", "add"} {
		d := b.tensor(7, 300, nil)
		switch op {
		case "swiglu":
			b.m.SwiGLU(d.m, x.m, y.m)
			b.c.SwiGLU(d.c, x.c, y.c)
		case "sigmoidmul":
			b.m.SigmoidMul(d.m, x.m, y.m)
			b.c.SigmoidMul(d.c, x.c, y.c)
		default:
			b.m.Add(x.m, x.m, y.m) // in place
			b.c.Add(x.c, x.c, y.c)
			d = x
		}
		b.check(op, d, 1e-6)
	}
	// Copy a column block and gather rows.
	dst := b.tensor(9, 50, nil)
	b.m.Copy(dst.m, 2, 5, y.m, 1, 30, 6, 40)
	b.c.Copy(dst.c, 2, 5, y.c, 1, 30, 6, 40)
	b.check("copy", dst, 1e-7)
	g := pair{m: b.m.NewTensor(3, 300), c: b.c.NewTensor(3, 300), rows: 3, cols: 300}
	b.m.Gather(g.m, y.m, []int{6, 0, 2})
	b.c.Gather(g.c, y.c, []int{6, 0, 2})
	b.check("gather", g, 1e-7)
}

func TestNormAndRope(t *testing.T) {
	b := newBoth(t)
	for _, c := range []struct {
		rows, cols, dim int
		offset          float32
	}{{5, 96, 96, 0}, {3, 128, 32, 1}, {4, 200, 40, 0}} {
		wm, wc := b.weight(vecHost(b.rand, c.dim))
		x := b.tensor(c.rows, c.cols, nil)
		d := b.tensor(c.rows, c.cols, nil)
		p := engine.NormParams{Dim: c.dim, Eps: 1e-6, Offset: c.offset}
		b.m.RMSNorm(d.m, x.m, wm, p)
		b.c.RMSNorm(d.c, x.c, wc, p)
		b.check("rmsnorm", d, 1e-6)
	}
	for _, p := range []engine.RopeParams{
		{Heads: 3, HeadDim: 32, RotaryDim: 32, Theta: 1e6},
		{Heads: 2, HeadDim: 64, RotaryDim: 16, Theta: 1e4},
	} {
		pos := []int{0, 1, 5, 77, 1000}
		x := b.tensor(len(pos), p.Heads*p.HeadDim, nil)
		b.m.Rope(x.m, pos, p)
		b.c.Rope(x.c, pos, p)
		b.check("rope", x, 1e-6)
	}
}

func TestAttention(t *testing.T) {
	for _, chunk := range []int{0, 32} { // one-pass kernel; split (decode rows over > 32 positions)
		testAttention(t, chunk)
	}
}

func testAttention(t *testing.T, chunk int) {
	b := newBoth(t)
	if chunk > 0 {
		b.m.attnChunk = chunk
	}
	p := engine.AttnParams{Heads: 4, KVHeads: 2, HeadDim: 48, Scale: 1 / float32(math.Sqrt(48))}
	kvDim := p.KVHeads * p.HeadDim
	newKV := func() (engine.KV, engine.KV) {
		km, err := b.m.NewKV(p.KVHeads, p.HeadDim)
		if err != nil {
			t.Fatal(err)
		}
		kc, _ := b.c.NewKV(p.KVHeads, p.HeadDim)
		return km, kc
	}
	am, ac := newKV()
	bm, bc := newKV()
	// Step 1: prefill 37 tokens of sequence a and 5 of b (crosses a 32-block
	// boundary); step 2: decode one token each plus 40 more for b (KV growth).
	for _, step := range [][2]int{{37, 5}, {1, 41}, {70, 1}} {
		na, nb := step[0], step[1]
		T := na + nb
		q, k, v := b.tensor(T, p.Heads*p.HeadDim, nil), b.tensor(T, kvDim, nil), b.tensor(T, kvDim, nil)
		sm := []engine.AttnSeq{{KV: am, Row: 0, N: na, Pos: am.Len()}, {KV: bm, Row: na, N: nb, Pos: bm.Len()}}
		sc := []engine.AttnSeq{{KV: ac, Row: 0, N: na, Pos: ac.Len()}, {KV: bc, Row: na, N: nb, Pos: bc.Len()}}
		b.m.StoreKV(k.m, v.m, sm)
		b.c.StoreKV(k.c, v.c, sc)
		d := pair{m: b.m.NewTensor(T, p.Heads*p.HeadDim), c: b.c.NewTensor(T, p.Heads*p.HeadDim), rows: T, cols: p.Heads * p.HeadDim}
		b.m.Attention(d.m, q.m, sm, p)
		b.c.Attention(d.c, q.c, sc, p)
		b.check("attention", d, 1e-5)
	}
	if am.Len() != 108 || bm.Len() != 47 {
		t.Fatalf("cache lengths %d, %d; want 108, 47", am.Len(), bm.Len())
	}
}

func appendF32(b []byte, x float32) []byte {
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
}

func TestArgmax(t *testing.T) {
	b := newBoth(t)
	const rows, cols = 3, 1000
	v := randn(b.rand, rows*cols)
	v[1*cols+17], v[1*cols+900] = 9, 9 // tie: the lower index wins
	v[2*cols+999] = 50                 // last column
	x := b.tensor(rows, cols, v)
	b.m.Add(x.m, x.m, x.m) // pending work before the argmax
	got := make([]int, rows)
	if err := b.m.Argmax(x.m, got); err != nil {
		t.Fatal(err)
	}
	for r := range rows {
		if want := engine.Argmax(v[r*cols : (r+1)*cols]); got[r] != want {
			t.Errorf("row %d: argmax %d, want %d", r, got[r], want)
		}
	}
}
