// Package kernels holds the CPU inner loops of the engine: x·wᵀ for a weight
// matrix w in its stored format (F32, BF16, F16, Q8_0, Q4_0, Q4_K, Q5_K,
// Q6_K, MLX affine 4/8 bit) and float32 activations x, for one row (decode, matrix–vector) or many
// (prefill, matrix–matrix), plus the float GEMMs, exp and max of blocked
// attention. Callers (engine/cpu) split the weight rows over their worker
// goroutines; a kernel call covers a range of weight rows and every
// activation row.
//
// Every kernel has a portable Go version, which is the reference and the
// fallback; on amd64 the AVX-512 (VNNI) or AVX2 versions and on arm64 the
// NEON versions are chosen at start-up with golang.org/x/sys/cpu (Go
// assembly, no cgo). Impl names the choice.
//
// Quantized weights (Q8_0, Q4_0, MLX) are multiplied as llama.cpp does: each
// activation row is quantized to int8 in blocks of 32 (one float32 scale per
// block, round to nearest even), the int8 sums of a block are exact
// integers, and a block contributes d_w·d_x·Σq_w·q_x in float32. With
// AVX-512 VNNI the weights are repacked at Prepare into groups of 16 rows
// (see pack.go) so that one VPDPBUSD multiplies 4 values of 16 rows at once;
// otherwise they stay in the ggml layout (zero copy). Float weights (F32,
// BF16, F16) use float32 activations and FMA.
//
// Tolerances (tests): the fast versions differ from the Go reference only
// in float32 rounding (summation order, FMA): |fast − ref| ≤ 1e-5·Σ|terms|
// for quantized formats, 2e-6·Σ|terms| for float ones. The activation
// quantization itself is an approximation of the exact product, measured on
// whole models in accuracy_test.go and docs/engine.md, "CPU backend and kernels".
package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/macpool/macpool/engine/tensor"
)

// Block geometry (values, bytes) of the ggml formats the kernels read.
const (
	QK        = 32
	BlockQ8_0 = 34
	BlockQ4_0 = 18
)

// ErrUnsupported is returned by Prepare for formats without a kernel; the
// caller falls back to tensor.Host.DecodeRow.
var ErrUnsupported = errors.New("kernels: format not supported")

// Impl names the implementation in use ("avx512vnni", "avx2", "neon", "go"),
// for logs and bench output.
func Impl() string { return impl() }

// Packed reports whether quantized matrices use the packed AVX-512 VNNI
// kernels on this machine.
func Packed() bool { return usePacked() }

type layout int

const (
	layoutRows     layout = iota // ggml row-major blocks (or plain floats)
	layoutPacked16               // groups of 16 rows interleaved (pack.go)
)

// Matrix is a weight matrix [Rows, Cols] prepared for the kernels. It is
// read-only after Prepare and safe for concurrent MatMul calls.
type Matrix struct {
	Format     tensor.Format
	Rows, Cols int

	layout layout
	data   []byte    // Q8_0/Q4_0 blocks (ggml or packed layout)
	f32    []float32 // F32 rows
	u16    []uint16  // BF16/F16 rows
	nb     int       // blocks of 32 per row
	copied bool      // data is the kernels' own (packed or quantized), not h.Data

	bits, groupSize int  // MLXAffine (mlx.go)
	headF32         bool // MLXAffine with float32 scales/biases (4-bit: the Q4_K rewrite, kquant.go)
	kqHeads         int  // Q6_K/Q5_K/Q4_K (layoutQ6K/Q5K/Q4K, kquant*.go): offset of the heads in data
}

