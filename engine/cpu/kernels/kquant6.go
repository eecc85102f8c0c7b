package kernels

// Native Q6_K on the AVX-512 VNNI kernels. A Q6_K value is
// w = (d·sc)·(q − 32): 6-bit codes q, one int8 scale sc per 16 values and
// one f16 d per 256 (a super-block). PrepareQ6K keeps the codes at 6 bits
// and the scales at 8 (the packed matrix is exactly the size of the ggml
// data: 210 bytes per row and super-block) in a layout the kernels unpack
// in registers:
//
//	codes: per group of 16 rows, per block of 32 columns, 384 bytes:
//	  4 chunks L_j (64 bytes): byte 4r+i = low nibble of value 4j+i of row r
//	    | low nibble of value 16+4j+i << 4
//	  2 chunks H_h (64 bytes): byte 4r+i, bits 2c..2c+1 = high 2 bits of
//	    value 16h+4c+i of row r (c < 4)
//	heads: per group of 16 rows, per super-block, 288 bytes: 16 f16 d, then
//	  per block b and half h (16 values): 16 int8 scales (one per row) at
//	  32 + (2b+h)·16
//
// The codes of all groups come first (64-byte aligned blocks), then the
// heads. One 64-byte chunk, unpacked, holds 4 consecutive codes of 16 rows:
// VPDPBUSD multiplies them (unsigned) with 4 broadcast int8 activations.
// Per activation block of 32 (one scale d_x) and half h of 16 values the
// int32 sum is corrected for the code offset with the half-block
// activation sums (Input.S6 = −32·Σq), and the block contributes, in this
// order of float32 operations (every kernel, every batch size: the result
// of a row does not depend on the rows computed with it):
//
//	s_h = float32(d·float32(sc_h))            (the decoder's scale, exact)
//	f   = float32(i_0)·s_0
//	f   = fma(float32(i_1), s_1, f)
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
	q6BlockBytes = 384                      // codes of 16 rows × 32 values
	q6SBCodes    = 8 * q6BlockBytes         // codes of 16 rows × one super-block
	q6Head       = 2*packRows + 16*packRows // 16 f16 d + 16×16 int8 scales
)

// KQuantPacked reports whether K-quant matrices (Q4_K, Q5_K, Q6_K) have
// native packed kernels on this machine (AVX-512 VNNI, their one-row
// AVX2 versions, or arm64 SDOT): PrepareQ4K/Q5K/Q6K succeed.
func KQuantPacked() bool { return kqPacked() }

// layoutQ6K marks a Matrix packed by PrepareQ6K.
const layoutQ6K layout = 100

// PrepareQ6K packs a Q6_K matrix for the VNNI kernels, their one-row
// AVX2 versions or the arm64 SDOT kernels (ErrUnsupported without them:
// the caller keeps the row decoder or requantizes).
func PrepareQ6K(h *tensor.Host) (*Matrix, error) {
	if h.Format != tensor.Q6_K || len(h.Shape) != 2 {
		return nil, fmt.Errorf("kernels: q6_k %s: format %v shape %v: %w", h.Name, h.Format, h.Shape, ErrUnsupported)
	}
	if !kqPacked() {
		return nil, fmt.Errorf("kernels: q6_k %s: %w (no VNNI, AVX2 or SDOT)", h.Name, ErrUnsupported)
	}
	rows, cols := h.Rows(), h.Cols()
	if rows <= 0 || cols <= 0 || cols%tensor.QKK != 0 {
		return nil, fmt.Errorf("kernels: q6_k %s: shape %v: %w (columns not a multiple of %d)", h.Name, h.Shape, ErrUnsupported, tensor.QKK)
	}
	nsb := cols / tensor.QKK
	if len(h.Data) != rows*nsb*tensor.BlockBytesQ6_K {
		return nil, fmt.Errorf("kernels: q6_k %s: %d bytes for shape %v, want %d", h.Name, len(h.Data), h.Shape, rows*nsb*tensor.BlockBytesQ6_K)
	}
	groups := (rows + packRows - 1) / packRows
	m := &Matrix{Format: tensor.Q6_K, Rows: rows, Cols: cols, nb: cols / QK, layout: layoutQ6K, copied: true}
	m.data = allocPacked(groups * nsb * (q6SBCodes + q6Head)) // zeroed: padding rows decode to 0
	m.kqHeads = groups * nsb * q6SBCodes
	workers := min(runtime.GOMAXPROCS(0), max(1, len(h.Data)>>20), groups)
	var wg sync.WaitGroup
	for w := range workers {
		g0, g1 := groups*w/workers, groups*(w+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := g0 * packRows; r < min(rows, g1*packRows); r++ {
				m.packQ6KRow(r, h.Data[r*nsb*tensor.BlockBytesQ6_K:(r+1)*nsb*tensor.BlockBytesQ6_K])
			}
		}()
	}
	wg.Wait()
	return m, nil
}

