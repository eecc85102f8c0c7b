package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// rowDecoders decode one row of a format into float32. Quantized formats
// register theirs in their own files (see init functions there), so each
// format's reference code lives next to its layout description.
var rowDecoders = map[Format]func(h *Host, row int, dst []float32) error{
	F32:  decodeF32Row,
	F16:  decodeF16Row,
	BF16: decodeBF16Row,
}

// RegisterRowDecoder installs the reference decoder of a format. It is meant
// for init functions in this package and panics on a duplicate (a programmer error).
func RegisterRowDecoder(f Format, fn func(h *Host, row int, dst []float32) error) {
	if _, dup := rowDecoders[f]; dup {
		panic(fmt.Sprintf("tensor: duplicate row decoder for %v", f))
	}
	rowDecoders[f] = fn
}

// DecodeRow writes row `row` of h (len(dst) == h.Cols()) as float32. It is the
// reference (exact) dequantization that fast kernels are tested against.
func (h *Host) DecodeRow(row int, dst []float32) error {
	if row < 0 || row >= h.Rows() {
		return fmt.Errorf("tensor %s: row %d out of range [0,%d)", h.Name, row, h.Rows())
	}
	if len(dst) != h.Cols() {
		return fmt.Errorf("tensor %s: destination has %d values, row has %d", h.Name, len(dst), h.Cols())
	}
	fn, ok := rowDecoders[h.Format]
	if !ok {
		return fmt.Errorf("tensor %s: no decoder for format %v", h.Name, h.Format)
	}
	return fn(h, row, dst)
}

// Float32s dequantizes the whole tensor into a new slice. Use it for small
// tensors (norms, biases) and in tests; large matrices should stay in their
// stored format.
func (h *Host) Float32s() ([]float32, error) {
	out := make([]float32, h.Numel())
	cols := h.Cols()
	for r := 0; r < h.Rows(); r++ {
		if err := h.DecodeRow(r, out[r*cols:(r+1)*cols]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func checkBytes(h *Host, elemSize int) error {
	if want := h.Numel() * elemSize; len(h.Data) != want {
		return fmt.Errorf("tensor %s: %d bytes for %v %v, want %d", h.Name, len(h.Data), h.Format, h.Shape, want)
	}
	return nil
}

func decodeF32Row(h *Host, row int, dst []float32) error {
	if err := checkBytes(h, 4); err != nil {
		return err
	}
	b := h.Data[row*len(dst)*4:]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[i*4:]))
	}
	return nil
}

func decodeBF16Row(h *Host, row int, dst []float32) error {
	if err := checkBytes(h, 2); err != nil {
		return err
	}
	b := h.Data[row*len(dst)*2:]
	for i := range dst {
		dst[i] = BF16ToF32(binary.LittleEndian.Uint16(b[i*2:]))
	}
	return nil
}

func decodeF16Row(h *Host, row int, dst []float32) error {
	if err := checkBytes(h, 2); err != nil {
		return err
	}
	b := h.Data[row*len(dst)*2:]
	for i := range dst {
		dst[i] = F16ToF32(binary.LittleEndian.Uint16(b[i*2:]))
	}
	return nil
}

// BF16ToF32 widens a bfloat16 (the top half of a float32).
func BF16ToF32(v uint16) float32 { return math.Float32frombits(uint32(v) << 16) }

// F32ToBF16 rounds to nearest even, as torch does; NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 widens an IEEE 754 half, subnormals and infinities included.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalise
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	}
}

// F32ToF16 rounds to nearest even, with overflow to infinity and subnormals.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	if b&0x7fffffff > 0x7f800000 { // NaN
		return sign | 0x7e00
	}
	if exp >= 0x1f {
		return sign | 0x7c00
	}
	if exp <= 0 {
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		rem := mant & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}