// Prepare wraps h for the kernels. F32, BF16 and F16 are views of h.Data
// (no copy) when aligned on a little-endian host; Q8_0 and Q4_0 are views
// too, except with AVX-512 VNNI where they are repacked (a copy of the same
// size). Other formats give ErrUnsupported.
func Prepare(h *tensor.Host) (*Matrix, error) {
	m := &Matrix{Format: h.Format, Rows: h.Rows(), Cols: h.Cols()}
	if m.Rows <= 0 || m.Cols <= 0 {
		return nil, fmt.Errorf("kernels: prepare %s: empty shape %v", h.Name, h.Shape)
	}
	switch h.Format {
	case tensor.F32:
		if len(h.Data) != m.Rows*m.Cols*4 {
			return nil, fmt.Errorf("kernels: prepare %s: %d bytes for F32 %v", h.Name, len(h.Data), h.Shape)
		}
		p, ok := view[float32](h.Data)
		if !ok {
			return nil, fmt.Errorf("kernels: prepare %s: %w (unaligned data)", h.Name, ErrUnsupported)
		}
		m.f32 = p
	case tensor.BF16, tensor.F16:
		if len(h.Data) != m.Rows*m.Cols*2 {
			return nil, fmt.Errorf("kernels: prepare %s: %d bytes for %v %v", h.Name, len(h.Data), h.Format, h.Shape)
		}
		p, ok := view[uint16](h.Data)
		if !ok {
			return nil, fmt.Errorf("kernels: prepare %s: %w (unaligned data)", h.Name, ErrUnsupported)
		}
		m.u16 = p
	case tensor.Q8_0, tensor.Q4_0:
		rb, err := tensor.RowBytes(h.Format, m.Cols)
		if err != nil {
			return nil, fmt.Errorf("kernels: prepare %s: %w", h.Name, err)
		}
		if len(h.Data) != rb*m.Rows {
			return nil, fmt.Errorf("kernels: prepare %s: %d bytes for %v %v, want %d", h.Name, len(h.Data), h.Format, h.Shape, rb*m.Rows)
		}
		m.nb = m.Cols / QK
		m.data = h.Data
		if usePacked() {
			m.data = pack(h.Format, h.Data, m.Rows, m.nb)
			m.layout, m.copied = layoutPacked16, true
		}
	case tensor.MLXAffine:
		if err := prepareMLX(h, m); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("kernels: prepare %s: %w: %v", h.Name, ErrUnsupported, h.Format)
	}
	return m, nil
}

// Copied reports whether the matrix holds its own copy of the weights
// (packed or quantized at load) rather than a view of the tensor's bytes.
func (m *Matrix) Copied() bool { return m.copied }

// RowAlign is the granularity of the weight-row ranges given to MatMul:
// ranges must start at a multiple of it (and end at one, or at Rows).
func (m *Matrix) RowAlign() int {
	if m.layout != layoutRows {
		return 16
	}
	return 1
}

// Quantized reports whether MatMul reads the quantized activations of its
// Input (call Input.QuantizeRows first) rather than the float32 ones.
func (m *Matrix) Quantized() bool { return m.data != nil }

// Bytes is the size of the weight data the kernels read per full product
// (for bandwidth figures).
func (m *Matrix) Bytes() int {
	switch {
	case m.f32 != nil:
		return 4 * m.Rows * m.Cols
	case m.u16 != nil:
		return 2 * m.Rows * m.Cols
	}
	return len(m.data)
}

// DecodeRow writes row r as float32 (len(dst) == Cols), with the same values
// as tensor.Host.DecodeRow of the original tensor.
func (m *Matrix) DecodeRow(r int, dst []float32) {
	c := m.Cols
	dst = dst[:c]
	switch {
	case m.f32 != nil:
		copy(dst, m.f32[r*c:(r+1)*c])
	case m.u16 != nil && m.Format == tensor.BF16:
		for i, v := range m.u16[r*c : (r+1)*c] {
			dst[i] = tensor.BF16ToF32(v)
		}
	case m.u16 != nil:
		for i, v := range m.u16[r*c : (r+1)*c] {
			dst[i] = tensor.F16ToF32(v)
		}
	case m.layout == layoutQ6K:
		m.unpackQ6KRow(r, dst)
	case m.layout == layoutQ5K || m.layout == layoutQ4K:
		m.unpackQ5KRow(r, dst)
	case m.Format == tensor.MLXAffine:
		m.unpackMLXRow(r, dst)
	case m.layout == layoutPacked16:
		unpackRow(m.Format, m.data, r, m.nb, dst)
	case m.Format == tensor.Q8_0:
		tensor.DequantQ8_0(m.data[r*m.nb*BlockQ8_0:], dst)
	default:
		tensor.DequantQ4_0(m.data[r*m.nb*BlockQ4_0:], dst)
	}
}

