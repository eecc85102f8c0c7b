package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/macpool/macpool/engine/tensor"
)

// MLX affine matrices (w = scale·q + bias per group of G columns, q of 4 or
// 8 bits) multiply int8 activations as
//
//	Σ_k w_k·x_k ≈ Σ_blocks d_x·(scale·Σ q·xq + bias·Σ xq)
//
// (a block of 32 lies in one group): VPDPBUSD takes the unsigned codes as
// they are. With AVX-512 VNNI they are repacked (Prepare) into groups of
// 16 rows; per (row group, column group): 16 bf16 scales, 16 bf16 values
// −bias/128 (exact: a power-of-two scaling), then G/32 blocks of codes in
// the chunk layout of Q8_0 (8 bits) or Q4_0 (4 bits) without offsets.
// Other machines, other bit widths and non-bf16 scales use the DecodeRow
// fallback of the backend (ErrUnsupported).

// 16 bf16 scales + 16 bf16 −bias/128; with float32 scales and biases
// (4-bit only: Q4_K rewritten, kquant.go) 16 f32 of each.
const (
	packMLXHead    = 64
	packMLXHeadF32 = 128
)

func mlxSupported(h *tensor.Host) bool {
	if h.GroupSize%QK != 0 || h.GroupSize <= 0 || h.Scales == nil || h.Biases == nil {
		return false
	}
	bf16 := h.Scales.Format == tensor.BF16 && h.Biases.Format == tensor.BF16
	f32 := h.Scales.Format == tensor.F32 && h.Biases.Format == tensor.F32
	return (h.Bits == 4 || h.Bits == 8) && bf16 || h.Bits == 4 && f32
}

func (m *Matrix) mlxHead() int {
	if m.headF32 {
		return packMLXHeadF32
	}
	return packMLXHead
}

func mlxBlockBytes(bits int) int { return packRows * QK * bits / 8 }

// mlxGroupBytes is the packed size of one (row group, column group).
func (m *Matrix) mlxGroupBytes() int { return m.mlxHead() + m.groupSize/QK*mlxBlockBytes(m.bits) }

// prepareMLX repacks an MLX affine matrix (validated by the caller with
// DecodeRow) for the VNNI kernels.
func prepareMLX(h *tensor.Host, m *Matrix) error {
	if !usePacked() || !mlxSupported(h) {
		return fmt.Errorf("kernels: prepare %s: %w: MLX %d-bit group %d", h.Name, ErrUnsupported, h.Bits, h.GroupSize)
	}
	m.bits, m.groupSize, m.nb = h.Bits, h.GroupSize, m.Cols/QK
	m.headF32 = h.Scales.Format == tensor.F32
	ss := 2 // bytes per scale/bias
	if m.headF32 {
		ss = 4
	}
	ngr := m.Cols / m.groupSize
	groups := (m.Rows + packRows - 1) / packRows
	gb := m.mlxGroupBytes()
	m.data = allocPacked(groups * ngr * gb)
	m.layout, m.copied = layoutPacked16, true
	rowBytes := m.Cols * h.Bits / 8
	if len(h.Data) != m.Rows*rowBytes || len(h.Scales.Data) != ss*m.Rows*ngr || len(h.Biases.Data) != ss*m.Rows*ngr {
		return fmt.Errorf("kernels: prepare %s: MLX data sizes do not match shape %v", h.Name, h.Shape)
	}
	// Row groups in parallel (they write disjoint bytes): a 1 GB
	// checkpoint repacks in about a second instead of ~9 s on one core.
	workers := min(runtime.GOMAXPROCS(0), groups, max(1, len(h.Data)>>20))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := groups * w / workers * packRows; r < min(m.Rows, groups*(w+1)/workers*packRows); r++ {
				m.packMLXRow(h, r, ngr, gb, rowBytes)
			}
		}()
	}
	wg.Wait()
	return nil
}

