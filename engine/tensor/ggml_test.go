package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// Reference quantizers, written from ggml's quantize_row_*_ref (the ones that
// make model files), used only to round-trip random data through the decoders.

func quantizeQ8_0(x []float32) []byte {
	var out []byte
	for i := 0; i < len(x); i += QK8_0 {
		var amax float32
		for _, v := range x[i : i+QK8_0] {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		blk := make([]byte, BlockBytesQ8_0)
		binary.LittleEndian.PutUint16(blk, F32ToF16(d))
		for j, v := range x[i : i+QK8_0] {
			blk[2+j] = byte(int8(math.Round(float64(v * id)))) // roundf: half away from zero
		}
		out = append(out, blk...)
	}
	return out
}

func quantizeQ4_0(x []float32) []byte {
	var out []byte
	for i := 0; i < len(x); i += QK4_0 {
		var amax, mx float32
		for _, v := range x[i : i+QK4_0] {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, mx = a, v
			}
		}
		d := mx / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		blk := make([]byte, BlockBytesQ4_0)
		binary.LittleEndian.PutUint16(blk, F32ToF16(d))
		for j := 0; j < QK4_0/2; j++ {
			x0 := x[i+j] * id
			x1 := x[i+QK4_0/2+j] * id
			q0 := min(15, int(int8(x0+8.5)))
			q1 := min(15, int(int8(x1+8.5)))
			blk[2+j] = byte(q0) | byte(q1)<<4
		}
		out = append(out, blk...)
	}
	return out
}

