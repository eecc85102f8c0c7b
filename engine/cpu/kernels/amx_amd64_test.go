package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// TestAMXBitIdentical: the AMX kernels give the bits of the VNNI kernels
// (8-, 4- and 1-row) for every output: Q8_0, Q4_0 and Q4_K, batches with
// 16-row tiles, padded last tiles and tails of other kernels, partial
// last weight groups, the weight rows in worker-sized ranges, the columns
// in whole and partial slices (amxSliceBlocks, with a padded last tile
// and partial groups beside them), and the whole matrix in one call (the
// groups in several chunks, amxChunk).
func TestAMXBitIdentical(t *testing.T) {
	if !useAMX {
		t.Skip("no AMX on this machine")
	}
	r := rand.New(rand.NewPCG(91, 92))
	shapes := []struct{ N, K int }{{40, 512}, {300, 1024}, {37, 3072}, {50, 2304}, {1100, 1024}}
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0, tensor.Q4_K} {
		for _, sh := range shapes {
			var m *Matrix
			var err error
			switch f {
			case tensor.Q4_K:
				m, err = PrepareQ4K(randQ4K(r, sh.N, sh.K))
			default:
				m, err = Prepare(randHost(r, f, sh.N, sh.K))
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, M := range []int{8, 15, 16, 17, 24, 33, 41, 48, 64, 77, 96} {
				t.Run(fmt.Sprintf("%v/%dx%d/M%d", f, sh.N, sh.K, M), func(t *testing.T) {
					x := randF32(r, M*sh.K)
					run := func(amx bool, step int) []float32 {
						defer func(v bool) { useAMX = v }(useAMX)
						useAMX = amx
						var in Input
						in.Reset(x, M, sh.K)
						in.QuantizeRows(M/3, M)
						in.QuantizeRows(0, M/3)
						got := make([]float32, M*sh.N)
						for i := range got {
							got[i] = float32(math.NaN())
						}
						for n0 := 0; n0 < sh.N; n0 += step {
							m.MatMul(got, sh.N, &in, n0, min(sh.N, n0+step))
						}
						return got
					}
					step := 16 * (1 + M%3)
					want := run(false, step)
					for _, step := range []int{step, sh.N} {
						got := run(true, step)
						bad := 0
						for k, v := range got {
							if math.Float32bits(v) != math.Float32bits(want[k]) {
								if bad < 3 {
									t.Errorf("rows in %d: row %d col %d: vnni %v, amx %v", step, k/sh.N, k%sh.N, want[k], v)
								}
								bad++
							}
						}
						if bad > 0 {
							t.Errorf("rows in %d: %d of %d outputs differ", step, bad, len(got))
						}
					}
				})
			}
		}
	}
}

// BenchmarkAMX compares the AMX kernels with the VNNI ones on a [3072,
// 1024] matrix and 64-512 activation rows (prefill), one locked thread;
// cpuGMAC/s counts this thread's CPU time only.
func BenchmarkAMX(b *testing.B) {
	if !useAMX {
		b.Skip("no AMX on this machine")
	}
	r := rand.New(rand.NewPCG(93, 94))
	const N, K = 3072, 1024
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0, tensor.Q4_K} {
		var m *Matrix
		var err error
		switch f {
		case tensor.Q4_K:
			m, err = PrepareQ4K(randQ4K(r, N, K))
		default:
			m, err = Prepare(randHost(r, f, N, K))
		}
		if err != nil {
			b.Fatal(err)
		}
		for _, M := range []int{64, 512} {
			var in Input
			in.Reset(randF32(r, M*K), M, K)
			in.QuantizeRows(0, M)
			dst := make([]float32, M*N)
			for _, amx := range []bool{false, true} {
				b.Run(fmt.Sprintf("%v/M%d/amx=%v", f, M, amx), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					defer func(v bool) { useAMX = v }(useAMX)
					useAMX = amx
					c0 := threadCPU()
					for b.Loop() {
						m.MatMul(dst, N, &in, 0, N)
					}
					b.ReportMetric(float64(M)*N*K*float64(b.N)/(threadCPU()-c0), "cpuGMAC/s")
				})
			}
		}
	}
}

