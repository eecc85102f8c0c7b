package kernels

// Native Q5_K on the AVX-512 VNNI kernels. A Q5_K value is
// w = (d·sc)·q − dmin·m: 5-bit codes q, 6-bit scale sc and min m per 32
// values, f16 d and dmin per 256 (a super-block). PrepareQ5K keeps the
// codes at 5 bits and unpacks the 12 bytes of scales and mins of each
// super-block to 16 (180 bytes per row and super-block, Q5_K's 176 + 2%),
// in a layout the kernels unpack in registers:
//
//	codes: per group of 16 rows, per block of 32 columns, 320 bytes:
//	  4 chunks L_j (64 bytes): byte 4r+i = low nibble of value 4j+i of row r
//	    | low nibble of value 16+4j+i << 4
//	  1 chunk H (64 bytes): byte 4r+i, bit c = fifth bit of value 4c+i
//	heads: per group of 16 rows, per super-block, 320 bytes: 16 f16 d,
//	  16 f16 dmin, then per block b: 16 scales sc (one per row), 16 mins m
//
// A block of 32 is one affine group: with int8 activations (scale d_x,
// S128 = −128·Σq) it contributes, in this order of float32 operations
// (every kernel and batch size alike):
//
//	a   = float32(d·float32(sc))                 (the decoder's scale)
//	mb  = (dmin/128)·float32(m)                  (= dmin·m/128 exactly)
//	f   = float32(Σ q·q_x)·a
//	f   = fma(float32(S128), mb, f)              (= −dmin·m·Σq_x)
//	acc = fma(f, d_x, acc)

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/macpool/macpool/engine/tensor"
)

const (
	q5BlockBytes        = 320                      // codes of 16 rows × 32 values
	q5SBCodes           = 8 * q5BlockBytes         // codes of 16 rows × one super-block
	q5Head              = 4*packRows + 16*packRows // 16 f16 d, 16 f16 dmin, 8×(16 sc + 16 m)
	layoutQ5K    layout = 101                      // a Matrix packed by PrepareQ5K
	q4BlockBytes        = 256                      // Q4_K (kquant.go): codes of 16 rows × 32 values (no H chunk)
	q4SBCodes           = 8 * q4BlockBytes
	layoutQ4K    layout = 102 // a Matrix packed by PrepareQ4K (kquant.go)
)

// PrepareQ5K packs a Q5_K matrix for the packed K-quant kernels (VNNI,
// AVX2 one-row, arm64 SDOT; ErrUnsupported without them: the caller keeps
// the row decoder or requantizes).
func PrepareQ5K(h *tensor.Host) (*Matrix, error) { return prepareKQ5(h, tensor.Q5_K) }

// prepareKQ5 packs Q5_K, or Q4_K (the same layout without the H chunk:
// 148 bytes per row and super-block, Q4_K's 144 + 3%).
func prepareKQ5(h *tensor.Host, f tensor.Format) (*Matrix, error) {
	if h.Format != f || len(h.Shape) != 2 {
		return nil, fmt.Errorf("kernels: %v %s: format %v shape %v: %w", f, h.Name, h.Format, h.Shape, ErrUnsupported)
	}
	if !kqPacked() {
		return nil, fmt.Errorf("kernels: %v %s: %w (no VNNI, AVX2 or SDOT)", f, h.Name, ErrUnsupported)
	}
	rows, cols := h.Rows(), h.Cols()
	if rows <= 0 || cols <= 0 || cols%tensor.QKK != 0 {
		return nil, fmt.Errorf("kernels: %v %s: shape %v: %w (columns not a multiple of %d)", f, h.Name, h.Shape, ErrUnsupported, tensor.QKK)
	}
	nsb := cols / tensor.QKK
	bs, sbCodes, lay := tensor.BlockBytesQ5_K, q5SBCodes, layoutQ5K
	if f == tensor.Q4_K {
		bs, sbCodes, lay = tensor.BlockBytesQ4_K, q4SBCodes, layoutQ4K
	}
	if len(h.Data) != rows*nsb*bs {
		return nil, fmt.Errorf("kernels: %v %s: %d bytes for shape %v, want %d", f, h.Name, len(h.Data), h.Shape, rows*nsb*bs)
	}
	groups := (rows + packRows - 1) / packRows
	m := &Matrix{Format: f, Rows: rows, Cols: cols, nb: cols / QK, layout: lay, copied: true}
	m.data = allocPacked(groups * nsb * (sbCodes + q5Head)) // zeroed: padding rows decode to 0
	m.kqHeads = groups * nsb * sbCodes
	workers := min(runtime.GOMAXPROCS(0), max(1, len(h.Data)>>20), groups)
	var wg sync.WaitGroup
	for w := range workers {
		g0, g1 := groups*w/workers, groups*(w+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := g0 * packRows; r < min(rows, g1*packRows); r++ {
				m.packQ5KRow(r, h.Data[r*nsb*bs:(r+1)*nsb*bs])
			}
		}()
	}
	wg.Wait()
	return m, nil
}

