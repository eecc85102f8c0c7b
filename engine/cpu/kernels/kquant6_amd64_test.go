package kernels

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// BenchmarkKQuantCPU compares the native K-quant (and float) kernels with
// Q8_0/Q4_0 on 24 distinct [3072, 1024] matrices cycled (as a decode step
// streams a model's layers), M activation rows, one locked thread.
// cpuGMAC/s and cpuGB/s (weight bytes) count this thread's CPU time only
// (a shared machine's other tenants do not count).
func BenchmarkKQuantCPU(b *testing.B) {
	if !kqPacked() {
		b.Skip("needs AVX-512 VNNI or AVX2")
	}
	r := rand.New(rand.NewPCG(71, 72))
	const N, K, mats = 3072, 1024, 24
	type format struct {
		name string
		make func() (*Matrix, error)
	}
	formats := []format{
		{"Q8_0", func() (*Matrix, error) { return Prepare(randHost(r, tensor.Q8_0, N, K)) }},
		{"Q4_0", func() (*Matrix, error) { return Prepare(randHost(r, tensor.Q4_0, N, K)) }},
		{"Q4_K", func() (*Matrix, error) { return PrepareQ4K(randQ4K(r, N, K)) }},
		{"Q6_K", func() (*Matrix, error) { return PrepareQ6K(randQ6K(r, N, K)) }},
		{"Q6_K-x8", func() (*Matrix, error) { return PrepareQ6K(randQ6K(r, N, K)) }}, // the 8-row kernel only
		{"Q5_K", func() (*Matrix, error) { return PrepareQ5K(randQ5K(r, N, K)) }},
		{"BF16", func() (*Matrix, error) { return Prepare(randHost(r, tensor.BF16, N, K)) }},
		{"F16", func() (*Matrix, error) { return Prepare(randHost(r, tensor.F16, N, K)) }},
		// The session-2 paths, for comparison: Q4_K through its MLX
		// rewrite (6 bits per weight); F16 by row decode + DotF32 (the
		// "F16-rows" matrices run with useF16Kernel off). Q6_K was
		// requantized to Q8_0: the Q8_0 figures.
		{"Q4_K-MLX", func() (*Matrix, error) { return PrepareQ4KAsMLX(randQ4K(r, N, K)) }},
		{"F16-rows", func() (*Matrix, error) { return Prepare(randHost(r, tensor.F16, N, K)) }},
	}
	for _, f := range formats {
		var ms []*Matrix
		for range mats {
			m, err := f.make()
			if errors.Is(err, ErrUnsupported) { // Q4_K-MLX without VNNI
				b.Logf("%s: %v", f.name, err)
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			ms = append(ms, m)
		}
		if len(ms) == 0 {
			continue
		}
		for _, M := range []int{1, 4, 8, 64} {
			b.Run(fmt.Sprintf("%s/M%d", f.name, M), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				if f.name == "F16-rows" {
					useF16Kernel = false
					defer func() { useF16Kernel = true }()
				}
				if f.name == "Q6_K-x8" {
					useKQ16 = false
					defer func() { useKQ16 = true }()
				}
				var in Input
				in.Reset(randF32(r, M*K), M, K)
				dst := make([]float32, M*N)
				c0 := threadCPU()
				for i := 0; b.Loop(); i++ {
					m := ms[i%mats]
					if m.Quantized() {
						in.QuantizeRows(0, M)
					}
					m.MatMul(dst, N, &in, 0, N)
				}
				s := threadCPU() - c0
				b.ReportMetric(float64(M)*N*K*float64(b.N)/s, "cpuGMAC/s") // s in ns
				b.ReportMetric(float64(ms[0].Bytes())*float64(b.N)/s, "cpuGB/s")
			})
		}
	}
}