// q6Code is the 6-bit code of value c (< 256) of a Q6_K super-block.
func q6Code(blk []byte, c int) byte {
	half, w := c/128, c%128
	j, l := w/32, w%32
	ql := blk[half*64:]
	qh := blk[tensor.QKK/2+half*32:]
	lo := ql[l+32*(j&1)] >> (4 * (j >> 1)) & 0x0f
	return lo | (qh[l]>>(2*j)&3)<<4
}

// packQ6KRow writes row r (its ggml super-blocks src) into the packed
// layout; rows of a group write disjoint bytes.
func (m *Matrix) packQ6KRow(r int, src []byte) {
	nsb := m.Cols / tensor.QKK
	g, lane := r/packRows, r%packRows
	for s := range nsb {
		blk := src[s*tensor.BlockBytesQ6_K : (s+1)*tensor.BlockBytesQ6_K]
		head := m.data[m.kqHeads+(g*nsb+s)*q6Head:]
		copy(head[2*lane:2*lane+2], blk[tensor.BlockBytesQ6_K-2:])
		sc := blk[tensor.QKK/2+tensor.QKK/4:]
		for sub := range 16 {
			head[2*packRows+sub*packRows+lane] = sc[sub]
		}
		codes := m.data[(g*nsb+s)*q6SBCodes:]
		for b := range 8 {
			// Block b is the values 32(b%4)+l of the super-block's half b/4
			// (see tensor.DequantQ6_K): low nibbles from ql, two high bits
			// from qh.
			half, j := b/4, b%4
			ql := blk[half*64+32*(j&1):][:QK]
			qh := blk[tensor.QKK/2+half*32:][:QK]
			lsh, hsh := 4*(j>>1), 2*j
			var code [QK]byte // the 6-bit codes, 8 at a time
			le := binary.LittleEndian
			for l := 0; l < QK; l += 8 {
				le.PutUint64(code[l:], le.Uint64(ql[l:])>>lsh&0x0f0f0f0f0f0f0f0f|(le.Uint64(qh[l:])>>hsh&0x0303030303030303)<<4)
			}
			cb := codes[b*q6BlockBytes:][:q6BlockBytes]
			var h0, h1 uint32
			for c := range 4 { // values 4c..4c+3 (half 0) and 16+4c.. (half 1)
				lo, hi := le.Uint32(code[4*c:]), le.Uint32(code[16+4*c:])
				le.PutUint32(cb[c*packChunkLen+4*lane:], lo&0x0f0f0f0f|(hi&0x0f0f0f0f)<<4)
				h0 |= (lo >> 4 & 0x03030303) << (2 * c)
				h1 |= (hi >> 4 & 0x03030303) << (2 * c)
			}
			le.PutUint32(cb[4*packChunkLen+4*lane:], h0)
			le.PutUint32(cb[5*packChunkLen+4*lane:], h1)
		}
	}
}

// q6Unpack returns the code of value k (< 32) of row lane in the 384
// packed bytes of a block.
func q6Unpack(cb []byte, lane, k int) byte {
	h, v := k/16, k%16
	j, i := v/4, v%4
	lo := cb[j*packChunkLen+4*lane+i] >> (4 * h) & 0x0f
	hi := cb[(4+h)*packChunkLen+4*lane+i] >> (2 * j) & 3
	return lo | hi<<4
}

