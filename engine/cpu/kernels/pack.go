package kernels

import (
	"encoding/binary"
	"runtime"
	"sync"
	"unsafe"

	"github.com/macpool/macpool/engine/tensor"
)

// The packed layout (AVX-512 VNNI) stores weight rows in groups of 16
// (the last group padded with zero rows). Group g is nb consecutive blocks,
// one per 32 columns; block b of group g is
//
//	16 × f16 scales d of rows 16g..16g+15, then the quants:
//	Q8_0: 8 chunks of 64 bytes; chunk j, bytes 4r..4r+3 = w[16g+r, 32b+4j+i] + 128 (i < 4)
//	Q4_0: 4 chunks of 64 bytes; chunk j, byte 4r+i = nibble of value 4j+i (low)
//	      | nibble of value 4(j+4)+i (high), nibbles as stored (value+8)
//
// so that one 64-byte chunk multiplies 4 activation values (broadcast) with
// 16 rows in one VPDPBUSD, whose unsigned operand is the weights: the
// kernels correct for the +128 / +8 offset with the activation block sums
// (Input.S128, Input.S8).
const (
	packRows     = 16
	packScales   = 2 * packRows
	packBlockQ8  = packScales + packRows*QK   // 544
	packBlockQ4  = packScales + packRows*QK/2 // 288
	packChunkLen = 64
)

func packBlockBytes(f tensor.Format) int {
	if f == tensor.Q8_0 {
		return packBlockQ8
	}
	return packBlockQ4
}

// pack converts rows×nb ggml blocks of format f to the packed layout,
// groups of 16 rows in parallel (load time: ~1 GB/s per core).
func pack(f tensor.Format, src []byte, rows, nb int) []byte {
	groups := (rows + packRows - 1) / packRows
	pb := packBlockBytes(f)
	sb := BlockQ8_0
	if f == tensor.Q4_0 {
		sb = BlockQ4_0
	}
	out := allocPacked(groups * nb * pb)
	workers := min(runtime.GOMAXPROCS(0), max(1, len(src)>>20)) // ≥ 1 MiB each
	var wg sync.WaitGroup
	for w := range workers {
		g0, g1 := groups*w/workers, groups*(w+1)/workers
		r0, r1 := g0*packRows, min(rows, g1*packRows)
		if r1 <= r0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			packInto(f, out, src[r0*nb*sb:r1*nb*sb], r0, r1-r0, nb)
		}()
	}
	wg.Wait()
	return out
}

// packInto writes ggml rows [r0, r0+n) (src holds those rows only, r0 a
// multiple of 16) into the packed buffer out of the whole matrix. Rows of a
// group that src does not cover stay zero (scale 0).
func packInto(f tensor.Format, out, src []byte, r0, n, nb int) {
	pb := packBlockBytes(f)
	sb := BlockQ8_0
	if f == tensor.Q4_0 {
		sb = BlockQ4_0
	}
	le := binary.LittleEndian
	for rr := 0; rr < n; rr++ {
		r := r0 + rr
		g, lane := r/packRows, r%packRows
		for b := 0; b < nb; b++ {
			blk := src[(rr*nb+b)*sb : (rr*nb+b+1)*sb]
			dst := out[(g*nb+b)*pb : (g*nb+b+1)*pb]
			dst[2*lane], dst[2*lane+1] = blk[0], blk[1]
			q := dst[packScales+4*lane:]
			if f == tensor.Q8_0 {
				// Chunk j holds values 4j..4j+3 of the row, offset by +128.
				for j := range QK / 4 {
					le.PutUint32(q[j*packChunkLen:], le.Uint32(blk[2+4*j:])^0x80808080)
				}
				continue
			}
			// Chunk j, byte i = nibble of value 4j+i (low) | nibble of
			// value 4j+i+16 (high): exactly stored byte 4j+i of the block.
			for j := range QK / 8 {
				copy(q[j*packChunkLen:j*packChunkLen+4], blk[2+4*j:2+4*j+4])
			}
		}
	}
	// Zero rows of a partial last group must decode to 0: Q8 quants at
	// +128 offset read as 0 with scale 0 anyway, and Q4 too (scale 0).
}

