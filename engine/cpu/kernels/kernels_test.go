package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

func randF32(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func quantQ8_0(x []float32) []byte {
	out := make([]byte, len(x)/QK*BlockQ8_0)
	QuantizeQ8_0(x, out)
	return out
}

func quantQ4_0(x []float32) []byte {
	out := make([]byte, len(x)/QK*BlockQ4_0)
	QuantizeQ4_0(x, out)
	return out
}

// randHost makes a random [rows, cols] matrix in format f (values N(0,1)).
func randHost(r *rand.Rand, f tensor.Format, rows, cols int) *tensor.Host {
	x := randF32(r, rows*cols)
	h := &tensor.Host{Name: "w", Format: f, Shape: []int{rows, cols}}
	switch f {
	case tensor.F32:
		h.Data = make([]byte, 4*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint32(h.Data[4*i:], math.Float32bits(v))
		}
	case tensor.BF16, tensor.F16:
		h.Data = make([]byte, 2*len(x))
		for i, v := range x {
			u := tensor.F32ToBF16(v)
			if f == tensor.F16 {
				u = tensor.F32ToF16(v)
			}
			binary.LittleEndian.PutUint16(h.Data[2*i:], u)
		}
	case tensor.Q8_0:
		h.Data = quantQ8_0(x)
	case tensor.Q4_0:
		h.Data = quantQ4_0(x)
	}
	return h
}

// randMLX makes a random MLX affine matrix (random codes, scales and biases
// of both signs, bf16).
func randMLX(r *rand.Rand, bits, group, rows, cols int) *tensor.Host {
	h := &tensor.Host{Name: "w", Format: tensor.MLXAffine, Shape: []int{rows, cols}, Bits: bits, GroupSize: group}
	h.Data = make([]byte, rows*cols*bits/8)
	for i := range h.Data {
		h.Data[i] = byte(r.Uint32())
	}
	ng := rows * cols / group
	sc, bi := make([]byte, 2*ng), make([]byte, 2*ng)
	for g := range ng {
		binary.LittleEndian.PutUint16(sc[2*g:], tensor.F32ToBF16(float32(r.NormFloat64()*0.1)))
		binary.LittleEndian.PutUint16(bi[2*g:], tensor.F32ToBF16(float32(r.NormFloat64())))
	}
	gs := []int{rows, cols / group}
	h.Scales = &tensor.Host{Name: "s", Format: tensor.BF16, Shape: gs, Data: sc}
	h.Biases = &tensor.Host{Name: "b", Format: tensor.BF16, Shape: gs, Data: bi}
	return h
}

// refMatMul is the portable reference of Matrix.MatMul: the Go dot of
// every pair, from the original host tensor (ggml layout, DecodeRow for
// float formats), and the bound Σ|terms| of each output for the tolerance.
func refMatMul(h *tensor.Host, in *Input) (out, abs []float32) {
	N, K := h.Rows(), h.Cols()
	out, abs = make([]float32, in.M*N), make([]float32, in.M*N)
	row := make([]float32, K)
	for n := 0; n < N; n++ {
		if err := h.DecodeRow(n, row); err != nil {
			panic(err)
		}
		for i := 0; i < in.M; i++ {
			x := in.X[i*K : (i+1)*K]
			var s float32
			var a float64
			switch h.Format {
			case tensor.MLXAffine:
				nb := K / QK
				q, d := in.Q[i*K:(i+1)*K], in.D[i*nb:(i+1)*nb]
				s = dotMLXRowGo(h, n, q, d)
				for k := range K {
					a += math.Abs(float64(row[k]) * float64(q[k]) * float64(d[k/QK]))
				}
			case tensor.Q8_0, tensor.Q4_0:
				nb := K / QK
				rb := len(h.Data) / N
				w, q, d := h.Data[n*rb:(n+1)*rb], in.Q[i*K:(i+1)*K], in.D[i*nb:(i+1)*nb]
				if h.Format == tensor.Q8_0 {
					s = dotQ8RowsGo(w, q, d, nb)
				} else {
					s = dotQ4RowsGo(w, q, d, nb)
				}
				for k := range K {
					a += math.Abs(float64(row[k]) * float64(q[k]) * float64(d[k/QK]))
				}
			default:
				s = dotF32Go(x, row)
				for k := range K {
					a += math.Abs(float64(row[k]) * float64(x[k]))
				}
			}
			out[i*N+n], abs[i*N+n] = s, float32(a)
		}
	}
	return out, abs
}

var formats = []tensor.Format{tensor.F32, tensor.BF16, tensor.F16, tensor.Q8_0, tensor.Q4_0}

func tolerance(f tensor.Format) float64 {
	if f == tensor.Q8_0 || f == tensor.Q4_0 {
		return 1e-5
	}
	return 2e-6
}

// TestMatMulMatchesReference runs every implementation available on this
// machine (AVX-512 VNNI, AVX2, Go) on odd shapes (row tails of the packed
// groups, column tails of the vector loops, every activation-row tail) and
// compares with the Go reference within the stated tolerance.
func TestMatMulMatchesReference(t *testing.T) {
	t.Logf("implementation: %s", Impl())
	r := rand.New(rand.NewPCG(1, 2))
	shapes := []struct{ rows, cols int }{{1, 32}, {15, 64}, {16, 96}, {17, 32}, {33, 160}, {50, 1056}, {64, 4096}}
	for _, im := range testImpls() {
		for _, f := range formats {
			t.Logf("testing %s/%v", im.name, f)
			for _, sh := range shapes {
				for _, M := range []int{1, 2, 3, 4, 5, 8, 9, 13, 17} {
					name := fmt.Sprintf("%s/%v/%dx%d/M%d", im.name, f, sh.rows, sh.cols, M)
					im.set()
					h := randHost(r, f, sh.rows, sh.cols)
					m, err := Prepare(h)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					x := randF32(r, M*sh.cols)
					var in Input
					in.Reset(x, M, sh.cols)
					in.QuantizeRows(0, M)
					got := make([]float32, M*sh.rows)
					// Two row ranges split at a multiple of RowAlign.
					split := sh.rows / 2 / m.RowAlign() * m.RowAlign()
					m.MatMul(got, sh.rows, &in, 0, split)
					m.MatMul(got, sh.rows, &in, split, sh.rows)
					im.restore()
					want, abs := refMatMul(h, &in)
					for i := range got {
						if d := math.Abs(float64(got[i] - want[i])); !(d <= tolerance(f)*float64(abs[i])) {
							t.Fatalf("%s: out[%d] = %g, want %g (|diff| %g > %g·%g)", name, i, got[i], want[i], d, tolerance(f), abs[i])
						}
					}
				}
			}
		}
	}
}

// TestQuantizeRowsMatchesGo: the vector quantizer is bit-exact with the Go one.
func TestQuantizeRowsMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const M, K = 5, 1024
	x := randF32(r, M*K)
	for i := 64; i < 96; i++ { // an all-zero block
		x[i] = 0
	}
	x[200] = 1e-40 // a subnormal block maximum next to normal values
	for i := 300; i < 332; i++ {
		x[i] = float32(i-316) * 0.5 // exact .5 ties
	}
	var got Input
	got.Reset(x, M, K)
	got.QuantizeRows(0, M)
	nb := K / QK
	q, d, s8, s128 := make([]int8, M*K), make([]float32, M*nb), make([]int32, M*nb), make([]int32, M*nb)
	for i := range M {
		quantizeRowGo(x[i*K:(i+1)*K], q[i*K:(i+1)*K], d[i*nb:(i+1)*nb], s8[i*nb:(i+1)*nb], s128[i*nb:(i+1)*nb])
	}
	for i := range q {
		if got.Q[i] != q[i] {
			t.Fatalf("q[%d] = %d, want %d (x %g)", i, got.Q[i], q[i], x[i])
		}
	}
	for b := range d {
		if got.D[b] != d[b] || got.S8[b] != s8[b] || got.S128[b] != s128[b] {
			t.Fatalf("block %d: d %g s8 %d s128 %d, want %g %d %d", b, got.D[b], got.S8[b], got.S128[b], d[b], s8[b], s128[b])
		}
	}
	// Dequantized activations are within half a step of the input.
	for i, v := range x {
		b := i / QK
		if e := math.Abs(float64(v) - float64(q[i])*float64(d[b])); e > 0.5*float64(d[b])*(1+1e-6)+1e-45 {
			t.Fatalf("x[%d] = %g quantizes to %d·%g (error %g)", i, v, q[i], d[b], e)
		}
	}
}