// BenchmarkAMXShapes runs the Q8_0 AMX kernel at the prefill shapes of the
// hybrid models (qwen3.5-9b: K = 4096 and 12288; qwen3.6-35b: K = 2048),
// and the Q4_0 one at those of qwen3-30b-a3b's attention ([4096, 2048],
// [2048, 4096]) and qwen3-0.6b ([3072, 1024], [1024, 3072]), M = 512, one
// locked thread; cpuGMAC/s counts this thread's CPU time only.
// At K ≥ 2048 an activation tile outgrows L1 and all 512 rows outgrow L2,
// which the [3072, 1024] shape of BenchmarkAMX does not show. Against
// the defaults: 1 MiB chunks, one slice over all the columns (slice K/32),
// and that with 128 KiB chunks (chunks are also capped by amxSliceCodes,
// see amxChunk).
func BenchmarkAMXShapes(b *testing.B) {
	if !useAMX {
		b.Skip("no AMX on this machine")
	}
	r := rand.New(rand.NewPCG(95, 96))
	const M = 512
	for _, sh := range []struct {
		f    tensor.Format
		N, K int
	}{
		{tensor.Q8_0, 12288, 4096}, {tensor.Q8_0, 4096, 12288}, {tensor.Q8_0, 4096, 2048},
		{tensor.Q4_0, 4096, 2048}, {tensor.Q4_0, 2048, 4096}, {tensor.Q4_0, 3072, 1024}, {tensor.Q4_0, 1024, 3072},
	} {
		m, err := Prepare(randHost(r, sh.f, sh.N, sh.K))
		if err != nil {
			b.Fatal(err)
		}
		var in Input
		in.Reset(randF32(r, M*sh.K), M, sh.K)
		in.QuantizeRows(0, M)
		dst := make([]float32, M*sh.N)
		for _, v := range []struct{ chunk, slice int }{{amxChunkBytes, amxSliceBlocks}, {1 << 20, amxSliceBlocks}, {amxChunkBytes, sh.K / QK}, {packChunkBytes, sh.K / QK}} {
			b.Run(fmt.Sprintf("%v/%dx%d/chunk%dK/slice%d", sh.f, sh.N, sh.K, v.chunk>>10, v.slice), func(b *testing.B) {
				defer func(c, s int) { amxChunkBytes, amxSliceBlocks = c, s }(amxChunkBytes, amxSliceBlocks)
				amxChunkBytes, amxSliceBlocks = v.chunk, v.slice
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				c0 := threadCPU()
				for b.Loop() {
					m.MatMul(dst, sh.N, &in, 0, sh.N)
				}
				b.ReportMetric(float64(M)*float64(sh.N*sh.K)*float64(b.N)/(threadCPU()-c0), "cpuGMAC/s")
			})
		}
	}
}

// BenchmarkAMXStream runs the Q8_0 AMX kernel over 128 matrices of a MoE
// expert's shape ([512, 2048], 140 MB: from memory, as the experts are
// read) with the row counts an expert gets in prefill, one locked thread;
// cpuGMAC/s counts this thread's CPU time only.
func BenchmarkAMXStream(b *testing.B) {
	if !useAMX {
		b.Skip("no AMX on this machine")
	}
	r := rand.New(rand.NewPCG(97, 98))
	const N, K, E = 512, 2048, 128
	ms := make([]*Matrix, E)
	for e := range ms {
		m, err := Prepare(randHost(r, tensor.Q8_0, N, K))
		if err != nil {
			b.Fatal(err)
		}
		ms[e] = m
	}
	for _, M := range []int{16, 24, 512} {
		var in Input
		in.Reset(randF32(r, M*K), M, K)
		in.QuantizeRows(0, M)
		dst := make([]float32, M*N)
		b.Run(fmt.Sprintf("M%d", M), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := threadCPU()
			for b.Loop() {
				for _, m := range ms {
					m.MatMul(dst, N, &in, 0, N)
				}
			}
			b.ReportMetric(float64(M)*N*K*E*float64(b.N)/(threadCPU()-c0), "cpuGMAC/s")
		})
	}
}