// unpackRow decodes row r of a packed matrix (the values of DequantQ8_0 /
// DequantQ4_0 of the original blocks).
func unpackRow(f tensor.Format, data []byte, r, nb int, dst []float32) {
	pb := packBlockBytes(f)
	g, lane := r/packRows, r%packRows
	for b := 0; b < nb; b++ {
		blk := data[(g*nb+b)*pb : (g*nb+b+1)*pb]
		d := tensor.F16ToF32(binary.LittleEndian.Uint16(blk[2*lane:]))
		q := blk[packScales:]
		y := dst[b*QK : (b+1)*QK]
		for k := range QK {
			if f == tensor.Q8_0 {
				y[k] = float32(int8(q[k/4*packChunkLen+4*lane+k%4]^0x80)) * d
				continue
			}
			j := k % 16
			v := q[j/4*packChunkLen+4*lane+j%4]
			if k >= 16 {
				v >>= 4
			}
			y[k] = float32(int(v&0x0f)-8) * d
		}
	}
}

// groupStride is the packed size of one group of 16 rows.
// PackedRows is the packed bytes of the weight groups that hold rows
// [n0, n1) of a Q4_0 or Q8_0 matrix in the packed layout (for
// Input.Prefetch), nil for other layouts.
func (m *Matrix) PackedRows(n0, n1 int) []byte {
	if m.layout != layoutPacked16 || m.Format != tensor.Q4_0 && m.Format != tensor.Q8_0 || n1 <= n0 {
		return nil
	}
	gs := m.groupStride()
	return m.data[n0/packRows*gs : min(len(m.data), (n1+packRows-1)/packRows*gs)]
}

func (m *Matrix) groupStride() int {
	if m.Format == tensor.MLXAffine {
		return m.Cols / m.groupSize * m.mlxGroupBytes()
	}
	return m.nb * packBlockBytes(m.Format)
}

// matmulPacked drives the packed kernels: weight groups in chunks that stay
// in cache while every activation row passes over them, 8 rows at a time
// (Q8_0/Q4_0: batched decode reads each weight chunk once for 8 rows; a
// last group of 2-7 rows too, padded: packedKernel8), then 4, then 1.
func matmulPacked(m *Matrix, dst []float32, ldd int, in *Input, n0, n1 int) {
	g0, g1 := n0/packRows, (n1+packRows-1)/packRows
	full := n1 / packRows // groups whose 16 rows are all wanted
	var tmp [packRows * 16]float32
	m8 := 0
	if use8Rows && m.Format != tensor.MLXAffine {
		m8 = in.x8.rows
	}
	m16, s := amxRows(m, in)
	chunk := packChunkBytes
	if s != nil {
		defer amxScratches.Put(s)
	}
	if s != nil && m16 >= amxBlockRows {
		chunk = amxChunk(m)
	}
	gc := max(1, chunk/m.groupStride())
	var next []byte
	if in.next != nil { // one call's worth (Input.Prefetch)
		next, in.next = in.next, nil
	}
	for c0 := g0; c0 < g1; c0 += gc {
		c1 := min(g1, c0+gc)
		i := 0
		if m16 > 0 {
			amxTiles(m, dst, ldd, in, m16, c0, c1, full, tmp[:], s)
			i = m16
		}
		for ; i < m8; i += 8 {
			packedTile8(m, dst, ldd, &in.x8, i, c0, c1, full, tmp[:], &next)
		}
		for ; i+4 <= in.M; i += 4 {
			packedTile(m, dst, ldd, in, i, 4, c0, c1, full, tmp[:])
		}
		for ; i < in.M; i++ {
			packedTile(m, dst, ldd, in, i, 1, c0, c1, full, tmp[:])
		}
	}
}

// packChunkBytes is the weight bytes of a chunk of groups that every
// activation row passes over, amxChunkBytes the most for the sliced AMX
// kernels (amxChunk; variables for A/B benchmarks, BenchmarkAMXShapes).
// Without slices a chunk stays in L2 (2 MiB a core) while each 16-row
// activation tile passes over it; with them only one slice's signed codes
// must (amxSliceCodes), so the chunk can outgrow L2. The activations,
// which outgrow L2 at M = 512 and K ≥ 2048, stream from L3 once per
// chunk, so bigger chunks stream them less often (M = 512, thread CPU,
// over 1 MiB: Q8_0 12288×4096 +8%, 4096×2048 +6%, Q4_0 2048×4096 +10%).
var packChunkBytes, amxChunkBytes = 128 << 10, 4 << 20