// unpackQ6KRow decodes row r with the values of tensor.DequantQ6_K:
// float32(d·float32(sc))·float32(q − 32).
func (m *Matrix) unpackQ6KRow(r int, dst []float32) {
	nsb := m.Cols / tensor.QKK
	g, lane := r/packRows, r%packRows
	for s := range nsb {
		head := m.data[m.kqHeads+(g*nsb+s)*q6Head:]
		d := tensor.F16ToF32(binary.LittleEndian.Uint16(head[2*lane:]))
		codes := m.data[(g*nsb+s)*q6SBCodes:]
		for b := range 8 {
			cb := codes[b*q6BlockBytes:]
			for k := range QK {
				sc := d * float32(int8(head[2*packRows+(2*b+k/16)*packRows+lane]))
				dst[s*tensor.QKK+b*QK+k] = sc * float32(int(q6Unpack(cb, lane, k))-32)
			}
		}
	}
}

// dotQ6KRowGo is the reference of the int8-activation Q6_K product for
// row r of the original tensor, in the kernels' order of float32
// operations (see the file comment); s6 = Input.S6 of the activation row.
func dotQ6KRowGo(h *tensor.Host, r int, q []int8, d []float32, s6 []int32) float32 {
	cols := h.Cols()
	nsb := cols / tensor.QKK
	row := h.Data[r*nsb*tensor.BlockBytesQ6_K:]
	var acc float32
	for b := range cols / QK {
		s, bb := b/8, b%8
		blk := row[s*tensor.BlockBytesQ6_K : (s+1)*tensor.BlockBytesQ6_K]
		dw := tensor.F16ToF32(binary.LittleEndian.Uint16(blk[tensor.BlockBytesQ6_K-2:]))
		sc := blk[tensor.QKK/2+tensor.QKK/4:]
		var f float32
		for hf := range 2 {
			sum := s6[2*b+hf]
			for k := 16 * hf; k < 16*hf+16; k++ {
				sum += int32(q6Code(blk, bb*QK+k)) * int32(q[b*QK+k])
			}
			scale := dw * float32(int8(sc[2*bb+hf]))
			if hf == 0 {
				f = float32(sum) * scale
			} else {
				f = fma32(float32(sum), scale, f)
			}
		}
		acc = fma32(f, d[b], acc)
	}
	return acc
}

// fma32 is a·b + c rounded once to float32 (the product is exact in
// float64; the sum's double rounding can differ from a float32 FMA in the
// last bit only in rare ties, well within the tests' tolerance).
func fma32(a, b, c float32) float32 {
	return float32(math.FMA(float64(a), float64(b), float64(c)))
}

// halfSumsGo sets s6[j] = −32·Σ q[16j : 16j+16].
func halfSumsGo(q []int8, s6 []int32) {
	for j := range s6 {
		var s int32
		for _, v := range q[16*j : 16*j+16] {
			s += int32(v)
		}
		s6[j] = -32 * s
	}
}

// q6ChunkBytes: the weight groups of matmulKQ are taken in chunks of
// ~128 KiB of codes that stay in cache while every activation row passes.
const q6ChunkBytes = 128 << 10

// q6x8Words is the size of one block's entry of q6x8: 8 float32 scales,
// then the 16 half sums (row r: 8+2r, 9+2r).
const q6x8Words = 24

// q6x8 interleaves the scales and half sums of the rows [from, M&^7) for
// the 8-row kernel (as q5x8): row group j, block b at (j·nb + b)·q6x8Words.
func q6x8(in *Input, buf []uint32, from int) []uint32 {
	nb := in.K / QK
	m8 := in.M &^ 7
	n := m8 / 8 * nb * q6x8Words // every word of the rows from `from` on is written below
	if cap(buf) < n {
		buf = make([]uint32, n)
	}
	buf = buf[:n]
	for row := from; row < m8; row++ {
		j, r := row/8, row%8
		for b := range nb {
			e := buf[(j*nb+b)*q6x8Words:]
			e[r] = math.Float32bits(in.D[row*nb+b])
			e[8+2*r] = uint32(in.S6[2*(row*nb+b)])
			e[9+2*r] = uint32(in.S6[2*(row*nb+b)+1])
		}
	}
	return buf
}

