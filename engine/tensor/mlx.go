package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// MLX affine quantization (mlx.core.quantize, mode "affine"), as written by
// mlx_lm.convert. Each row of `cols` logical values is stored as a
// little-endian bit stream of cols*Bits bits packed into uint32 words:
// value j sits in bits [j*Bits, (j+1)*Bits) of the row's bytes, lowest bits
// first. For 2, 4 and 8 bits that is "32/Bits values per word, element 0 in
// the low bits"; for 3, 5 and 6 bits MLX packs 8, 8 and 4 values into every
// 3, 5 and 3 bytes the same way. Group k of a row (columns
// [k*GroupSize, (k+1)*GroupSize)) has one scale and one bias:
//
//	w = float32(scale)*float32(q) + float32(bias)
//
// with the product rounded to float32 before the add (no fused multiply-add),
// which is how the reference logits were computed. Scales may be negative.
// Row bytes start at arbitrary offsets in the mapping (MLX headers are
// unpadded), so everything is read byte-wise.

func init() { RegisterRowDecoder(MLXAffine, decodeMLXAffineRow) }

// checkMLX validates the packed data and the scale/bias tensors of h.
func checkMLX(h *Host) error {
	switch h.Bits {
	case 2, 3, 4, 5, 6, 8:
	default:
		return fmt.Errorf("tensor %s: MLX affine bits %d not supported", h.Name, h.Bits)
	}
	cols := h.Cols()
	if h.GroupSize <= 0 || cols%h.GroupSize != 0 {
		return fmt.Errorf("tensor %s: row of %d values is not a whole number of groups of %d", h.Name, cols, h.GroupSize)
	}
	if cols*h.Bits%32 != 0 {
		return fmt.Errorf("tensor %s: row of %d %d-bit values is not a whole number of uint32 words", h.Name, cols, h.Bits)
	}
	if want := h.Rows() * cols * h.Bits / 8; len(h.Data) != want {
		return fmt.Errorf("tensor %s: %d packed bytes for %v at %d bits, want %d", h.Name, len(h.Data), h.Shape, h.Bits, want)
	}
	groups := h.Rows() * (cols / h.GroupSize)
	for _, s := range []*Host{h.Scales, h.Biases} {
		if s == nil {
			return fmt.Errorf("tensor %s: MLX affine tensor without scales or biases", h.Name)
		}
		size := 0
		switch s.Format {
		case F32:
			size = 4
		case F16, BF16:
			size = 2
		default:
			return fmt.Errorf("tensor %s: scales/biases %s in format %v, want F32, F16 or BF16", h.Name, s.Name, s.Format)
		}
		if len(s.Data) != groups*size {
			return fmt.Errorf("tensor %s: scales/biases %s have %d bytes, want %d groups of %v", h.Name, s.Name, len(s.Data), groups, s.Format)
		}
	}
	return nil
}

// floatAt reads element i of a F32/F16/BF16 tensor.
func floatAt(s *Host, i int) float32 {
	switch s.Format {
	case F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(s.Data[4*i:]))
	case F16:
		return F16ToF32(binary.LittleEndian.Uint16(s.Data[2*i:]))
	default:
		return BF16ToF32(binary.LittleEndian.Uint16(s.Data[2*i:]))
	}
}

func decodeMLXAffineRow(h *Host, row int, dst []float32) error {
	if err := checkMLX(h); err != nil {
		return err
	}
	cols := len(dst)
	bits := h.Bits
	rowBytes := cols * bits / 8
	src := h.Data[row*rowBytes : (row+1)*rowBytes]
	groups := cols / h.GroupSize
	mask := uint64(1)<<bits - 1
	for k := 0; k < groups; k++ {
		scale := floatAt(h.Scales, row*groups+k)
		bias := floatAt(h.Biases, row*groups+k)
		for j := k * h.GroupSize; j < (k+1)*h.GroupSize; j++ {
			bit := j * bits
			// A value spans at most 2 bytes (bits <= 8); read 2 when present.
			v := uint64(src[bit>>3])
			if (bit&7)+bits > 8 {
				v |= uint64(src[bit>>3+1]) << 8
			}
			q := float32((v >> (bit & 7)) & mask)
			dst[j] = float32(scale*q) + bias
		}
	}
	return nil
}