// q5Codes sets code to the 5-bit codes of block b (< 8) of a Q5_K
// super-block (see tensor.DequantQ5_K): the low (even b) or high nibbles
// of qs[32(b/2):], the fifth bit from bit b of qh; for Q4_K (f) the 4-bit
// codes of tensor.DequantQ4_K (qs at 16).
func q5Codes(f tensor.Format, blk []byte, b int, code *[QK]byte) {
	le := binary.LittleEndian
	sh := 4 * (b % 2)
	if f == tensor.Q4_K {
		qs := blk[16+32*(b/2):][:QK]
		for l := 0; l < QK; l += 8 {
			le.PutUint64(code[l:], le.Uint64(qs[l:])>>sh&0x0f0f0f0f0f0f0f0f)
		}
		return
	}
	qh := blk[16 : 16+QK]
	qs := blk[16+QK+32*(b/2):][:QK]
	for l := 0; l < QK; l += 8 {
		le.PutUint64(code[l:], le.Uint64(qs[l:])>>sh&0x0f0f0f0f0f0f0f0f|(le.Uint64(qh[l:])>>b&0x0101010101010101)<<4)
	}
}

// kq5Sizes are the ggml super-block and packed block sizes of m (Q5_K or
// Q4_K).
func (m *Matrix) kq5Sizes() (srcBlock, block int) {
	if m.layout == layoutQ4K {
		return tensor.BlockBytesQ4_K, q4BlockBytes
	}
	return tensor.BlockBytesQ5_K, q5BlockBytes
}

// packQ5KRow writes row r (its ggml super-blocks src) into the packed
// layout; rows of a group write disjoint bytes.
func (m *Matrix) packQ5KRow(r int, src []byte) {
	nsb := m.Cols / tensor.QKK
	g, lane := r/packRows, r%packRows
	le := binary.LittleEndian
	bs, cbs := m.kq5Sizes()
	for s := range nsb {
		blk := src[s*bs : (s+1)*bs]
		head := m.data[m.kqHeads+(g*nsb+s)*q5Head:][:q5Head]
		copy(head[2*lane:2*lane+2], blk[0:2])
		copy(head[2*packRows+2*lane:2*packRows+2*lane+2], blk[2:4])
		codes := m.data[(g*nsb+s)*8*cbs:]
		for b := range 8 {
			sc, mn := scaleMinK4(b, blk[4:16])
			head[4*packRows+b*2*packRows+lane] = sc
			head[4*packRows+b*2*packRows+packRows+lane] = mn
			var code [QK]byte
			q5Codes(m.Format, blk, b, &code)
			cb := codes[b*cbs:][:cbs]
			var hb uint32
			for c := range 4 { // values 4c..4c+3 and 16+4c..
				lo, hi := le.Uint32(code[4*c:]), le.Uint32(code[16+4*c:])
				le.PutUint32(cb[c*packChunkLen+4*lane:], lo&0x0f0f0f0f|(hi&0x0f0f0f0f)<<4)
				hb |= (lo>>4&0x01010101)<<c | (hi>>4&0x01010101)<<(c+4)
			}
			if m.layout == layoutQ5K {
				le.PutUint32(cb[4*packChunkLen+4*lane:], hb)
			}
		}
	}
}

