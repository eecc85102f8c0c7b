package kernels

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"github.com/macpool/macpool/engine/tensor"
)

// BenchmarkPrefetchAB: the decode kernels over a 128/256 MB matrix (DRAM)
// with several software prefetch distances; cpuGB/s counts this thread's
// CPU time only (the machine is shared).
func BenchmarkPrefetchAB(b *testing.B) {
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0} {
		r := rand.New(rand.NewPCG(9, 9))
		const N, K = 1 << 16, 4096
		h := randHost(r, f, 16, K)
		big := make([]byte, 0, N/16*len(h.Data))
		for range N / 16 {
			big = append(big, h.Data...)
		}
		h = &tensor.Host{Name: "big", Format: f, Shape: []int{N, K}, Data: big}
		m, _ := Prepare(h)
		x := randF32(r, K)
		var in Input
		in.Reset(x, 1, K)
		in.QuantizeRows(0, 1)
		dst := make([]float32, N)
		xs := &in.S128[0]
		if f == tensor.Q4_0 {
			xs = &in.S8[0]
		}
		for _, pf := range []int{0, 512, 1024, 2048, 4096} {
			b.Run(fmt.Sprintf("%v/pf%d", f, pf), func(b *testing.B) {
				b.SetBytes(int64(m.Bytes()))
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				c0 := threadCPU()
				for b.Loop() {
					if f == tensor.Q8_0 {
						gemmQ8x1VNNI(&m.data[0], m.nb, N/16, &in.Q[0], &in.D[0], xs, &dst[0], pf)
					} else {
						gemmQ4x1VNNI(&m.data[0], m.nb, N/16, &in.Q[0], &in.D[0], xs, &dst[0], pf)
					}
				}
				b.ReportMetric(float64(m.Bytes())*float64(b.N)/(threadCPU()-c0), "cpuGB/s")
			})
		}
	}
}

// threadCPU is the calling thread's CPU time in nanoseconds (immune to
// time slicing by other processes on this shared machine).
func threadCPU() float64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return float64(ts.Sec)*1e9 + float64(ts.Nsec)
}
