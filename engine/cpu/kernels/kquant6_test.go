package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// randQ6K makes a random Q6_K matrix: random codes and int8 scales of
// both signs, d of realistic size.
func randQ6K(r *rand.Rand, rows, cols int) *tensor.Host {
	h := &tensor.Host{Name: "w", Format: tensor.Q6_K, Shape: []int{rows, cols},
		Data: make([]byte, rows*cols/tensor.QKK*tensor.BlockBytesQ6_K)}
	for i := range h.Data {
		h.Data[i] = byte(r.Uint32())
	}
	for o := 0; o < len(h.Data); o += tensor.BlockBytesQ6_K {
		binary.LittleEndian.PutUint16(h.Data[o+tensor.BlockBytesQ6_K-2:], tensor.F32ToF16(float32(r.Float64()*0.002)))
	}
	return h
}

// randQ5K makes a random Q5_K matrix: random codes, 6-bit scales and mins,
// d and dmin of realistic size.
func randQ5K(r *rand.Rand, rows, cols int) *tensor.Host {
	h := &tensor.Host{Name: "w", Format: tensor.Q5_K, Shape: []int{rows, cols},
		Data: make([]byte, rows*cols/tensor.QKK*tensor.BlockBytesQ5_K)}
	for i := range h.Data {
		h.Data[i] = byte(r.Uint32())
	}
	for o := 0; o < len(h.Data); o += tensor.BlockBytesQ5_K {
		binary.LittleEndian.PutUint16(h.Data[o:], tensor.F32ToF16(float32(r.Float64()*0.005)))
		binary.LittleEndian.PutUint16(h.Data[o+2:], tensor.F32ToF16(float32(r.Float64()*0.01)))
	}
	return h
}

// kquants are the natively packed K-quant formats under test.
var kquants = []struct {
	f       tensor.Format
	rand    func(*rand.Rand, int, int) *tensor.Host
	prepare func(*tensor.Host) (*Matrix, error)
}{
	{tensor.Q6_K, randQ6K, PrepareQ6K},
	{tensor.Q5_K, randQ5K, PrepareQ5K},
	{tensor.Q4_K, randQ4K, PrepareQ4K},
}

// refKQ is the Go reference of MatMul for a Q6_K/Q5_K/Q4_K host and the bound
// Σ|terms| per output (terms: decoded weight × dequantized activation).
func refKQ(h *tensor.Host, in *Input) (out, abs []float32) {
	N, K := h.Rows(), h.Cols()
	nb := K / QK
	out, abs = make([]float32, in.M*N), make([]float32, in.M*N)
	row := make([]float32, K)
	for n := range N {
		if err := h.DecodeRow(n, row); err != nil {
			panic(err)
		}
		for i := range in.M {
			q, d := in.Q[i*K:(i+1)*K], in.D[i*nb:(i+1)*nb]
			if h.Format == tensor.Q5_K || h.Format == tensor.Q4_K {
				out[i*N+n] = dotQ5KRowGo(h, n, q, d, in.S128[i*nb:(i+1)*nb])
			} else {
				out[i*N+n] = dotQ6KRowGo(h, n, q, d, in.S6[i*2*nb:(i+1)*2*nb])
			}
			var a float64
			for k := range K {
				a += math.Abs(float64(row[k]) * float64(q[k]) * float64(d[k/QK]))
			}
			abs[i*N+n] = float32(a)
		}
	}
	return out, abs
}

// TestKQuantReference: the Go references (int8 activations; half-block
// offset sums for Q6_K, block sums for Q5_K's mins) equal the float64 dot
// of the decoded rows with the dequantized activations within
// 1e-5·Σ|terms|: they compute the product they claim to.
func TestKQuantReference(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	const rows, cols, M = 9, 512, 3
	for _, kq := range kquants {
		h := kq.rand(r, rows, cols)
		var in Input
		in.Reset(randF32(r, M*cols), M, cols)
		in.QuantizeRows(0, M)
		got, abs := refKQ(h, &in)
		row := make([]float32, cols)
		for n := range rows {
			h.DecodeRow(n, row)
			for i := range M {
				var want float64
				for k := range cols {
					want += float64(row[k]) * float64(in.Q[i*cols+k]) * float64(in.D[i*cols/QK+k/QK])
				}
				if d := math.Abs(float64(got[i*rows+n]) - want); !(d <= 1e-5*float64(abs[i*rows+n])) {
					t.Fatalf("%v row %d x %d: reference %g, float64 dot %g", kq.f, n, i, got[i*rows+n], want)
				}
			}
		}
	}
}