// kqInput is an Input's K-quant 8-row interleaves (q6x8 / q5x8), each
// built by the first matmulKQ call that needs it and shared by the others
// (the backend's workers each multiply a range of weight rows with the
// same input: rebuilding it per call cost ~5% of a Q6_K prefill). One
// input can feed matrices of different formats (a Q4_K_M layer's q, k and
// v in one job, some of them Q6_K), whose interleaves differ in layout and
// in the first row (after the AMX tiles), so there is one per kind and
// first row; an entry is never rebuilt before Reset, because other workers
// may be reading it.
type kqInput struct {
	mu      sync.Mutex
	entries []kqEntry
}

type kqEntry struct {
	kind, from int // interleave (a layout) and first activation row
	done       bool
	buf        []uint32
}

// reset marks every interleave stale (Input.Reset), keeping the buffers.
func (k *kqInput) reset() {
	for i := range k.entries {
		k.entries[i].done = false
	}
}

// get returns the interleave of kind from row from, building it with
// build on the first call after Input.Reset.
func (k *kqInput) get(kind, from int, build func([]uint32) []uint32) []uint32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	free := -1
	for i := range k.entries {
		e := &k.entries[i]
		if e.done && e.kind == kind && e.from == from {
			return e.buf
		}
		if !e.done && free < 0 {
			free = i
		}
	}
	if free < 0 {
		k.entries = append(k.entries, kqEntry{})
		free = len(k.entries) - 1
	}
	e := &k.entries[free]
	e.kind, e.from = kind, from
	e.buf, e.done = build(e.buf), true
	return e.buf
}

// kqRows is how many activation rows from row i (of M) the K-quant
// kernels take in one pass over the weights: 16 (kq16), 8, 4 or 1.
func kqRows(m *Matrix, i, M int) int {
	switch {
	case M-i >= 16 && kq16(m):
		return 16
	case M-i >= 8:
		return 8
	case M-i >= 4:
		return 4
	}
	return 1
}

// matmulKQ drives the packed K-quant kernels (Q6_K, Q5_K, Q4_K) like
// matmulPacked: chunks of weight groups, the activation rows 8 at a time
// (scales and corrections interleaved by q6x8 / q5x8), then 4, then 1; a
// partial last group goes through tmp. Every kernel sums a row in the same
// order, so a row's result does not depend on M.
func matmulKQ(m *Matrix, dst []float32, ldd int, in *Input, n0, n1 int) {
	sbCodes, interleave, kind := q6SBCodes, q6x8, layoutQ6K
	switch m.layout {
	case layoutQ5K:
		sbCodes, interleave, kind = q5SBCodes, q5x8, layoutQ5K
	case layoutQ4K:
		sbCodes, interleave, kind = q4SBCodes, q5x8, layoutQ5K // Q4_K reads the Q5_K interleave
	}
	nsb := m.Cols / tensor.QKK
	g0, g1 := n0/packRows, (n1+packRows-1)/packRows
	full := n1 / packRows
	gc := max(1, q6ChunkBytes/(nsb*sbCodes))
	m16, s := amxRows(m, in)
	if s != nil {
		defer amxScratches.Put(s)
	}
	var x8 []uint32
	if in.M-m16 >= 8 && kqMultiRow() {
		x8 = in.kq.get(int(kind), m16, func(buf []uint32) []uint32 { return interleave(in, buf, m16) })
	}
	var tmp [packRows * 16]float32
	for c0 := g0; c0 < g1; c0 += gc {
		c1 := min(g1, c0+gc)
		i := 0
		if m16 > 0 {
			amxTiles(m, dst, ldd, in, m16, c0, c1, full, tmp[:], s)
			i = m16
		}
		for i < in.M {
			cols := kqRows(m, i, in.M)
			if end := min(c1, full); end > c0 {
				kqKernel(m, cols, c0, end-c0, in, x8, i, dst[i*ldd+c0*packRows:], ldd)
			}
			if c1 > full {
				g := c1 - 1
				kqKernel(m, cols, g, 1, in, x8, i, tmp[:], packRows)
				rows := m.Rows - g*packRows
				for c := range cols {
					copy(dst[(i+c)*ldd+g*packRows:(i+c)*ldd+g*packRows+rows], tmp[c*packRows:c*packRows+rows])
				}
			}
			i += cols
		}
	}
}
