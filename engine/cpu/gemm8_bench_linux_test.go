package cpu

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/tensor"
)

// BenchmarkDecodeWeights streams a qwen3-0.6b-sized set of weights (28
// layers of q/k/v/o/gate/up/down: 0.45 GB of Q8_0, 0.24 GB of Q4_0, far
// more than this VM's caches hold per thread) through Backend.MatMul with
// M activation rows, as one decode step of M sequences does, on 1 and 2
// threads. GB/s is weight bytes per wall second; cpu-ms is the process's
// CPU time per step (spinning included). Owner: gemm8 (issue #7).
//
//	go test -run X -bench DecodeWeights -benchtime 10x ./engine/cpu/
func BenchmarkDecodeWeights(b *testing.B) {
	const layers = 28
	shapes := [][2]int{{2048, 1024}, {1024, 1024}, {1024, 1024}, {1024, 2048}, {3072, 1024}, {3072, 1024}, {1024, 3072}}
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0} {
		r := rand.New(rand.NewPCG(3, 4))
		hosts := make([]*tensor.Host, len(shapes))
		for i, s := range shapes {
			hosts[i] = randQuantHost(r, f, s[0], s[1])
		}
		for _, threads := range []int{1, 2} {
			be, err := New(Config{Threads: threads})
			if err != nil {
				b.Fatal(err)
			}
			var ws []engine.Weight
			bytes := 0
			for range layers {
				for _, h := range hosts {
					w, err := be.Upload(h)
					if err != nil {
						b.Fatal(err)
					}
					ws = append(ws, w)
					bytes += len(h.Data)
				}
			}
			for _, M := range []int{1, 2, 3, 4, 5, 8} {
				xs := map[int]engine.Tensor{}
				ds := map[int]engine.Tensor{}
				for _, s := range shapes {
					xs[s[1]] = tensorOf(be, M, s[1], randn(r, M*s[1]))
					ds[s[0]] = be.NewTensor(M, s[0])
				}
				b.Run(fmt.Sprintf("%v/t%d/M%d", f, threads, M), func(b *testing.B) {
					c0 := procCPU()
					t0 := time.Now()
					for b.Loop() {
						for i, w := range ws {
							s := shapes[i%len(shapes)]
							be.MatMul(ds[s[0]], xs[s[1]], w, nil)
						}
					}
					sec := time.Since(t0).Seconds()
					b.ReportMetric(float64(bytes)*float64(b.N)/sec/1e9, "GB/s")
					b.ReportMetric((procCPU()-c0)/1e6/float64(b.N), "cpu-ms/step")
				})
			}
			for _, w := range ws {
				be.ReleaseWeight(w)
			}
			be.Close()
		}
	}
}

// randQuantHost is a [rows, cols] Q8_0 or Q4_0 matrix of random blocks.
func randQuantHost(r *rand.Rand, f tensor.Format, rows, cols int) *tensor.Host {
	bs := 34
	if f == tensor.Q4_0 {
		bs = 18
	}
	nb := rows * cols / 32
	data := make([]byte, bs*nb)
	for blk := range nb {
		o := bs * blk
		binary.LittleEndian.PutUint16(data[o:], tensor.F32ToF16(0.01+r.Float32()*0.05))
		for i := 2; i < bs; i++ {
			data[o+i] = byte(r.Uint32())
		}
	}
	return &tensor.Host{Name: "w", Format: f, Shape: []int{rows, cols}, Data: data}
}

// procCPU is the process's user+system CPU time in nanoseconds.
func procCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano() + ru.Stime.Nano())
}
