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

// BenchmarkMatMul8Rows: 8 activation rows (batched decode of 8 streams)
// over 24 distinct [3072, 1024] Q8_0/Q4_0 matrices cycled (40-80 MB, as a
// decode step streams a model's layers), with the 8-row kernel vs two
// passes of the 4-row one. cpuGMAC/s counts this thread's CPU time only (shared machine).
func BenchmarkMatMul8Rows(b *testing.B) {
	if !usePacked() {
		b.Skip("no VNNI")
	}
	r := rand.New(rand.NewPCG(9, 9))
	const N, K, M, mats = 3072, 1024, 8, 24
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0} {
		var ms []*Matrix
		for range mats {
			m, err := Prepare(randHost(r, f, N, K))
			if err != nil {
				b.Fatal(err)
			}
			ms = append(ms, m)
		}
		for _, x8 := range []bool{false, true} {
			b.Run(fmt.Sprintf("%v/x8=%v", f, x8), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				use8Rows = x8
				defer func() { use8Rows = true }()
				var in Input
				in.Reset(randF32(r, M*K), M, K)
				in.QuantizeRows(0, M)
				dst := make([]float32, M*N)
				c0 := threadNS()
				for i := 0; b.Loop(); i++ {
					ms[i%mats].MatMul(dst, N, &in, 0, N)
				}
				b.ReportMetric(float64(M)*N*K*float64(b.N)/(threadNS()-c0), "cpuGMAC/s")
			})
		}
	}
}

func threadNS() float64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return float64(ts.Sec)*1e9 + float64(ts.Nsec)
}