// TestReferenceMatchesDecodeRow: the Go reference kernels agree with a
// float64 dot of tensor.Host.DecodeRow rows (the dequantization reference)
// and the dequantized activations; Matrix.DecodeRow (packed included)
// equals Host.DecodeRow exactly.
func TestReferenceMatchesDecodeRow(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, im := range testImpls() {
		for _, f := range formats {
			const rows, cols = 19, 256
			im.set()
			h := randHost(r, f, rows, cols)
			m, err := Prepare(h)
			im.restore()
			if err != nil {
				t.Fatal(err)
			}
			x := randF32(r, cols)
			var in Input
			in.Reset(x, 1, cols)
			quantizeRowGo(x, in.Q, in.D, in.S8, in.S128)
			want := make([]float32, cols)
			got := make([]float32, cols)
			ref, _ := refMatMul(h, &in)
			for n := range rows {
				h.DecodeRow(n, want)
				m.DecodeRow(n, got)
				for k := range got {
					if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
						t.Fatalf("%s/%v row %d col %d: Matrix.DecodeRow %g, Host.DecodeRow %g", im.name, f, n, k, got[k], want[k])
					}
				}
				var exact, abs float64
				for k := range want {
					xv := float64(x[k])
					if m.Quantized() {
						xv = float64(in.Q[k]) * float64(in.D[k/QK])
					}
					exact += float64(want[k]) * xv
					abs += math.Abs(float64(want[k]) * xv)
				}
				if math.Abs(float64(ref[n])-exact) > 1e-5*abs {
					t.Errorf("%v row %d: reference %g, float64 dot of decoded rows %g", f, n, ref[n], exact)
				}
			}
		}
	}
}

