package tensor

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"
)

// packWords packs values the way MLX does for 2, 4 and 8 bits: 32/bits
// values per little-endian uint32, element 0 in the lowest bits.
func packWords(q []uint32, bits int) []byte {
	per := 32 / bits
	out := make([]byte, len(q)*bits/8)
	for w := 0; w < len(q)/per; w++ {
		var word uint32
		for j := 0; j < per; j++ {
			word |= q[w*per+j] << (j * bits)
		}
		binary.LittleEndian.PutUint32(out[4*w:], word)
	}
	return out
}

// packBytes packs 3/5/6-bit values as mlx's CPU quantizer does: 8 values in
// 3 bytes (3-bit), 8 in 5 (5-bit), 4 in 3 (6-bit), lowest bits first.
func packBytes(q []uint32, bits int) []byte {
	out := make([]byte, 0, len(q)*bits/8)
	var acc uint64
	n := 0
	for _, v := range q {
		acc |= uint64(v) << n
		n += bits
		for n >= 8 {
			out = append(out, byte(acc))
			acc >>= 8
			n -= 8
		}
	}
	return out
}

func bf16Host(name string, vals []float32, shape []int) *Host {
	b := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(b[2*i:], F32ToBF16(v))
	}
	return &Host{Name: name, Format: BF16, Shape: shape, Data: b}
}

func TestMLXAffineDecode(t *testing.T) {
	for _, tc := range []struct{ bits, group int }{{2, 32}, {3, 32}, {4, 32}, {4, 64}, {5, 64}, {6, 32}, {8, 64}, {8, 128}} {
		rng := rand.New(rand.NewPCG(uint64(tc.bits), uint64(tc.group)))
		rows, cols := 5, 256
		groups := cols / tc.group
		q := make([]uint32, rows*cols)
		for i := range q {
			q[i] = rng.Uint32N(1 << tc.bits)
		}
		sc := make([]float32, rows*groups)
		bi := make([]float32, rows*groups)
		for i := range sc {
			sc[i] = BF16ToF32(F32ToBF16(float32(rng.NormFloat64() * 0.01))) // negative too
			bi[i] = BF16ToF32(F32ToBF16(float32(rng.NormFloat64() * 0.1)))
		}
		var data []byte
		if tc.bits == 3 || tc.bits == 5 || tc.bits == 6 {
			data = packBytes(q, tc.bits)
		} else {
			data = packWords(q, tc.bits)
		}
		// Misalign the data as MLX's unpadded headers do.
		buf := append([]byte{0}, data...)[1:]
		h := &Host{Name: "w", Format: MLXAffine, Shape: []int{rows, cols}, Data: buf, Bits: tc.bits, GroupSize: tc.group,
			Scales: bf16Host("s", sc, []int{rows, groups}), Biases: bf16Host("b", bi, []int{rows, groups})}
		got, err := h.Float32s()
		if err != nil {
			t.Fatalf("bits %d: %v", tc.bits, err)
		}
		for i, v := range got {
			r, c := i/cols, i%cols
			s, b := sc[r*groups+c/tc.group], bi[r*groups+c/tc.group]
			prod := float32(s * float32(q[i])) // conversion: no fused multiply-add
			if want := prod + b; v != want {
				t.Fatalf("bits %d group %d: element %d = %v, want %v", tc.bits, tc.group, i, v, want)
			}
		}
	}
}

func TestMLXAffineErrors(t *testing.T) {
	good := func() *Host {
		return &Host{Name: "w", Format: MLXAffine, Shape: []int{2, 64}, Data: make([]byte, 2*64/2), Bits: 4, GroupSize: 32,
			Scales: bf16Host("s", make([]float32, 4), []int{2, 2}), Biases: bf16Host("b", make([]float32, 4), []int{2, 2})}
	}
	for _, tc := range []struct {
		name  string
		edit  func(h *Host)
		wants string
	}{
		{"bits", func(h *Host) { h.Bits = 7 }, "bits 7"},
		{"group", func(h *Host) { h.GroupSize = 48 }, "groups of 48"},
		{"data", func(h *Host) { h.Data = h.Data[:10] }, "packed bytes"},
		{"scales", func(h *Host) { h.Scales = nil }, "without scales"},
		{"biases size", func(h *Host) { h.Biases.Data = h.Biases.Data[:2] }, "scales/biases b"},
	} {
		h := good()
		tc.edit(h)
		_, err := h.Float32s()
		if err == nil || !strings.Contains(err.Error(), tc.wants) {
			t.Errorf("%s: got error %v, want one containing %q", tc.name, err, tc.wants)
		}
	}
	if _, err := good().Float32s(); err != nil {
		t.Errorf("good tensor: %v", err)
	}
}