// amxSliceBlocks is the blocks of a column slice of the signed AMX
// kernel (amxSlices; a variable for A/B benchmarks): an activation tile's
// slice (16 rows × 32 blocks: 16 KiB of quants, 6 KiB of scales) stays in
// L1 while the chunk's signed codes, in L2, pass under it; at K = 4096
// the whole tile (112 KiB) does not fit L1, and the same 16 rows at
// K-byte strides share a few L1 sets. Between slices the float sums go
// through dst: the kernel reloads them (float32, exact) and goes on with
// the next blocks in the same order, so the result is bit-identical to
// one pass.
var amxSliceBlocks = 32

// amxSliceCodes is the signed codes of one column slice of a chunk
// (amxSlices; a variable for A/B benchmarks), 512 bytes a block, in L2
// while the row tiles pass over it. 512 KiB measured best or as good for
// Q4_0 at K = 1024-4096 (BenchmarkAMXShapes).
var amxSliceCodes = 512 << 10

// amxChunk is the weight bytes of a chunk for the AMX kernels at batches
// of amxBlockRows and more: for Q8_0 and Q4_0 as much as keeps a slice's
// codes to amxSliceCodes, at most amxChunkBytes (Q4_0: 256 KiB at
// K = 1024, 1 MiB at K = 4096), and packChunkBytes for Q4_K (unpacked per
// chunk, no slices).
func amxChunk(m *Matrix) int {
	if m.Format == tensor.Q4_K {
		return packChunkBytes
	}
	return min(amxChunkBytes, amxSliceCodes/512*packBlockBytes(m.Format)*m.nb/min(m.nb, amxSliceBlocks))
}

// amxBlockRows: Q8_0 and Q4_0 batches of at least this many AMX rows take
// big chunks (amxChunk) and the signed column slices (amxSlices); smaller ones (the
// MoE experts' 16–40 rows, whose weights stream from memory for one or two
// tiles) keep 128 KiB chunks in one pass, which measured as fast or faster
// there (a variable for A/B benchmarks).
var amxBlockRows = 64

// use8Rows enables the 8-row kernels (a variable for A/B benchmarks).
var use8Rows = true

// A last group of M%8 rows is padded to 8 in input8: for the 8-row
// kernels when M%8 ≥ pad8From (5..7), for the interleaved 4-row ones when
// pad4From ≤ M%8 ≤ 3; other remainders (4: the row-major 4-row kernel was
// as fast, 1) go through the row-major 4- and 1-row kernels. One pass over
// the weights instead of two or three (variables for A/B benchmarks;
// BenchmarkRowsDRAMPad).
var pad8From, pad4From = 5, 2

// hugePages enables allocPacked's huge-page slabs (Linux only; a variable
// for A/B benchmarks: decode streams weights ~1.3-1.6× faster with them,
// loading takes longer, see hugepage_linux.go).
var hugePages = true

// input8 holds the quantized activation rows of an Input that the
// interleaved kernels take (the first M&^7 rows, or M rounded up to 8 when
// the last M%8 rows are padded, see pad8From: the padding rows are zero), interleaved
// block-major per group of 8 rows, as those kernels read them: for row group j, block b,
// row r: quants q[((j*nb+b)*8+r)*32:][:32], scale d[(j*nb+b)*8+r], offset
// corrections s128/s8[(j*nb+b)*8+r] (Q8_0 / Q4_0 weights). Built once per
// Input by QuantizeRows (each row where it belongs, so the parallel
// quantization of disjoint rows fills it too), not per MatMul call.
type input8 struct {
	rows, m, nb int // rows held (multiple of 8), real rows among them, blocks per row
	q           []int8
	d           []float32
	s128, s8    []int32
}