// TestQ8Extremes checks the integer paths at the ends of the int8 range
// (±127 weights and activations), where a byte-product overflow would show.
func TestQ8Extremes(t *testing.T) {
	for _, im := range testImpls() {
		for _, pat := range [][2]int8{{127, 127}, {-127, 127}, {-127, -127}, {127, -127}} {
			const rows, cols = 16, 128
			h := &tensor.Host{Name: "w", Format: tensor.Q8_0, Shape: []int{rows, cols}, Data: make([]byte, rows*cols/QK*BlockQ8_0)}
			for b := 0; b < rows*cols/QK; b++ {
				blk := h.Data[b*BlockQ8_0:]
				binary.LittleEndian.PutUint16(blk, 0x3c00) // 1.0
				for j := range QK {
					blk[2+j] = byte(pat[0])
				}
			}
			x := make([]float32, cols)
			for i := range x {
				x[i] = float32(pat[1])
			}
			im.set()
			m, _ := Prepare(h)
			var in Input
			in.Reset(x, 1, cols)
			in.QuantizeRows(0, 1)
			got := make([]float32, rows)
			m.MatMul(got, rows, &in, 0, rows)
			im.restore()
			want := float32(cols * int(pat[0]) * int(pat[1]))
			for n, g := range got {
				if g != want {
					t.Errorf("%s pattern %v row %d: got %g, want %g", im.name, pat, n, g, want)
				}
			}
		}
	}
}