// packMLXRow writes row r of h into its lane of the packed groups: the
// row's scale and −bias/128 per column group, then its codes, 4 per chunk
// of 64 bytes; 4-bit codes k and k+16 of a 32-block share a byte.
func (m *Matrix) packMLXRow(h *tensor.Host, r, ngr, gb, rowBytes int) {
	g, lane := r/packRows, r%packRows
	src := h.Data[r*rowBytes : (r+1)*rowBytes]
	bb, head := mlxBlockBytes(h.Bits), m.mlxHead()
	for cg := 0; cg < ngr; cg++ {
		dst := m.data[(g*ngr+cg)*gb : (g*ngr+cg+1)*gb]
		if m.headF32 {
			copy(dst[4*lane:], h.Scales.Data[4*(r*ngr+cg):4*(r*ngr+cg)+4])
			bias := math.Float32frombits(binary.LittleEndian.Uint32(h.Biases.Data[4*(r*ngr+cg):]))
			binary.LittleEndian.PutUint32(dst[64+4*lane:], math.Float32bits(bias*(-1.0/128)))
		} else {
			copy(dst[2*lane:], h.Scales.Data[2*(r*ngr+cg):2*(r*ngr+cg)+2])
			bias := tensor.BF16ToF32(binary.LittleEndian.Uint16(h.Biases.Data[2*(r*ngr+cg):]))
			binary.LittleEndian.PutUint16(dst[32+2*lane:], tensor.F32ToBF16(bias*(-1.0/128)))
		}
		for b := 0; b < m.groupSize/QK; b++ {
			q := dst[head+b*bb:]
			col0 := cg*m.groupSize + b*QK
			if h.Bits == 8 {
				for c := range QK / 4 {
					copy(q[c*packChunkLen+4*lane:c*packChunkLen+4*lane+4], src[col0+4*c:col0+4*c+4])
				}
				continue
			}
			// Codes 4c..4c+3 come from lo (low nibbles), 16+4c.. from hi.
			lo, hi := src[col0/2:col0/2+8], src[col0/2+8:col0/2+16]
			for c := range 4 {
				l := spreadNibbles(binary.LittleEndian.Uint16(lo[2*c:]))
				u := spreadNibbles(binary.LittleEndian.Uint16(hi[2*c:]))
				binary.LittleEndian.PutUint32(q[c*packChunkLen+4*lane:], l|u<<4)
			}
		}
	}
}

// spreadNibbles puts the 4 nibbles of x (lowest first) into the low
// nibbles of the 4 bytes of the result.
func spreadNibbles(x uint16) uint32 {
	v := uint32(x)
	return v&0x000f | v&0x00f0<<4 | v&0x0f00<<8 | v&0xf000<<12
}

// mlxCode is the code of column col of a packed MLX row (4 or 8 bits).
func mlxCode(row []byte, col, bits int) byte {
	if bits == 8 {
		return row[col]
	}
	return row[col/2] >> (4 * (col % 2)) & 0x0f
}

// unpackMLXRow decodes row r of a packed MLX matrix, with the values of
// tensor.Host.DecodeRow: float32(scale*q) + bias.
func (m *Matrix) unpackMLXRow(r int, dst []float32) {
	ngr := m.Cols / m.groupSize
	gb, bb := m.mlxGroupBytes(), mlxBlockBytes(m.bits)
	g, lane := r/packRows, r%packRows
	for cg := 0; cg < ngr; cg++ {
		blk := m.data[(g*ngr+cg)*gb : (g*ngr+cg+1)*gb]
		var scale, bias float32
		if m.headF32 {
			scale = math.Float32frombits(binary.LittleEndian.Uint32(blk[4*lane:]))
			bias = math.Float32frombits(binary.LittleEndian.Uint32(blk[64+4*lane:])) * -128
		} else {
			scale = tensor.BF16ToF32(binary.LittleEndian.Uint16(blk[2*lane:]))
			bias = tensor.BF16ToF32(binary.LittleEndian.Uint16(blk[32+2*lane:])) * -128
		}
		for b := 0; b < m.groupSize/QK; b++ {
			q := blk[m.mlxHead()+b*bb:]
			for k := range QK {
				var code byte
				if m.bits == 8 {
					code = q[k/4*packChunkLen+4*lane+k%4]
				} else {
					j := k % 16
					code = q[j/4*packChunkLen+4*lane+j%4]
					if k >= 16 {
						code >>= 4
					}
					code &= 0x0f
				}
				dst[cg*m.groupSize+b*QK+k] = float32(scale*float32(code)) + bias
			}
		}
	}
}

// dotMLXRowGo is the reference of the int8-activation MLX product for one
// row of the original tensor: Σ_blocks d_x·(scale·Σ q·xq + bias·Σ xq).
func dotMLXRowGo(h *tensor.Host, r int, q []int8, d []float32) float32 {
	cols := h.Cols()
	ngr := cols / h.GroupSize
	row := h.Data[r*cols*h.Bits/8 : (r+1)*cols*h.Bits/8]
	var s float32
	for b := 0; b < cols/QK; b++ {
		cg := b * QK / h.GroupSize
		scale, bias := mlxParam(h.Scales, r*ngr+cg), mlxParam(h.Biases, r*ngr+cg)
		var sum, sx int32
		for k := range QK {
			xq := int32(q[b*QK+k])
			sum += int32(mlxCode(row, b*QK+k, h.Bits)) * xq
			sx += xq
		}
		s += d[b] * (scale*float32(sum) + bias*float32(sx))
	}
	return s
}

// mlxParam reads scale or bias i (bf16 or float32).
func mlxParam(s *tensor.Host, i int) float32 {
	if s.Format == tensor.F32 {
		return math.Float32frombits(binary.LittleEndian.Uint32(s.Data[4*i:]))
	}
	return tensor.BF16ToF32(binary.LittleEndian.Uint16(s.Data[2*i:]))
}