// reset sizes x8 for an input of M rows of K values (K%32 == 0) and zeroes
// the padding rows.
func (x8 *input8) reset(M, K int) {
	nb := K / QK
	rows := M &^ 7
	if rem := M % 8; rem >= pad8From || rem >= pad4From && rem <= 3 {
		rows += 8
	}
	x8.rows, x8.m, x8.nb = rows, min(M, rows), nb
	if cap(x8.q) < rows*K || cap(x8.d) < rows*nb {
		x8.q, x8.d = make([]int8, rows*K), make([]float32, rows*nb)
		x8.s128, x8.s8 = make([]int32, rows*nb), make([]int32, rows*nb)
	}
	x8.q, x8.d, x8.s128, x8.s8 = x8.q[:rows*K], x8.d[:rows*nb], x8.s128[:rows*nb], x8.s8[:rows*nb]
	for row := M; row < rows; row++ {
		j, r := row/8, row%8
		for b := range nb {
			o := (j*nb+b)*8 + r
			clear(x8.q[o*QK : (o+1)*QK])
			x8.d[o], x8.s128[o], x8.s8[o] = 0, 0, 0
		}
	}
}

// fill copies the quantized rows [r0, r1) of in into x8 (the rows it holds).
func (x8 *input8) fill(in *Input, r0, r1 int) {
	nb := x8.nb
	for row := r0; row < min(r1, x8.m); row++ {
		j, r := row/8, row%8
		q := in.Q[row*in.K : (row+1)*in.K]
		d, s128, s8 := in.D[row*nb:(row+1)*nb], in.S128[row*nb:(row+1)*nb], in.S8[row*nb:(row+1)*nb]
		for b := range nb {
			o := (j*nb+b)*8 + r
			// An array copy, not copy(): inline moves instead of a
			// memmove call per 32 bytes.
			*(*[QK]int8)(x8.q[o*QK:]) = *(*[QK]int8)(q[b*QK:])
			x8.d[o], x8.s128[o], x8.s8[o] = d[b], s128[b], s8[b]
		}
	}
}

// packedTile runs the kernel for activation rows [i, i+cols) over weight
// groups [c0, c1); a partial last group goes through tmp.
func packedTile(m *Matrix, dst []float32, ldd int, in *Input, i, cols, c0, c1, full int, tmp []float32) {
	gs := m.groupStride()
	if end := min(c1, full); end > c0 {
		packedKernel(m, cols, m.data[c0*gs:], end-c0, in, i, dst[i*ldd+c0*packRows:], ldd)
	}
	if c1 > full { // the last, partial group
		g := c1 - 1
		packedKernel(m, cols, m.data[g*gs:], 1, in, i, tmp, packRows)
		rows := m.Rows - g*packRows
		for c := 0; c < cols; c++ {
			copy(dst[(i+c)*ldd+g*packRows:(i+c)*ldd+g*packRows+rows], tmp[c*packRows:c*packRows+rows])
		}
	}
}

// packedTile8 is packedTile for the 8 rows [i, i+8) of x8 (those below
// x8.m: a padded last group stores only its real rows).
func packedTile8(m *Matrix, dst []float32, ldd int, x8 *input8, i, c0, c1, full int, tmp []float32, next *[]byte) {
	gs := m.groupStride()
	if end := min(c1, full); end > c0 {
		packedKernel8(m, m.data[c0*gs:], end-c0, x8, i, dst[i*ldd+c0*packRows:], ldd, next)
	}
	if c1 > full { // the last, partial group
		g := c1 - 1
		packedKernel8(m, m.data[g*gs:], 1, x8, i, tmp, packRows, next)
		rows := m.Rows - g*packRows
		for c := range min(8, x8.m-i) {
			copy(dst[(i+c)*ldd+g*packRows:(i+c)*ldd+g*packRows+rows], tmp[c*packRows:c*packRows+rows])
		}
	}
}

// view reinterprets little-endian bytes as []T without copying, when the
// host is little-endian and the data aligned.
func view[T uint16 | float32](b []byte) ([]T, bool) {
	var z T
	size := int(unsafe.Sizeof(z))
	if !littleEndian || len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%uintptr(size) != 0 {
		return nil, false
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/size), true
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1