func TestDotF32AndBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{1, 7, 32, 33, 64, 96, 1000, 4096, 4128} {
		a, b := randF32(r, n), randF32(r, n)
		w := make([]uint16, n)
		var absF, absB float64
		for i := range w {
			w[i] = tensor.F32ToBF16(b[i])
			absF += math.Abs(float64(a[i] * b[i]))
			absB += math.Abs(float64(a[i] * tensor.BF16ToF32(w[i])))
		}
		if got, want := DotF32(a, b), dotF32Go(a, b); math.Abs(float64(got-want)) > 2e-6*absF {
			t.Errorf("DotF32 n=%d: got %g, want %g", n, got, want)
		}
		if got, want := DotBF16(a, w), dotBF16Go(a, w); math.Abs(float64(got-want)) > 2e-6*absB {
			t.Errorf("DotBF16 n=%d: got %g, want %g", n, got, want)
		}
	}
}

func TestAxpyF32(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	for _, n := range []int{1, 15, 16, 17, 128, 131} {
		x, d := randF32(r, n), randF32(r, n)
		a := float32(r.NormFloat64())
		got, want := append([]float32(nil), d...), append([]float32(nil), d...)
		AxpyF32(got, a, x)
		axpyGo(want, a, x)
		for i := range got {
			if e := math.Abs(float64(got[i] - want[i])); e > 1e-6*(math.Abs(float64(a*x[i]))+math.Abs(float64(d[i]))) {
				t.Fatalf("n=%d i=%d: got %g, want %g", n, i, got[i], want[i])
			}
		}
	}
}

func TestDotsAndAxpys(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, hd := range []int{8, 64, 80, 128, 144, 256} {
		for _, n := range []int{1, 3, 4, 7, 33} {
			stride := 3*hd + 16
			q, k, p := randF32(r, hd), randF32(r, n*stride), randF32(r, n)
			got := make([]float32, n)
			DotsF32(got, q, k, stride, n)
			for j := range n {
				want := dotF32Go(q, k[j*stride:j*stride+hd])
				var abs float64
				for i := range hd {
					abs += math.Abs(float64(q[i] * k[j*stride+i]))
				}
				if math.Abs(float64(got[j]-want)) > 2e-6*abs {
					t.Fatalf("DotsF32 hd=%d n=%d j=%d: got %g, want %g", hd, n, j, got[j], want)
				}
			}
			acc := randF32(r, hd)
			want := append([]float32(nil), acc...)
			AxpysF32(acc, p, k, stride, n)
			for j := range n {
				axpyGo(want, p[j], k[j*stride:j*stride+hd])
			}
			for i := range hd {
				var abs float64
				for j := range n {
					abs += math.Abs(float64(p[j] * k[j*stride+i]))
				}
				if math.Abs(float64(acc[i]-want[i])) > 2e-6*(abs+1) {
					t.Fatalf("AxpysF32 hd=%d n=%d i=%d: got %g, want %g", hd, n, i, acc[i], want[i])
				}
			}
		}
	}
}

