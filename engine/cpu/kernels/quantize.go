package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/macpool/macpool/engine/tensor"
)

// QuantizeMatrix converts a matrix of any decodable format (F32, F16, BF16,
// ...) to Q8_0 or Q4_0 with ggml's reference quantizers (what
// llama-quantize writes: Q8_0 d = amax/127, q = round(x/d); Q4_0 d = v/−8
// for the value v of largest magnitude, q = min(15, trunc(x/d + 8.5))),
// straight into the kernels' layout. Memory: the result plus one row per
// goroutine; rows are decoded with h.DecodeRow.
func QuantizeMatrix(h *tensor.Host, f tensor.Format) (*Matrix, error) {
	if f != tensor.Q8_0 && f != tensor.Q4_0 {
		return nil, fmt.Errorf("kernels: quantize %s to %v: want Q8_0 or Q4_0", h.Name, f)
	}
	rows, cols := h.Rows(), h.Cols()
	if rows <= 0 || cols <= 0 || cols%QK != 0 {
		return nil, fmt.Errorf("kernels: quantize %s: shape %v is not rows of whole %d-blocks", h.Name, h.Shape, QK)
	}
	nb := cols / QK
	m := &Matrix{Format: f, Rows: rows, Cols: cols, nb: nb, copied: true}
	sb := BlockQ8_0
	if f == tensor.Q4_0 {
		sb = BlockQ4_0
	}
	packed := usePacked()
	if packed {
		m.layout = layoutPacked16
		m.data = allocPacked((rows + packRows - 1) / packRows * nb * packBlockBytes(f)) // huge pages (gemm8)
	} else {
		m.data = allocPacked(rows * nb * sb)
	}
	// Work in whole packed groups so that goroutines write disjoint bytes.
	groups := (rows + packRows - 1) / packRows
	workers := min(runtime.GOMAXPROCS(0), groups)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := make([]float32, cols)
			blocks := make([]byte, nb*sb)
			for g := wk; g < groups; g += workers {
				for r := g * packRows; r < min(rows, (g+1)*packRows); r++ {
					if err := h.DecodeRow(r, x); err != nil {
						errs[wk] = fmt.Errorf("kernels: quantize: %w", err)
						return
					}
					dst := blocks
					if !packed {
						dst = m.data[r*nb*sb : (r+1)*nb*sb]
					}
					if f == tensor.Q8_0 {
						QuantizeQ8_0(x, dst)
					} else {
						QuantizeQ4_0(x, dst)
					}
					if packed {
						packInto(f, m.data, blocks, r, 1, nb)
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

// QuantizeQ8_0 writes len(x)/32 ggml Q8_0 blocks of x to dst
// (quantize_row_q8_0_ref: roundf, half away from zero).
func QuantizeQ8_0(x []float32, dst []byte) {
	for i := 0; i+QK <= len(x); i += QK {
		var amax float32
		for _, v := range x[i : i+QK] {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		blk := dst[i/QK*BlockQ8_0 : (i/QK+1)*BlockQ8_0]
		binary.LittleEndian.PutUint16(blk, tensor.F32ToF16(d))
		for j, v := range x[i : i+QK] {
			blk[2+j] = byte(int8(math.Round(float64(v * id))))
		}
	}
}

// QuantizeQ4_0 writes len(x)/32 ggml Q4_0 blocks of x to dst
// (quantize_row_q4_0_ref).
func QuantizeQ4_0(x []float32, dst []byte) {
	for i := 0; i+QK <= len(x); i += QK {
		var amax, mx float32
		for _, v := range x[i : i+QK] {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, mx = a, v
			}
		}
		d := mx / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		blk := dst[i/QK*BlockQ4_0 : (i/QK+1)*BlockQ4_0]
		binary.LittleEndian.PutUint16(blk, tensor.F32ToF16(d))
		for j := 0; j < 16; j++ {
			q0 := min(15, int(int8(x[i+j]*id+8.5)))
			q1 := min(15, int(int8(x[i+16+j]*id+8.5)))
			blk[2+j] = byte(q0) | byte(q1)<<4
		}
	}
}