// Input is a batch of activation rows x [M, K] as the kernels read them:
// the float32 rows, and for quantized weights their int8 blocks. An Input
// is reused across calls to avoid allocation; it is not safe for
// concurrent QuantizeRows on overlapping rows.
type Input struct {
	M, K int
	X    []float32 // M×K, row-major (a view of the caller's data)

	// Quantized rows (K a multiple of 32): Q[m*K+k], and per block
	// (m*K/32+b): scale D, S8 = −8·Σq and S128 = −128·Σq (the corrections
	// of the packed kernels, whose weights are stored unsigned); per 16
	// values (m*K/16+h): S6 = −32·Σq (packed Q6_K, kquant6.go).
	Q    []int8
	D    []float32
	S8   []int32
	S128 []int32
	S6   []int32

	x8   input8  // the rows of the 8-row kernels, interleaved (pack.go; QuantizeRows fills it)
	next []byte  // weights to prefetch during the next MatMul (Prefetch)
	x16  input16 // the scales and corrections of the AMX kernels' 16-row tiles (amx.go)
	kq   kqInput // the K-quant 8-row kernels' interleave (kquant6.go)
}

// Prefetch asks the next MatMul with in to bring b, other packed weights
// (PackedRows) that a later call reads, to L2 while it runs: the 4-bit
// 8-row kernel, whose arithmetic leaves the memory bus mostly idle while
// its weights come from L2, prefetches b spread over its blocks (two
// lines a block, at most 128 bytes on). A MoE
// expert's rows pass over a sub-block of weight rows in several parts,
// the first of which read it from DRAM (measured at 154 GMAC/s where the
// others run at 233); during the other parts the next sub-block comes in.
// Not safe while another goroutine runs a MatMul with in.
func (in *Input) Prefetch(b []byte) { in.next = b }

// Reset points in at x [M, K] and sizes the quantized buffers; it does not
// quantize.
func (in *Input) Reset(x []float32, M, K int) {
	if len(x) < M*K {
		panic(fmt.Sprintf("kernels: input of %d values for [%d, %d]", len(x), M, K))
	}
	in.M, in.K, in.X, in.next = M, K, x[:M*K], nil
	in.size()
}

// size sizes the quantized buffers for in.M rows of in.K values.
func (in *Input) size() {
	M, K := in.M, in.K
	in.x8.rows, in.x8.m = 0, 0
	in.x16.rows = 0
	in.kq.reset()
	if K%QK != 0 {
		return
	}
	nb := M * K / QK
	if n := amxQRows(M) * K; cap(in.Q) < n { // AMX tiles may read padding rows past M
		in.Q = make([]int8, n)
	}
	if cap(in.D) < nb {
		in.D, in.S8, in.S128 = make([]float32, nb), make([]int32, nb), make([]int32, nb)
	}
	in.Q, in.D, in.S8, in.S128 = in.Q[:M*K], in.D[:nb], in.S8[:nb], in.S128[:nb]
	if cap(in.S6) < 2*nb {
		in.S6 = make([]int32, 2*nb)
	}
	in.S6 = in.S6[:2*nb]
	in.x8.reset(M, K)
	in.x16.reset(in, M, K)
}

// GatherRows makes in the rows `rows` of src, which QuantizeRows has
// quantized whole: the same quants, scales and corrections (the same bits
// as quantizing those rows again), for the quantized kernels only (in.X
// stays empty: no float path, no MatMulExact). A MoE batch quantizes its
// tokens once for all the experts they are routed to.
func (in *Input) GatherRows(src *Input, rows []int) {
	K := src.K
	if K%QK != 0 {
		panic(fmt.Sprintf("kernels: gather rows of %d values (not a multiple of %d)", K, QK))
	}
	in.M, in.K, in.X = len(rows), K, nil
	in.size()
	nb := K / QK
	for i, r := range rows {
		copy(in.Q[i*K:(i+1)*K], src.Q[r*K:(r+1)*K])
		copy(in.D[i*nb:(i+1)*nb], src.D[r*nb:(r+1)*nb])
		copy(in.S8[i*nb:(i+1)*nb], src.S8[r*nb:(r+1)*nb])
		copy(in.S128[i*nb:(i+1)*nb], src.S128[r*nb:(r+1)*nb])
		copy(in.S6[2*i*nb:2*(i+1)*nb], src.S6[2*r*nb:2*(r+1)*nb])
	}
	in.x8.fill(in, 0, in.M)
	in.x16.fill(in, 0, in.M)
}