// TestMLXMatMul: the packed MLX kernels (AVX-512 VNNI only; elsewhere
// Prepare declines MLX and the backend decodes rows) against the Go
// reference, and DecodeRow of the packed form against Host.DecodeRow.
func TestMLXMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, sh := range []struct{ rows, cols int }{{16, 128}, {33, 256}, {7, 384}} {
				h := randMLX(r, bits, group, sh.rows, sh.cols)
				m, err := Prepare(h)
				if !usePacked() {
					if err == nil {
						t.Fatal("Prepare accepted MLX without the packed kernels")
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				got, want := make([]float32, sh.cols), make([]float32, sh.cols)
				for n := range sh.rows {
					h.DecodeRow(n, want)
					m.DecodeRow(n, got)
					for k := range got {
						if got[k] != want[k] {
							t.Fatalf("mlx%d g%d row %d col %d: DecodeRow %g, want %g", bits, group, n, k, got[k], want[k])
						}
					}
				}
				for _, M := range []int{1, 3, 4, 6} {
					x := randF32(r, M*sh.cols)
					var in Input
					in.Reset(x, M, sh.cols)
					in.QuantizeRows(0, M)
					out := make([]float32, M*sh.rows)
					m.MatMul(out, sh.rows, &in, 0, sh.rows)
					ref, abs := refMatMul(h, &in)
					for i := range out {
						if d := math.Abs(float64(out[i] - ref[i])); !(d <= 1e-5*float64(abs[i])) {
							t.Fatalf("mlx%d g%d %dx%d M%d: out[%d] = %g, want %g (abs %g)", bits, group, sh.rows, sh.cols, M, i, out[i], ref[i], abs[i])
						}
					}
				}
			}
		}
	}
}

func TestGemmF32NT(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 13))
	for _, sh := range [][3]int{{1, 1, 16}, {4, 4, 128}, {5, 7, 64}, {9, 13, 128}, {3, 5, 20}, {8, 8, 37}} {
		m, n, k := sh[0], sh[1], sh[2]
		lda, ldb, ldd := k+16, k+32, n+3
		a, b := randF32(r, m*lda), randF32(r, n*ldb)
		dst := make([]float32, m*ldd)
		GemmF32NT(dst, ldd, a, lda, b, ldb, m, n, k)
		for i := range m {
			for j := range n {
				want := dotF32Go(a[i*lda:i*lda+k], b[j*ldb:j*ldb+k])
				var abs float64
				for c := range k {
					abs += math.Abs(float64(a[i*lda+c] * b[j*ldb+c]))
				}
				if math.Abs(float64(dst[i*ldd+j]-want)) > 2e-6*abs {
					t.Fatalf("%v: dst[%d,%d] = %g, want %g", sh, i, j, dst[i*ldd+j], want)
				}
			}
		}
	}
}

// TestQuantizeMatrix: quantize-on-load gives the same matrix as quantizing
// the rows with the ggml reference quantizers and preparing that.
func TestQuantizeMatrix(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0} {
		for _, src := range []tensor.Format{tensor.BF16, tensor.F32} {
			const rows, cols = 37, 96
			h := randHost(r, src, rows, cols)
			m, err := QuantizeMatrix(h, f)
			if err != nil {
				t.Fatal(err)
			}
			x, err := h.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			q := &tensor.Host{Name: "q", Format: f, Shape: []int{rows, cols}}
			if f == tensor.Q8_0 {
				q.Data = quantQ8_0(x)
			} else {
				q.Data = quantQ4_0(x)
			}
			got, want := make([]float32, cols), make([]float32, cols)
			for n := range rows {
				m.DecodeRow(n, got)
				q.DecodeRow(n, want)
				for k := range got {
					if got[k] != want[k] {
						t.Fatalf("%v→%v row %d col %d: %g, want %g", src, f, n, k, got[k], want[k])
					}
				}
			}
		}
	}
	if _, err := QuantizeMatrix(randHost(r, tensor.BF16, 2, 48), tensor.Q8_0); err == nil {
		t.Error("QuantizeMatrix accepted rows of 48 values")
	}
}

func TestGemmF32NN(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 15))
	for _, sh := range [][3]int{{1, 1, 1}, {8, 32, 128}, {16, 70, 128}, {9, 33, 5}, {3, 100, 64}} {
		m, n, k := sh[0], sh[1], sh[2]
		lda, ldb, ldd := k+3, n+17, n+5
		a, b := randF32(r, m*lda), randF32(r, k*ldb)
		dst := make([]float32, m*ldd)
		GemmF32NN(dst, ldd, a, lda, b, ldb, m, n, k)
		for i := range m {
			for j := range n {
				var want float32
				var abs float64
				for c := range k {
					want += a[i*lda+c] * b[c*ldb+j]
					abs += math.Abs(float64(a[i*lda+c] * b[c*ldb+j]))
				}
				if math.Abs(float64(dst[i*ldd+j]-want)) > 2e-6*abs {
					t.Fatalf("%v: dst[%d,%d] = %g, want %g", sh, i, j, dst[i*ldd+j], want)
				}
			}
		}
	}
}

