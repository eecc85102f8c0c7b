package tensor

// Reference dequantization of the GGML block formats that GGUF files carry
// (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), written to give the same float32 values as
// ggml's dequantize_row_* (ggml-quants.c) and gguf-py's quants.py: the same
// operations in the same order, each product rounded to float32 before the
// next operation (explicit float32 conversions stop the compiler from fusing
// a*b-c into an FMA on arm64, which would change the last bit).
//
// A row of a block format is cols/values consecutive blocks; a tensor is rows
// such rows back to back, with no padding.

import (
	"encoding/binary"
	"fmt"
)

// Block geometry of the GGML formats.
const (
	QK8_0 = 32  // values per Q8_0 block
	QK4_0 = 32  // values per Q4_0 block
	QKK   = 256 // values per k-quant super-block

	BlockBytesQ8_0 = 2 + QK8_0                  // f16 d, int8 qs[32]
	BlockBytesQ4_0 = 2 + QK4_0/2                // f16 d, qs[16]
	BlockBytesQ4_K = 2 + 2 + 12 + QKK/2         // d, dmin, scales[12], qs[128]
	BlockBytesQ5_K = 2 + 2 + 12 + QKK/8 + QKK/2 // d, dmin, scales[12], qh[32], qs[128]
	BlockBytesQ6_K = QKK/2 + QKK/4 + QKK/16 + 2 // ql[128], qh[64], int8 scales[16], d
)

func init() {
	RegisterRowDecoder(Q8_0, decodeQ8_0Row)
	RegisterRowDecoder(Q4_0, decodeQ4_0Row)
	RegisterRowDecoder(Q4_K, decodeQ4_KRow)
	RegisterRowDecoder(Q5_K, decodeQ5_KRow)
	RegisterRowDecoder(Q6_K, decodeQ6_KRow)
}

// BlockLayout gives the number of values per block and the bytes per block of
// a storage format (1 value of 4 or 2 bytes for F32, F16, BF16); ok is false
// for formats that are not stored as fixed-size blocks (MLXAffine, integers).
func BlockLayout(f Format) (values, bytes int, ok bool) {
	switch f {
	case F32:
		return 1, 4, true
	case F16, BF16:
		return 1, 2, true
	case Q8_0:
		return QK8_0, BlockBytesQ8_0, true
	case Q4_0:
		return QK4_0, BlockBytesQ4_0, true
	case Q4_K:
		return QKK, BlockBytesQ4_K, true
	case Q5_K:
		return QKK, BlockBytesQ5_K, true
	case Q6_K:
		return QKK, BlockBytesQ6_K, true
	}
	return 0, 0, false
}

// RowBytes is the size in bytes of one row of cols values in format f, or an
// error if f is not a block format or cols is not a whole number of blocks.
func RowBytes(f Format, cols int) (int, error) {
	vals, bytes, ok := BlockLayout(f)
	if !ok {
		return 0, fmt.Errorf("format %v has no fixed block layout", f)
	}
	if cols < 0 || cols%vals != 0 {
		return 0, fmt.Errorf("row of %d values is not a whole number of %v blocks of %d", cols, f, vals)
	}
	return cols / vals * bytes, nil
}

// blockRow checks the tensor's size against its block layout and returns the
// bytes of row `row`.
func blockRow(h *Host, row int) ([]byte, error) {
	rb, err := RowBytes(h.Format, h.Cols())
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", h.Name, err)
	}
	if want := h.Rows() * rb; len(h.Data) != want {
		return nil, fmt.Errorf("tensor %s: %d bytes for %v %v, want %d", h.Name, len(h.Data), h.Format, h.Shape, want)
	}
	return h.Data[row*rb : (row+1)*rb], nil
}