// QuantizeRows quantizes rows [r0, r1) of the input (K must be a multiple
// of 32): per block of 32, a = max(amax, 1e-30), d = a/127 and
// q = round(x·127/a), rounding to nearest even.
func (in *Input) QuantizeRows(r0, r1 int) {
	if in.K%QK != 0 {
		panic(fmt.Sprintf("kernels: quantize rows of %d values (not a multiple of %d)", in.K, QK))
	}
	nb := in.K / QK
	for r := r0; r < r1; r++ {
		x := in.X[r*in.K : (r+1)*in.K]
		q := in.Q[r*in.K : (r+1)*in.K]
		b0 := r * nb
		quantizeRow(x, q, in.D[b0:b0+nb], in.S8[b0:b0+nb], in.S128[b0:b0+nb])
		halfSums(q, in.S6[2*b0:2*(b0+nb)])
	}
	in.x8.fill(in, r0, r1)
	in.x16.fill(in, r0, r1)
}

// MatMul sets dst[i*ldd+n] = Σ_k x[i,k]·w[n,k] for every input row i and
// weight rows n in [n0, n1), where n0 is a multiple of RowAlign and n1 is
// one or Rows. Quantized matrices read in.Q etc. (QuantizeRows first).
func (m *Matrix) MatMul(dst []float32, ldd int, in *Input, n0, n1 int) {
	if in.K != m.Cols {
		panic(fmt.Sprintf("kernels: matmul of x [%d, %d] with w [%d, %d]", in.M, in.K, m.Rows, m.Cols))
	}
	if n0 < 0 || n1 > m.Rows || n0 > n1 || n0%m.RowAlign() != 0 {
		panic(fmt.Sprintf("kernels: weight rows [%d, %d) of %d (align %d)", n0, n1, m.Rows, m.RowAlign()))
	}
	if in.M == 0 || n0 == n1 {
		return
	}
	if need := (in.M-1)*ldd + n1; len(dst) < need {
		panic(fmt.Sprintf("kernels: dst of %d values, need %d", len(dst), need))
	}
	switch {
	case m.layout == layoutQ6K || m.layout == layoutQ5K || m.layout == layoutQ4K:
		matmulKQ(m, dst, ldd, in, n0, n1)
	case m.layout == layoutPacked16:
		matmulPacked(m, dst, ldd, in, n0, n1)
	case m.data != nil:
		matmulQRows(m, dst, ldd, in, n0, n1)
	default:
		matmulFloat(m, dst, ldd, in, n0, n1)
	}
}

// MatMulExact is MatMul for quantized matrices with the float32
// activations (in.X; no QuantizeRows needed): each weight row is decoded
// once per block of activation rows and multiplied with DotF32, so the
// result matches the exact dequantized product to float32 rounding.
func (m *Matrix) MatMulExact(dst []float32, ldd int, in *Input, n0, n1 int) {
	if !m.Quantized() {
		m.MatMul(dst, ldd, in, n0, n1)
		return
	}
	if in.K != m.Cols || n0 < 0 || n1 > m.Rows || n0 > n1 {
		panic(fmt.Sprintf("kernels: exact matmul of x [%d, %d] with w [%d, %d] rows [%d, %d)", in.M, in.K, m.Rows, m.Cols, n0, n1))
	}
	K := in.K
	buf := make([]float32, mBlock*K)
	for n := n0; n < n1; n += mBlock {
		nr := min(n1, n+mBlock) - n
		for j := range nr {
			m.DecodeRow(n+j, buf[j*K:(j+1)*K])
		}
		for i := 0; i < in.M; i++ {
			x := in.X[i*K : (i+1)*K]
			for j := range nr {
				dst[i*ldd+n+j] = DotF32(x, buf[j*K:(j+1)*K])
			}
		}
	}
}

