package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// BenchmarkMatMul measures one thread on a Qwen3-0.6B MLP-sized matrix
// [3072, 1024]: M=1 is decode (reported as weight bytes/s), larger M is
// prefill (see the GMAC/s metric).
func BenchmarkMatMul(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 7))
	const N, K = 3072, 1024
	type tc struct {
		name string
		h    *tensor.Host
	}
	var cases []tc
	for _, f := range formats {
		cases = append(cases, tc{f.String(), randHost(r, f, N, K)})
	}
	cases = append(cases, tc{"MLX4", randMLX(r, 4, 64, N, K)}, tc{"MLX8", randMLX(r, 8, 64, N, K)}, tc{"Q4_K", randQ4K(r, N, K)}, tc{"Q6_K", randQ6K(r, N, K)}, tc{"Q5_K", randQ5K(r, N, K)})
	for _, c := range cases {
		prepare := Prepare
		switch c.h.Format {
		case tensor.Q4_K:
			prepare = PrepareQ4K
		case tensor.Q6_K:
			prepare = PrepareQ6K
		case tensor.Q5_K:
			prepare = PrepareQ5K
		}
		m, err := prepare(c.h)
		if err != nil {
			b.Logf("%s: %v", c.name, err)
			continue
		}
		for _, M := range []int{1, 4, 64} {
			b.Run(fmt.Sprintf("%s/M%d", c.name, M), func(b *testing.B) {
				x := randF32(r, M*K)
				var in Input
				in.Reset(x, M, K)
				dst := make([]float32, M*N)
				b.SetBytes(int64(m.Bytes()))
				for b.Loop() {
					if m.Quantized() {
						in.QuantizeRows(0, M)
					}
					m.MatMul(dst, N, &in, 0, N)
				}
				b.ReportMetric(float64(M)*N*K*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}
