package kernels

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// BenchmarkDecodeDRAMKQuant: one-row products over ~300 MB Q4_K and Q6_K
// matrices (far bigger than the caches) on 2 goroutines, for software
// prefetch distances prefetchKQ: the DRAM read rate the K-quant decode
// kernels reach (compare BenchmarkDecodeDRAM's Q8_0).
func BenchmarkDecodeDRAMKQuant(b *testing.B) {
	if !useVNNI {
		b.Skip("no AVX-512 VNNI")
	}
	defer func(pf int) { prefetchKQ = pf }(prefetchKQ)
	r := rand.New(rand.NewPCG(9, 11))
	const K = 4096
	for _, f := range []tensor.Format{tensor.Q4_K, tensor.Q6_K} {
		bs := map[tensor.Format]int{tensor.Q4_K: tensor.BlockBytesQ4_K, tensor.Q6_K: tensor.BlockBytesQ6_K}[f]
		N := (300 << 20) / (K / tensor.QKK * bs) &^ 15
		h := &tensor.Host{Name: "big", Format: f, Shape: []int{N, K}, Data: make([]byte, N*K/tensor.QKK*bs)}
		for i := range h.Data {
			h.Data[i] = byte(r.Uint32())
		}
		for o := 0; o < len(h.Data); o += bs { // finite d (and dmin)
			if f == tensor.Q6_K {
				binary.LittleEndian.PutUint16(h.Data[o+bs-2:], tensor.F32ToF16(1e-3))
				continue
			}
			binary.LittleEndian.PutUint16(h.Data[o:], tensor.F32ToF16(1e-3))
			binary.LittleEndian.PutUint16(h.Data[o+2:], tensor.F32ToF16(1e-3))
		}
		prep := PrepareQ4K
		if f == tensor.Q6_K {
			prep = PrepareQ6K
		}
		m, err := prep(h)
		if err != nil {
			b.Fatal(err)
		}
		h.Data = nil
		var in Input
		in.Reset(randF32(r, K), 1, K)
		in.QuantizeRows(0, 1)
		dst := make([]float32, N)
		for _, pf := range []int{1024, 2048, 3072, 4096} {
			b.Run(fmt.Sprintf("%v/pf%d", f, pf), func(b *testing.B) {
				prefetchKQ = pf
				b.SetBytes(int64(m.Bytes()))
				for b.Loop() {
					var wg sync.WaitGroup
					for t := range 2 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							n0, n1 := t*N/2&^15, (t+1)*N/2&^15
							m.MatMul(dst, N, &in, n0, n1)
						}()
					}
					wg.Wait()
				}
			})
		}
	}
}