// mBlock is how many activation rows share one pass over a weight row in
// the row-at-a-time paths (the rows stay in cache while the weight row is
// reused).
const mBlock = 32

// matmulQRows: ggml-layout quantized weights, one dot product per (row, x row).
func matmulQRows(m *Matrix, dst []float32, ldd int, in *Input, n0, n1 int) {
	nb, K := m.nb, in.K
	bs := BlockQ8_0
	dot := dotQ8Rows
	if m.Format == tensor.Q4_0 {
		bs, dot = BlockQ4_0, dotQ4Rows
	}
	for i0 := 0; i0 < in.M; i0 += mBlock {
		i1 := min(in.M, i0+mBlock)
		for n := n0; n < n1; n++ {
			w := m.data[n*nb*bs : (n+1)*nb*bs]
			for i := i0; i < i1; i++ {
				dst[i*ldd+n] = dot(w, in.Q[i*K:(i+1)*K], in.D[i*nb:(i+1)*nb], nb)
			}
		}
	}
}

// matmulFloat: F32/BF16/F16 weights, float32 activations.
func matmulFloat(m *Matrix, dst []float32, ldd int, in *Input, n0, n1 int) {
	K := in.K
	if m.f32 != nil || m.Format == tensor.BF16 {
		if matmulFloatFast(m, dst, ldd, in, n0, n1) {
			return
		}
	}
	if m.Format == tensor.F16 && matmulF16Fast(m, dst, ldd, in, n0, n1) { // f16w*.go
		return
	}
	var buf []float32
	if m.Format == tensor.F16 {
		buf = make([]float32, K)
	}
	for i0 := 0; i0 < in.M; i0 += mBlock {
		i1 := min(in.M, i0+mBlock)
		for n := n0; n < n1; n++ {
			for i := i0; i < i1; i++ {
				x := in.X[i*K : (i+1)*K]
				var s float32
				switch {
				case m.f32 != nil:
					s = DotF32(x, m.f32[n*K:(n+1)*K])
				case m.Format == tensor.BF16:
					s = DotBF16(x, m.u16[n*K:(n+1)*K])
				default:
					if i == i0 {
						m.DecodeRow(n, buf)
					}
					s = DotF32(x, buf)
				}
				dst[i*ldd+n] = s
			}
		}
	}
}

// DotF32 returns Σ a[i]·b[i]; len(b) must be >= len(a).
func DotF32(a, b []float32) float32 {
	b = b[:len(a)]
	if n := len(a) &^ 31; n > 0 && hasDotF32 {
		s := dotF32Fast(a[:n], b[:n])
		for i := n; i < len(a); i++ {
			s += a[i] * b[i]
		}
		return s
	}
	return dotF32Go(a, b)
}

// DotBF16 returns Σ x[i]·w[i] with w in bfloat16; len(w) must be >= len(x).
func DotBF16(x []float32, w []uint16) float32 {
	w = w[:len(x)]
	if n := len(x) &^ 31; n > 0 && hasDotBF16 {
		s := dotBF16Fast(x[:n], w[:n])
		for i := n; i < len(x); i++ {
			s += x[i] * tensor.BF16ToF32(w[i])
		}
		return s
	}
	return dotBF16Go(x, w)
}

// AxpyF32 sets dst[i] += a·x[i] (fused multiply-add in the vector
// version); len(x) must be >= len(dst).
func AxpyF32(dst []float32, a float32, x []float32) {
	x = x[:len(dst)]
	if !hasAxpy {
		axpyGo(dst, a, x)
		return
	}
	if n := len(dst) &^ 15; n > 0 {
		axpyFast(dst[:n], a, x[:n])
		dst, x = dst[n:], x[n:]
	}
	if len(dst) > 0 {
		// The tail goes through the same fused multiply-add on a padded
		// copy: every element rounds once, as in the vector part and in
		// the GEMM kernels, so a score does not depend on which of them
		// computed it (batch invariance, docs/engine.md, "Batch invariance").
		var d, v [16]float32
		copy(d[:], dst)
		copy(v[:], x)
		axpyFast(d[:], a, v[:])
		copy(dst, d[:len(dst)])
	}
}