// TestAttentionRows against a plain loop (float64) on random inputs: the
// GEMM path (rows > 1) and the one-row decode path (pairs of heads and an
// odd last head, position counts and head dims with 128-, 16- and
// scalar-column tails, key rows wider than the positions).
func TestAttentionRows(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, c := range []struct{ rows, group, hd, pos int }{{1, 1, 64, 0}, {8, 2, 128, 0}, {8, 2, 128, 37}, {3, 4, 80, 5},
		{1, 8, 128, 200}, {1, 2, 128, 575}, {1, 3, 64, 130}, {1, 2, 72, 16}, {1, 5, 24, 3}, {2, 2, 128, 300}} {
		n := c.pos + c.rows
		ldkv := n + 7
		ldq, ldo := c.group*c.hd+16, c.group*c.hd+32
		q := randF32(r, c.rows*ldq)
		kt, vt := randF32(r, c.hd*ldkv), randF32(r, n*c.hd)
		out := make([]float32, c.rows*ldo)
		scratch := make([]float32, AttentionScratch(c.rows, c.group, c.hd, n))
		for i := range scratch {
			scratch[i] = float32(math.NaN()) // the kernel must not read stale scratch
		}
		scale := float32(1 / math.Sqrt(float64(c.hd)))
		AttentionRows(out, ldo, q, ldq, c.rows, c.group, c.hd, kt, ldkv, vt, c.pos, scale, scratch)
		for row := range c.rows {
			for g := range c.group {
				valid := c.pos + row + 1
				sc := make([]float64, valid)
				mx := math.Inf(-1)
				for j := range valid {
					var d float64
					for x := range c.hd {
						d += float64(q[row*ldq+g*c.hd+x]) * float64(scale) * float64(kt[x*ldkv+j])
					}
					sc[j] = d
					mx = math.Max(mx, d)
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				var num, den float64
				for x := range c.hd {
					var want float64
					for j := range valid {
						want += sc[j] / sum * float64(vt[j*c.hd+x])
					}
					d := float64(out[row*ldo+g*c.hd+x]) - want
					num += d * d
					den += want * want
				}
				if e := math.Sqrt(num / den); e > 1e-5 {
					t.Fatalf("%+v row %d head %d: rel-L2 %g", c, row, g, e)
				}
			}
		}
	}
}

func TestExpSubF32(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 17))
	for _, n := range []int{1, 15, 16, 17, 100, 1000} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 10)
		}
		x[0] = -200 // far below the clamp
		orig := append([]float32(nil), x...)
		mx := float32(3)
		sum := ExpSubF32(x, mx)
		var want float64
		for i, v := range orig {
			e := math.Exp(float64(v - mx))
			want += e
			if d := math.Abs(float64(x[i]) - e); d > 3e-7*e+2e-38 {
				t.Fatalf("n=%d: exp(%g) = %g, want %g", n, v-mx, x[i], e)
			}
		}
		if math.Abs(float64(sum)-want) > 1e-6*want+2e-38*float64(n) {
			t.Fatalf("n=%d: sum %g, want %g", n, sum, want)
		}
	}
}

func TestMaxF32(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for _, n := range []int{1, 5, 16, 17, 33, 100} {
		x := randF32(r, n)
		for i := range x {
			x[i] -= 10
		}
		want := float32(math.Inf(-1))
		for _, v := range x {
			want = max(want, v)
		}
		if got := MaxF32(x); got != want {
			t.Fatalf("n=%d: got %g, want %g", n, got, want)
		}
	}
}