func f16At(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

func decodeQ8_0Row(h *Host, row int, dst []float32) error {
	b, err := blockRow(h, row)
	if err != nil {
		return err
	}
	DequantQ8_0(b, dst)
	return nil
}

// DequantQ8_0 decodes len(dst)/32 Q8_0 blocks from b: y = d*q.
func DequantQ8_0(b []byte, dst []float32) {
	for i := 0; i < len(dst); i += QK8_0 {
		blk := b[:BlockBytesQ8_0]
		b = b[BlockBytesQ8_0:]
		d := f16At(blk)
		y := dst[i : i+QK8_0]
		for j := range y {
			y[j] = float32(int8(blk[2+j])) * d
		}
	}
}

func decodeQ4_0Row(h *Host, row int, dst []float32) error {
	b, err := blockRow(h, row)
	if err != nil {
		return err
	}
	DequantQ4_0(b, dst)
	return nil
}

// DequantQ4_0 decodes len(dst)/32 Q4_0 blocks: value j (j < 16) is the low
// nibble of qs[j], value j+16 its high nibble; y = (q-8)*d.
func DequantQ4_0(b []byte, dst []float32) {
	for i := 0; i < len(dst); i += QK4_0 {
		blk := b[:BlockBytesQ4_0]
		b = b[BlockBytesQ4_0:]
		d := f16At(blk)
		qs := blk[2:]
		y := dst[i : i+QK4_0]
		for j := 0; j < QK4_0/2; j++ {
			y[j] = float32(int(qs[j]&0x0f)-8) * d
			y[j+QK4_0/2] = float32(int(qs[j]>>4)-8) * d
		}
	}
}

// scaleMinK4 unpacks the j-th (scale, min) pair of the 12 packed bytes of a
// Q4_K/Q5_K super-block (ggml's get_scale_min_k4): 8 pairs of 6-bit values;
// pairs 0-3 sit in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins), pairs
// 4-7 take their low 4 bits from bytes 8-11 and their top 2 bits from the top
// bits of bytes 0-3 (scales) and 4-7 (mins).
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0x0f | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

func decodeQ4_KRow(h *Host, row int, dst []float32) error {
	b, err := blockRow(h, row)
	if err != nil {
		return err
	}
	DequantQ4_K(b, dst)
	return nil
}

// DequantQ4_K decodes len(dst)/256 Q4_K super-blocks. Each 64 values share
// 32 bytes of qs: the first 32 values are the low nibbles (scale pair 2k), the
// next 32 the high nibbles (pair 2k+1); y = d*sc*q - dmin*m.
func DequantQ4_K(b []byte, dst []float32) {
	for i := 0; i < len(dst); i += QKK {
		blk := b[:BlockBytesQ4_K]
		b = b[BlockBytesQ4_K:]
		d := f16At(blk)
		dmin := f16At(blk[2:])
		scales := blk[4:16]
		q := blk[16:]
		y := dst[i : i+QKK]
		is := 0
		for j := 0; j < QKK; j += 64 {
			sc, m := scaleMinK4(is, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(is+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			for l := 0; l < 32; l++ {
				y[j+l] = float32(d1*float32(q[l]&0x0f)) - m1
			}
			for l := 0; l < 32; l++ {
				y[j+32+l] = float32(d2*float32(q[l]>>4)) - m2
			}
			q = q[32:]
			is += 2
		}
	}
}

func decodeQ5_KRow(h *Host, row int, dst []float32) error {
	b, err := blockRow(h, row)
	if err != nil {
		return err
	}
	DequantQ5_K(b, dst)
	return nil
}

// DequantQ5_K decodes len(dst)/256 Q5_K super-blocks: as Q4_K, with a fifth
// bit from qh: for the k-th group of 64 values, bit 2k of qh[l] is the high
// bit of value l (low nibble half) and bit 2k+1 that of value 32+l.
func DequantQ5_K(b []byte, dst []float32) {
	for i := 0; i < len(dst); i += QKK {
		blk := b[:BlockBytesQ5_K]
		b = b[BlockBytesQ5_K:]
		d := f16At(blk)
		dmin := f16At(blk[2:])
		scales := blk[4:16]
		qh := blk[16 : 16+QKK/8]
		ql := blk[16+QKK/8:]
		y := dst[i : i+QKK]
		is := 0
		u1, u2 := uint8(1), uint8(2)
		for j := 0; j < QKK; j += 64 {
			sc, m := scaleMinK4(is, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(is+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			for l := 0; l < 32; l++ {
				q := ql[l] & 0x0f
				if qh[l]&u1 != 0 {
					q += 16
				}
				y[j+l] = float32(d1*float32(q)) - m1
			}
			for l := 0; l < 32; l++ {
				q := ql[l] >> 4
				if qh[l]&u2 != 0 {
					q += 16
				}
				y[j+32+l] = float32(d2*float32(q)) - m2
			}
			ql = ql[32:]
			is += 2
			u1 <<= 2
			u2 <<= 2
		}
	}
}

func decodeQ6_KRow(h *Host, row int, dst []float32) error {
	b, err := blockRow(h, row)
	if err != nil {
		return err
	}
	DequantQ6_K(b, dst)
	return nil
}

// DequantQ6_K decodes len(dst)/256 Q6_K super-blocks. Each half of 128 values
// uses 64 bytes of ql (low 4 bits), 32 of qh (high 2 bits) and 8 int8 scales
// (one per 16 values): for l < 32, values l, l+32, l+64, l+96 take the low
// nibble of ql[l], of ql[l+32], the high nibble of ql[l], of ql[l+32], and
// bits 0-1, 2-3, 4-5, 6-7 of qh[l]; y = d*sc*(q-32).
func DequantQ6_K(b []byte, dst []float32) {
	for i := 0; i < len(dst); i += QKK {
		blk := b[:BlockBytesQ6_K]
		b = b[BlockBytesQ6_K:]
		ql := blk[:QKK/2]
		qh := blk[QKK/2 : QKK/2+QKK/4]
		sc := blk[QKK/2+QKK/4 : QKK/2+QKK/4+QKK/16]
		d := f16At(blk[QKK/2+QKK/4+QKK/16:])
		y := dst[i : i+QKK]
		for n := 0; n < QKK; n += 128 {
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int(ql[l]&0x0f|(qh[l]>>0&3)<<4) - 32
				q2 := int(ql[l+32]&0x0f|(qh[l]>>2&3)<<4) - 32
				q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				y[n+l] = float32(d*float32(int8(sc[is]))) * float32(q1)
				y[n+l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
				y[n+l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
				y[n+l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
			}
			ql = ql[64:]
			qh = qh[32:]
			sc = sc[8:]
		}
	}
}