// q5Unpack returns the code of value k (< 32) of row lane in the 320
// packed bytes of a block.
func q5Unpack(cb []byte, lane, k int) byte {
	h, v := k/16, k%16
	j, i := v/4, v%4
	lo := cb[j*packChunkLen+4*lane+i] >> (4 * h) & 0x0f
	if len(cb) < q5BlockBytes { // Q4_K
		return lo
	}
	hi := cb[4*packChunkLen+4*lane+i] >> (k / 4) & 1
	return lo | hi<<4
}

// q5Params are the float32 scale a = d·sc and min m1 = dmin·m of block b
// of row lane in a packed head, as tensor.DequantQ5_K computes them.
func q5Params(head []byte, lane, b int) (a, m1 float32) {
	d := tensor.F16ToF32(binary.LittleEndian.Uint16(head[2*lane:]))
	dmin := tensor.F16ToF32(binary.LittleEndian.Uint16(head[2*packRows+2*lane:]))
	sc := head[4*packRows+b*2*packRows+lane]
	mn := head[4*packRows+b*2*packRows+packRows+lane]
	return d * float32(sc), dmin * float32(mn)
}

// unpackQ5KRow decodes row r with the values of tensor.DequantQ5_K (or
// DequantQ4_K): float32(d·sc·float32(q)) − dmin·m.
func (m *Matrix) unpackQ5KRow(r int, dst []float32) {
	nsb := m.Cols / tensor.QKK
	g, lane := r/packRows, r%packRows
	_, cbs := m.kq5Sizes()
	for s := range nsb {
		head := m.data[m.kqHeads+(g*nsb+s)*q5Head:]
		codes := m.data[(g*nsb+s)*8*cbs:]
		for b := range 8 {
			a, m1 := q5Params(head, lane, b)
			cb := codes[b*cbs:][:cbs]
			for k := range QK {
				dst[s*tensor.QKK+b*QK+k] = float32(a*float32(q5Unpack(cb, lane, k))) - m1
			}
		}
	}
}

// dotQ5KRowGo is the reference of the int8-activation Q5_K (or Q4_K)
// product for row r of the original tensor, in the kernels' order of
// float32 operations (see the file comment); s128 = Input.S128 of the row.
func dotQ5KRowGo(h *tensor.Host, r int, q []int8, d []float32, s128 []int32) float32 {
	cols := h.Cols()
	nsb := cols / tensor.QKK
	bs := tensor.BlockBytesQ5_K
	if h.Format == tensor.Q4_K {
		bs = tensor.BlockBytesQ4_K
	}
	row := h.Data[r*nsb*bs:]
	var acc float32
	var code [QK]byte
	for b := range cols / QK {
		s, bb := b/8, b%8
		blk := row[s*bs : (s+1)*bs]
		dw := tensor.F16ToF32(binary.LittleEndian.Uint16(blk))
		dmin := tensor.F16ToF32(binary.LittleEndian.Uint16(blk[2:]))
		sc, mn := scaleMinK4(bb, blk[4:16])
		q5Codes(h.Format, blk, bb, &code)
		var sum int32
		for k := range QK {
			sum += int32(code[k]) * int32(q[b*QK+k])
		}
		f := float32(sum) * (dw * float32(sc))
		f = fma32(float32(s128[b]), dmin*(1.0/128)*float32(mn), f)
		acc = fma32(f, d[b], acc)
	}
	return acc
}

// q5x8Words is the size of one block's entry of q5x8: 8 float32 scales,
// then the 8 corrections S128 as float32.
const q5x8Words = 16

// q5x8 interleaves the scales and S128 of the rows [from, M&^7) (from a
// multiple of 8: the rows before it go through the AMX kernels) for the
// 8-row kernel: row group j, block b at (j·nb + b)·q5x8Words.
func q5x8(in *Input, buf []uint32, from int) []uint32 {
	nb := in.K / QK
	m8 := in.M &^ 7
	n := m8 / 8 * nb * q5x8Words // every word of the rows from `from` on is written below
	if cap(buf) < n {
		buf = make([]uint32, n)
	}
	buf = buf[:n]
	for row := from; row < m8; row++ {
		j, r := row/8, row%8
		for b := range nb {
			e := buf[(j*nb+b)*q5x8Words:]
			e[r] = math.Float32bits(in.D[row*nb+b])
			e[8+r] = math.Float32bits(float32(in.S128[row*nb+b])) // exact: |S128| < 2^24
		}
	}
	return buf
}
