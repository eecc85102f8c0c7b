package kernels

// Q4_K. A Q4_K row is, per 32 values,
// w = (d·sc)·q − dmin·m with 4-bit codes q: an affine group of 32 with
// scale d·sc and bias −dmin·m. PrepareQ4K packs it natively (kquant5.go's
// layout without the fifth bit: 4.6 bits per weight, Q4_K's 4.5).
// PrepareQ4KAsMLX instead rewrites it as an MLX affine 4-bit matrix of group 32 with
// float32 scales and biases (exact: the same float32 operations as ggml's
// dequantize_row_q4_K, so the row values are bit-identical) on the MLX
// kernels with float32 heads: 6 bits per weight. (bf16 scales, 5 bits per weight, were tried: their
// rounding alone moved the tiny fixture's logits by 0.037 rel-L2.)

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/macpool/macpool/engine/tensor"
)

// PrepareQ4K packs a Q4_K matrix for the packed K-quant kernels (VNNI,
// AVX2 one-row, arm64 SDOT; ErrUnsupported without them) in the packed Q5_K layout without the fifth bit
// (kquant5.go): 4-bit codes, the super-block's d, dmin and
// unpacked 6-bit scales and mins, 148 bytes per row and super-block (Q4_K
// 144). The kernels compute exactly what the MLX rewrite below does on the
// MLX kernels (scale d·sc, min dmin·m in float32, the same order of
// operations), at 4.6 instead of 6 bits per weight.
func PrepareQ4K(h *tensor.Host) (*Matrix, error) { return prepareKQ5(h, tensor.Q4_K) }

// PrepareQ4KAsMLX packs a Q4_K matrix through its MLX affine rewrite
// (Q4KAsMLX) on the MLX kernels with float32 heads: the session-2 path,
// kept for comparison (6 bits per weight).
func PrepareQ4KAsMLX(h *tensor.Host) (*Matrix, error) {
	mh, err := Q4KAsMLX(h)
	if err != nil {
		return nil, err
	}
	m := &Matrix{Format: tensor.MLXAffine, Rows: h.Rows(), Cols: h.Cols()}
	if err := prepareMLX(mh, m); err != nil {
		return nil, err
	}
	return m, nil
}

// Q4KAsMLX rewrites a Q4_K matrix as MLX affine 4-bit, group 32, with
// float32 scales (d·sc) and biases (−dmin·m).
func Q4KAsMLX(h *tensor.Host) (*tensor.Host, error) {
	if h.Format != tensor.Q4_K || len(h.Shape) != 2 {
		return nil, fmt.Errorf("kernels: q4_k %s: format %v shape %v: %w", h.Name, h.Format, h.Shape, ErrUnsupported)
	}
	if !usePacked() {
		return nil, fmt.Errorf("kernels: q4_k %s: %w (no VNNI)", h.Name, ErrUnsupported)
	}
	rows, cols := h.Rows(), h.Cols()
	if cols%tensor.QKK != 0 || len(h.Data) != rows*cols/tensor.QKK*tensor.BlockBytesQ4_K {
		return nil, fmt.Errorf("kernels: q4_k %s: %d bytes for shape %v", h.Name, len(h.Data), h.Shape)
	}
	ngr := cols / QK
	codes := make([]byte, rows*cols/2)
	scales := make([]byte, 4*rows*ngr)
	biases := make([]byte, 4*rows*ngr)
	le := binary.LittleEndian
	for r := range rows {
		for sb := range cols / tensor.QKK {
			o := (r*cols/tensor.QKK + sb) * tensor.BlockBytesQ4_K
			blk := h.Data[o : o+tensor.BlockBytesQ4_K]
			d := tensor.F16ToF32(le.Uint16(blk))
			dmin := tensor.F16ToF32(le.Uint16(blk[2:]))
			sc, qs := blk[4:16], blk[16:]
			for j := range 8 { // groups of 32: low nibbles of 32 bytes, then high
				s, m := scaleMinK4(j, sc)
				g := r*ngr + sb*8 + j
				le.PutUint32(scales[4*g:], math.Float32bits(d*float32(s)))
				le.PutUint32(biases[4*g:], math.Float32bits(-(dmin * float32(m))))
				q := qs[j/2*32 : j/2*32+32]
				dst := codes[(r*cols+sb*tensor.QKK+j*QK)/2:]
				for k := 0; k < QK; k += 2 { // MLX: value k in the low nibble
					lo, hi := q[k], q[k+1]
					if j%2 == 1 {
						lo, hi = lo>>4, hi>>4
					}
					dst[k/2] = lo&0x0f | (hi&0x0f)<<4
				}
			}
		}
	}
	shape := []int{rows, ngr}
	return &tensor.Host{Name: h.Name, Format: tensor.MLXAffine, Shape: h.Shape, Data: codes, Bits: 4, GroupSize: QK,
		Scales: &tensor.Host{Name: h.Name + ".scales", Format: tensor.F32, Shape: shape, Data: scales},
		Biases: &tensor.Host{Name: h.Name + ".biases", Format: tensor.F32, Shape: shape, Data: biases},
		Source: h.Source}, nil
}

// scaleMinK4 is ggml's get_scale_min_k4: scale and min of group j of a
// Q4_K/Q5_K super-block from its 12 packed bytes.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0x0f | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}