func randRow(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func relL2(got, want []float32) float64 {
	var num, den float64
	for i := range got {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

func TestQ8_0And4_0RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const rows, cols = 3, 128
	x := randRow(r, rows*cols)
	for _, tc := range []struct {
		f     Format
		quant func([]float32) []byte
		tol   float64 // rel L2 of the quantization error on Gaussian data
		maxEl float64 // max error per element, in units of the block's absmax
	}{
		{Q8_0, quantizeQ8_0, 0.01, 0.5/127 + 1e-3},
		{Q4_0, quantizeQ4_0, 0.12, 1.0/8 + 1e-2},
	} {
		t.Run(tc.f.String(), func(t *testing.T) {
			h := &Host{Name: "w", Format: tc.f, Shape: []int{rows, cols}, Data: tc.quant(x)}
			got, err := h.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if e := relL2(got, x); e > tc.tol || e == 0 {
				t.Errorf("rel L2 %g, want in (0, %g]", e, tc.tol)
			}
			for b := 0; b < len(x); b += 32 {
				var amax float64
				for _, v := range x[b : b+32] {
					amax = max(amax, math.Abs(float64(v)))
				}
				for i := b; i < b+32; i++ {
					if e := math.Abs(float64(got[i]-x[i])) / amax; e > tc.maxEl {
						t.Fatalf("value %d: got %g, want %g (error %g of absmax)", i, got[i], x[i], e)
					}
				}
			}
			// Requantizing the decoded values gives back the same bytes.
			if again := tc.quant(got); string(again) != string(h.Data) {
				t.Errorf("quantize(dequantize(q)) != q")
			}
		})
	}
}

func TestHandBuiltBlocks(t *testing.T) {
	// Q8_0: d = 0.5 (f16 0x3800), q = -128, -1, 0, 1, 127, 5, ...
	q8 := make([]byte, BlockBytesQ8_0)
	binary.LittleEndian.PutUint16(q8, 0x3800)
	qs := []int8{-128, -1, 0, 1, 127}
	for i := range 32 {
		v := int8(5)
		if i < len(qs) {
			v = qs[i]
		}
		q8[2+i] = byte(v)
	}
	got := make([]float32, 32)
	DequantQ8_0(q8, got)
	for i, w := range []float32{-64, -0.5, 0, 0.5, 63.5, 2.5} {
		if got[i] != w {
			t.Errorf("Q8_0[%d] = %g, want %g", i, got[i], w)
		}
	}

	// Q4_0: d = 2 (0x4000); byte j = (hi<<4 | lo): value j = lo-8, value j+16 = hi-8.
	q4 := make([]byte, BlockBytesQ4_0)
	binary.LittleEndian.PutUint16(q4, 0x4000)
	for j := range 16 {
		q4[2+j] = byte(j) | byte(15-j)<<4
	}
	DequantQ4_0(q4, got)
	for j := range 16 {
		if w := float32(2 * (j - 8)); got[j] != w {
			t.Errorf("Q4_0[%d] = %g, want %g", j, got[j], w)
		}
		if w := float32(2 * (15 - j - 8)); got[j+16] != w {
			t.Errorf("Q4_0[%d] = %g, want %g", j+16, got[j+16], w)
		}
	}

	// Q4_K with one non-trivial pair: d = 1, dmin = 0.5, scale pair 5 =
	// (sc 0b110011=51, m 0b100101=37): sc low 4 bits in scales[9] low nibble,
	// top 2 bits in scales[1] bits 6-7; m low 4 bits in scales[9] high nibble,
	// top 2 in scales[5] bits 6-7. Values 160..191 are the high nibbles of
	// qs[64..95] (group 2, second half).
	k4 := make([]byte, BlockBytesQ4_K)
	binary.LittleEndian.PutUint16(k4, 0x3c00)
	binary.LittleEndian.PutUint16(k4[2:], 0x3800)
	sc := k4[4:16]
	sc[9] = 0b0101_0011
	sc[1] = 0b11 << 6
	sc[5] = 0b10 << 6
	k4[16+64+3] = 0x70 // value 160+3 has q = 7
	g := make([]float32, QKK)
	DequantQ4_K(k4, g)
	if w := float32(51*7) - 0.5*37; g[163] != w {
		t.Errorf("Q4_K[163] = %g, want %g", g[163], w)
	}
	if w := float32(-0.5 * 37); g[160] != w {
		t.Errorf("Q4_K[160] = %g, want %g", g[160], w)
	}
	if g[3] != 0 || g[64+3] != 0 {
		t.Errorf("Q4_K: pairs 0 and 2 are zero, got %g %g", g[3], g[67])
	}

	// Q6_K: d = 1, scale of values 96..111 (sub-block 6) = -3; value 100 =
	// high nibble of ql[36] | bits 6-7 of qh[4] << 4 = (0xA | 2<<4) - 32 = 10.
	k6 := make([]byte, BlockBytesQ6_K)
	k6[36] = 0xA0
	k6[128+4] = 2 << 6
	k6[128+64+6] = byte(0xfd) // int8 -3
	binary.LittleEndian.PutUint16(k6[208:], 0x3c00)
	DequantQ6_K(k6, g)
	if g[100] != -30 {
		t.Errorf("Q6_K[100] = %g, want -30", g[100])
	}
	if g[101] != 96 { // q = 0 - 32, scale -3
		t.Errorf("Q6_K[101] = %g, want 96", g[101])
	}
}

// Pack known integer codes the way ggml's k-quant quantizers do (independent
// of the decoders' indexing) and check every decoded value.

func packScalesK4(ls, lm [8]uint8) [12]byte {
	var s [12]byte
	for j := range 8 {
		if j < 4 {
			s[j] = ls[j]
			s[j+4] = lm[j]
		} else {
			s[j+4] = ls[j]&0xf | (lm[j]&0xf)<<4
			s[j-4] |= (ls[j] >> 4) << 6
			s[j] |= (lm[j] >> 4) << 6
		}
	}
	return s
}

func TestKQuantsPacked(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	d, dmin := float32(0.0123), float32(0.0456)
	dh, dminh := F32ToF16(d), F32ToF16(dmin)
	d, dmin = F16ToF32(dh), F16ToF32(dminh)
	var ls, lm [8]uint8
	for j := range 8 {
		ls[j], lm[j] = uint8(r.IntN(64)), uint8(r.IntN(64))
	}
	scales := packScalesK4(ls, lm)
	got := make([]float32, QKK)

	t.Run("Q4_K", func(t *testing.T) {
		var L [QKK]uint8
		for i := range L {
			L[i] = uint8(r.IntN(16))
		}
		blk := binary.LittleEndian.AppendUint16(nil, dh)
		blk = binary.LittleEndian.AppendUint16(blk, dminh)
		blk = append(blk, scales[:]...)
		for j := 0; j < QKK; j += 64 {
			for l := range 32 {
				blk = append(blk, L[j+l]|L[j+l+32]<<4)
			}
		}
		DequantQ4_K(blk, got)
		for i := range QKK {
			g := i / 32
			w := float32(float32(d*float32(ls[g]))*float32(L[i])) - float32(dmin*float32(lm[g]))
			if got[i] != w {
				t.Fatalf("value %d: got %g, want %g", i, got[i], w)
			}
		}
	})
	t.Run("Q5_K", func(t *testing.T) {
		var L [QKK]uint8
		for i := range L {
			L[i] = uint8(r.IntN(32))
		}
		qh := make([]byte, QKK/8)
		ql := make([]byte, QKK/2)
		m1, m2 := uint8(1), uint8(2)
		for n := 0; n < QKK; n += 64 {
			for j := range 32 {
				l1, l2 := L[n+j], L[n+j+32]
				if l1 > 15 {
					l1 -= 16
					qh[j] |= m1
				}
				if l2 > 15 {
					l2 -= 16
					qh[j] |= m2
				}
				ql[n/2+j] = l1 | l2<<4
			}
			m1 <<= 2
			m2 <<= 2
		}
		blk := binary.LittleEndian.AppendUint16(nil, dh)
		blk = binary.LittleEndian.AppendUint16(blk, dminh)
		blk = append(blk, scales[:]...)
		blk = append(append(blk, qh...), ql...)
		DequantQ5_K(blk, got)
		for i := range QKK {
			g := i / 32
			w := float32(float32(d*float32(ls[g]))*float32(L[i])) - float32(dmin*float32(lm[g]))
			if got[i] != w {
				t.Fatalf("value %d: got %g, want %g", i, got[i], w)
			}
		}
	})
	t.Run("Q6_K", func(t *testing.T) {
		var L [QKK]uint8
		var sc [16]int8
		for i := range L {
			L[i] = uint8(r.IntN(64))
		}
		for i := range sc {
			sc[i] = int8(r.IntN(256) - 128)
		}
		ql := make([]byte, QKK/2)
		qh := make([]byte, QKK/4)
		for j := 0; j < QKK; j += 128 {
			for l := range 32 {
				q1, q2, q3, q4 := L[j+l]&0xf, L[j+l+32]&0xf, L[j+l+64]&0xf, L[j+l+96]&0xf
				ql[j/2+l] = q1 | q3<<4
				ql[j/2+l+32] = q2 | q4<<4
				qh[j/4+l] = L[j+l]>>4 | (L[j+l+32]>>4)<<2 | (L[j+l+64]>>4)<<4 | (L[j+l+96]>>4)<<6
			}
		}
		blk := append(append([]byte{}, ql...), qh...)
		for _, s := range sc {
			blk = append(blk, byte(s))
		}
		blk = binary.LittleEndian.AppendUint16(blk, dh)
		DequantQ6_K(blk, got)
		for i := range QKK {
			w := float32(d*float32(sc[i/16])) * float32(int(L[i])-32)
			if got[i] != w {
				t.Fatalf("value %d: got %g, want %g", i, got[i], w)
			}
		}
	})
}

func TestBlockDecoderErrors(t *testing.T) {
	dst := make([]float32, 48)
	h := &Host{Name: "w", Format: Q8_0, Shape: []int{1, 48}, Data: make([]byte, 51)}
	if err := h.DecodeRow(0, dst); err == nil {
		t.Error("48 values of Q8_0 (not a whole block): no error")
	}
	dst = make([]float32, 64)
	h = &Host{Name: "w", Format: Q4_K, Shape: []int{2, 64}, Data: make([]byte, 10)}
	if err := h.DecodeRow(1, dst); err == nil {
		t.Error("Q4_K row of 64: no error")
	}
	h = &Host{Name: "w", Format: Q4_0, Shape: []int{2, 64}, Data: make([]byte, 2*2*BlockBytesQ4_0-1)}
	if err := h.DecodeRow(1, dst); err == nil {
		t.Error("short Q4_0 data: no error")
	}
}
