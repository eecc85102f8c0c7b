package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// randQ4K makes a random Q4_K matrix: random codes and 6-bit scales/mins,
// d and dmin of realistic size.
func randQ4K(r *rand.Rand, rows, cols int) *tensor.Host {
	h := &tensor.Host{Name: "w", Format: tensor.Q4_K, Shape: []int{rows, cols},
		Data: make([]byte, rows*cols/tensor.QKK*tensor.BlockBytesQ4_K)}
	for i := range h.Data {
		h.Data[i] = byte(r.Uint32())
	}
	for o := 0; o < len(h.Data); o += tensor.BlockBytesQ4_K {
		binary.LittleEndian.PutUint16(h.Data[o:], tensor.F32ToF16(float32(r.Float64()*0.01)))
		binary.LittleEndian.PutUint16(h.Data[o+2:], tensor.F32ToF16(float32(r.Float64()*0.01)))
	}
	return h
}

// TestQ4KAsMLX: the MLX rewrite of a Q4_K matrix decodes bit-exactly to
// the Q4_K values; the packed matrix (PrepareQ4KAsMLX) multiplies as the Go
// reference over that MLX matrix (1e-5·Σ|terms|) for 1..9 activation rows
// and a partial row group, and decodes its rows bit-exactly; the native
// Q4_K matrix (PrepareQ4K) gives the same bits.
func TestQ4KAsMLX(t *testing.T) {
	if !usePacked() {
		t.Skip("Q4_K packing needs AVX-512 VNNI; without it the backend keeps the row decoder (tested by engine/cpu)")
	}
	r := rand.New(rand.NewPCG(31, 32))
	const rows, cols = 37, 512
	h := randQ4K(r, rows, cols)
	mh, err := Q4KAsMLX(h)
	if err != nil {
		t.Fatal(err)
	}
	want, got := make([]float32, cols), make([]float32, cols)
	for n := range rows {
		if err := h.DecodeRow(n, want); err != nil {
			t.Fatal(err)
		}
		if err := mh.DecodeRow(n, got); err != nil {
			t.Fatal(err)
		}
		for k := range got {
			if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
				t.Fatalf("row %d col %d: MLX form %g, Q4_K %g", n, k, got[k], want[k])
			}
		}
	}
	m, err := PrepareQ4KAsMLX(h)
	if err != nil {
		t.Fatal(err)
	}
	// 6 bits per weight (4-bit codes + float32 scale and bias per 32), rows
	// padded to groups of 16: Q4_K is 4.5.
	if want := (rows + 15) / 16 * 16 * cols * 6 / 8; m.Bytes() != want {
		t.Errorf("packed Q4_K: %d bytes, want %d (Q4_K: %d)", m.Bytes(), want, len(h.Data))
	}
	for n := range rows {
		mh.DecodeRow(n, want)
		m.DecodeRow(n, got)
		for k := range got {
			if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
				t.Fatalf("row %d col %d: packed DecodeRow %g, MLX %g", n, k, got[k], want[k])
			}
		}
	}
	for _, M := range []int{1, 4, 5, 9} {
		var in Input
		in.Reset(randF32(r, M*cols), M, cols)
		in.QuantizeRows(0, M)
		out := make([]float32, M*rows)
		m.MatMul(out, rows, &in, 0, 16)
		m.MatMul(out, rows, &in, 16, rows)
		ref, abs := refMatMul(mh, &in)
		for i := range out {
			if d := math.Abs(float64(out[i] - ref[i])); !(d <= 1e-5*float64(abs[i])) {
				t.Fatalf("M=%d out[%d] = %g, want %g", M, i, out[i], ref[i])
			}
		}
		native, err := PrepareQ4K(h)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, M*rows)
		native.MatMul(got, rows, &in, 0, 16)
		native.MatMul(got, rows, &in, 16, rows)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(out[i]) {
				t.Fatalf("M=%d out[%d]: native Q4_K %g, MLX rewrite %g", M, i, got[i], out[i])
			}
		}
	}
}