// DotsF32 sets dst[j] = q·k[j*stride : j*stride+len(q)] for j < n: the
// attention scores of one query against n cached keys (one call instead of
// n; the vector version shares each load of q between 4 keys).
func DotsF32(dst, q, k []float32, stride, n int) {
	dst = dst[:n]
	j := dotsFast(dst, q, k, stride, n)
	for ; j < n; j++ {
		dst[j] = DotF32(q, k[j*stride:j*stride+len(q)])
	}
}

// AxpysF32 sets acc += Σ_j p[j]·v[j*stride : j*stride+len(acc)] for j < n:
// the probability-weighted sum of n cached values (the vector version keeps
// acc in registers for the whole sum).
func AxpysF32(acc, p, v []float32, stride, n int) {
	p = p[:n]
	c := axpysFast(acc, p, v, stride, n)
	if c == len(acc) {
		return
	}
	for j := range n {
		AxpyF32(acc[c:], p[j], v[j*stride+c:j*stride+len(acc)])
	}
}

// GemmF32NT sets dst[i*ldd+j] = Σ_{c<k} a[i*lda+c]·b[j*ldb+c] for i < m,
// j < n: both operands row-major along k (x·wᵀ; Q·Kᵀ over position-major
// keys; P·Vᵀ over dimension-major values). AVX-512 runs 4×4 tiles (each a
// and b value loaded once per tile; any k); the row/column tails use DotF32.
func GemmF32NT(dst []float32, ldd int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
	if m <= 0 || n <= 0 {
		return
	}
	_, _, _ = dst[(m-1)*ldd+n-1], a[(m-1)*lda+k-1], b[(n-1)*ldb+k-1]
	m4, n4 := 0, 0
	if gemmF32Fast != nil && k > 0 {
		m4, n4 = m&^3, n&^3
		for i := 0; i < m4; i += 4 {
			for j := 0; j < n4; j += 4 {
				gemmF32Fast(&a[i*lda], 4*lda, &b[j*ldb], 4*ldb, k, &dst[i*ldd+j], 4*ldd)
			}
		}
	}
	for i := range m {
		j0 := n4
		if i >= m4 {
			j0 = 0
		}
		for j := j0; j < n; j++ {
			dst[i*ldd+j] = DotF32(a[i*lda:i*lda+k], b[j*ldb:j*ldb+k])
		}
	}
}

// GemmF32NN sets dst[i*ldd+j] = Σ_{c<k} a[i*lda+c]·b[c*ldb+j] for i < m,
// j < n: b row-major along n (Q·Kᵀ over dimension-major keys). AVX-512 runs
// 8×32 tiles (per c: two loads of b, eight broadcasts of a, 16 FMAs; column
// tails masked); rows past the last 8 use AxpyF32.
func GemmF32NN(dst []float32, ldd int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
	if m <= 0 || n <= 0 {
		return
	}
	_, _, _ = dst[(m-1)*ldd+n-1], a[(m-1)*lda+k-1], b[(k-1)*ldb+n-1]
	m8 := 0
	if gemmNNFast != nil && k > 0 {
		m8 = m &^ 7
		for i := 0; i < m8; i += 8 {
			for j := 0; j < n; j += 32 {
				gemmNNFast(&a[i*lda], 4*lda, &b[j], 4*ldb, k, &dst[i*ldd+j], 4*ldd, min(32, n-j))
			}
		}
	}
	for i := m8; i < m; i++ {
		row := dst[i*ldd : i*ldd+n]
		clear(row)
		for c := range k {
			AxpyF32(row, a[i*lda+c], b[c*ldb:c*ldb+n])
		}
	}
}