// TestKQuantPacked: packed Q6_K is exactly the size of the ggml data (Q5_K
// 180/176 of it, Q4_K 148/144; rows padded to 16), decodes its rows
// bit-exactly as tensor.DequantQ6_K / DequantQ5_K / DequantQ4_K, and
// multiplies as the Go reference (1e-5·Σ|terms|) for 1..9 activation rows,
// row tails of the 16-row groups, 1..3 super-blocks and split row ranges.
// Each row's result is also bit-identical whether it is computed alone
// (1-row kernel) or with others (4- and 8-row kernels), and on every
// implementation this machine has (VNNI, AVX2 one-row kernels).
func TestKQuantPacked(t *testing.T) {
	if !kqPacked() {
		t.Skip("packed K-quants need AVX-512 VNNI, AVX2 or arm64 SDOT; without them the backend requantizes (tested by engine/cpu)")
	}
	r := rand.New(rand.NewPCG(63, 64))
	for _, kq := range kquants {
		for _, sh := range []struct{ rows, cols int }{{1, 256}, {15, 512}, {16, 256}, {17, 768}, {37, 512}, {50, 1024}} {
			h := kq.rand(r, sh.rows, sh.cols)
			m, err := kq.prepare(h)
			if err != nil {
				t.Fatal(err)
			}
			bpsb := map[tensor.Format]int{tensor.Q6_K: tensor.BlockBytesQ6_K, tensor.Q5_K: 180, tensor.Q4_K: 148}[kq.f]
			if want := (sh.rows + 15) / 16 * 16 * sh.cols / tensor.QKK * bpsb; m.Bytes() != want {
				t.Errorf("%v: packed %d bytes, want %d (ggml %d)", sh, m.Bytes(), want, len(h.Data))
			}
			want, got := make([]float32, sh.cols), make([]float32, sh.cols)
			for n := range sh.rows {
				h.DecodeRow(n, want)
				m.DecodeRow(n, got)
				for k := range got {
					if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
						t.Fatalf("%v %v row %d col %d: packed DecodeRow %g, original %g", kq.f, sh, n, k, got[k], want[k])
					}
				}
			}
			for M := 1; M <= 9; M++ {
				name := fmt.Sprintf("%v/%dx%d/M%d", kq.f, sh.rows, sh.cols, M)
				var in Input
				in.Reset(randF32(r, M*sh.cols), M, sh.cols)
				in.QuantizeRows(0, M)
				out := make([]float32, M*sh.rows)
				split := sh.rows / 2 / 16 * 16
				m.MatMul(out, sh.rows, &in, 0, split)
				m.MatMul(out, sh.rows, &in, split, sh.rows)
				for _, im := range testImpls() {
					im.set()
					other := make([]float32, M*sh.rows)
					if kqPacked() {
						m.MatMul(other, sh.rows, &in, 0, split)
						m.MatMul(other, sh.rows, &in, split, sh.rows)
					}
					im.restore()
					for i := 0; i < len(other) && kqPackedOn(im); i++ {
						if math.Float32bits(other[i]) != math.Float32bits(out[i]) {
							t.Fatalf("%s: out[%d] = %g on %s, %g on %s", name, i, other[i], im.name, out[i], Impl())
						}
					}
				}
				ref, abs := refKQ(h, &in)
				for i := range out {
					if d := math.Abs(float64(out[i] - ref[i])); !(d <= 1e-5*float64(abs[i])) {
						t.Fatalf("%s: out[%d] = %g, want %g (|diff| %g > 1e-5·%g)", name, i, out[i], ref[i], d, abs[i])
					}
				}
				for i := range M {
					var one Input
					one.Reset(in.X[i*sh.cols:(i+1)*sh.cols], 1, sh.cols)
					one.QuantizeRows(0, 1)
					alone := make([]float32, sh.rows)
					m.MatMul(alone, sh.rows, &one, 0, sh.rows)
					for n, v := range alone {
						if math.Float32bits(v) != math.Float32bits(out[i*sh.rows+n]) {
							t.Fatalf("%s: row %d col %d alone %g, in the batch %g", name, i, n, v, out[i*sh.rows+n])
						}
					}
				}
			}
		}
	}
}

// kqPackedOn reports whether implementation im runs the packed K-quant
// kernels (turned on by im.set).
func kqPackedOn(im implCase) bool {
	im.set()
	defer im.restore()
	return kqPacked()
}

// TestHalfSums: the AVX-512 half-block sums equal the Go ones, over the
// whole int8 range and lengths with a 32-value tail.
func TestHalfSums(t *testing.T) {
	r := rand.New(rand.NewPCG(65, 66))
	for _, n := range []int{32, 64, 96, 1024, 3104} {
		q := make([]int8, n)
		for i := range q {
			q[i] = int8(r.Uint32())
		}
		q[0], q[1] = -128, 127
		got, want := make([]int32, n/16), make([]int32, n/16)
		halfSums(q, got)
		halfSumsGo(q, want)
		for j := range got {
			if got[j] != want[j] {
				t.Fatalf("n=%d: s6[%d] = %d, want %d", n, j, got[j], want[j])
			}
		}
	}
}

// TestKQuantErrors: wrong formats and shapes are refused with an error.
func TestKQuantErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(67, 68))
	for _, kq := range kquants {
		h := kq.rand(r, 4, 256)
		bad := []*tensor.Host{
			{Name: "f32", Format: tensor.F32, Shape: []int{4, 256}, Data: make([]byte, 4*4*256)},
			{Name: "short", Format: kq.f, Shape: []int{4, 256}, Data: h.Data[:100]},
			{Name: "cols", Format: kq.f, Shape: []int{4, 128}, Data: h.Data},
			{Name: "vector", Format: kq.f, Shape: []int{1024}, Data: h.Data},
		}
		for _, b := range bad {
			if _, err := kq.prepare(b); err == nil {
				t.Errorf("%s: prepare %v accepted %v %v with %d bytes", b.Name, kq.f, b.Format, b.Shape, len(b.Data))
			}
		}
	}
}

// BenchmarkPrepareQ6K: load-time packing of a [3072, 1024] Q6_K matrix
// (bytes/s of ggml data).
func BenchmarkPrepareQ6K(b *testing.B) {
	if !usePacked() {
		b.Skip("needs AVX-512 VNNI")
	}
	h := randQ6K(rand.New(rand.NewPCG(69, 70)), 3072, 1024)
	b.SetBytes(int64(len(h.Data)))
	for b.Loop() {
		if _, err := PrepareQ6K(h); err != nil {
			b.Fatal(err)
		}
	}
}