// MaxF32 is the largest value of x (−Inf for none; NaNs are not ordered).
func MaxF32(x []float32) float32 {
	if maxFast != nil && len(x) > 0 {
		return maxFast(&x[0], len(x))
	}
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

// ArgmaxF32 is engine.Argmax of x (the first index of the largest value;
// NaNs never win unless x[0] is one, then 0) from a SIMD kernel, ~10×
// faster than that loop (a greedy decode step over a 248k vocabulary:
// ~200 µs on one thread while the others wait); ok is false where there
// is no kernel or x is empty.
func ArgmaxF32(x []float32) (i int, ok bool) {
	if argmaxFast == nil || len(x) == 0 {
		return 0, false
	}
	if x[0] != x[0] {
		return 0, true
	}
	return argmaxFast(&x[0], len(x)), true
}

// ExpSubF32 sets x[j] = exp(x[j] − mx) and returns Σ x[j]. The AVX-512
// version is Cephes' expf (within 2 ulp of the float64 exp rounded, for
// arguments ≥ −87; below, it flushes towards 0) and sums in 16 float32
// lanes; the Go one rounds math.Exp and sums in float64.
func ExpSubF32(x []float32, mx float32) float32 {
	if expSubFast != nil && len(x) > 0 {
		return expSubFast(&x[0], len(x), mx)
	}
	var sum float64
	for j, v := range x {
		e := math.Exp(float64(v - mx))
		x[j] = float32(e)
		sum += e
	}
	return float32(sum)
}

// Portable reference versions.

func axpyGo(dst []float32, a float32, x []float32) {
	for i := range dst {
		dst[i] += a * x[i]
	}
}

func dotF32Go(a, b []float32) float32 {
	var s float32
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

func dotBF16Go(x []float32, w []uint16) float32 {
	var s float32
	for i, v := range x {
		s += v * tensor.BF16ToF32(w[i])
	}
	return s
}

func f16(b []byte) float32 { return tensor.F16ToF32(binary.LittleEndian.Uint16(b)) }

// quantizeRowGo is the reference activation quantizer (see QuantizeRows).
func quantizeRowGo(x []float32, q []int8, d []float32, s8, s128 []int32) {
	for b := range d {
		xs := x[b*QK : (b+1)*QK]
		var amax float32
		for _, v := range xs {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		amax = max(amax, minScale)
		d[b] = amax / 127
		id := 127 / amax
		var sum int32
		for j, v := range xs {
			qv := int32(math.RoundToEven(float64(v * id)))
			q[b*QK+j] = int8(qv)
			sum += qv
		}
		s8[b], s128[b] = -8*sum, -128*sum
	}
}

// minScale floors a block's absolute maximum so that 127/amax is finite:
// an all-zero block quantizes to zeros (with a tiny, harmless scale).
const minScale = 1e-30

// dotQ8RowsGo is Σ_b (d_w·d_x)·Σ_j q_w·q_x over nb ggml Q8_0 blocks of w.
func dotQ8RowsGo(w []byte, q []int8, d []float32, nb int) float32 {
	var s float32
	for b := 0; b < nb; b++ {
		bw, bq := w[b*BlockQ8_0:(b+1)*BlockQ8_0], q[b*QK:(b+1)*QK]
		var sum int32
		for j := range QK {
			sum += int32(int8(bw[2+j])) * int32(bq[j])
		}
		s += float32(sum) * (f16(bw) * d[b])
	}
	return s
}

// dotQ4RowsGo is the same for Q4_0 blocks (value = nibble − 8).
func dotQ4RowsGo(w []byte, q []int8, d []float32, nb int) float32 {
	var s float32
	for b := 0; b < nb; b++ {
		bw, bq := w[b*BlockQ4_0:(b+1)*BlockQ4_0], q[b*QK:(b+1)*QK]
		var sum int32
		for j := range 16 {
			lo, hi := int32(bw[2+j]&0x0f)-8, int32(bw[2+j]>>4)-8
			sum += lo*int32(bq[j]) + hi*int32(bq[16+j])
		}
		s += float32(sum) * (f16(bw) * d[b])
	}
	return s
}
