//go:build linux && amd64

package kernels

import (
	"encoding/binary"
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

// BenchmarkRowsDRAM: M activation rows (batched decode of M sequences)
// over a qwen3-0.6b-sized set of weights (28 layers of q/k/v/o/gate/up/down
// shapes, distinct copies: 0.45 GB Q8_0, 0.24 GB Q4_0, far beyond the
// caches), one matrix after another on one locked thread. cpuGB/s is weight
// bytes per second of this thread's CPU time (immune to other tenants'
// time slices); the kernels should stream at the same rate for every M
// (weights read once per 8 rows).
//
//	go test -run X -bench RowsDRAM -benchtime 5x ./engine/cpu/kernels/
func BenchmarkRowsDRAM(b *testing.B) {
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0} {
		for _, M := range []int{1, 2, 3, 4, 5, 6, 7, 8, 16} {
			b.Run(fmt.Sprintf("%v/M%d", f, M), func(b *testing.B) { runRowsDRAM(b, f, M) })
		}
	}
}

// BenchmarkRowsDRAMAB runs the prefetch distances of the ×8/×4 kernels in
// alternation (and M = 1 as the yardstick), one pass over the weights each
// per round, and reports each one's cpuGB/s: slow changes of the machine's
// load hit every variant alike.
func BenchmarkRowsDRAMAB(b *testing.B) {
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0} {
		for _, M := range []int{4, 8} {
			b.Run(fmt.Sprintf("%v/M%d", f, M), func(b *testing.B) {
				p4q8, p4q4, p8q8, p8q4 := prefetch4Q8, prefetch4Q4, prefetch8Q8, prefetch8Q4
				defer func() { prefetch4Q8, prefetch4Q4, prefetch8Q8, prefetch8Q4 = p4q8, p4q4, p8q8, p8q4 }()
				ms := rowsDRAMSet(b, f, true)
				vs := []abVariant{{"M1", 1, ms, func() {}}}
				for _, pf := range []int{1024, 2048, 3072, 4096} {
					vs = append(vs, abVariant{fmt.Sprintf("pf%d", pf), M, ms, func() {
						prefetch4Q8, prefetch4Q4, prefetch8Q8, prefetch8Q4 = pf, pf, pf, pf
					}})
				}
				abRowsDRAM(b, vs)
			})
		}
	}
}

// BenchmarkRowsDRAMHuge: the weights packed with and without transparent
// huge pages (adviseHuge), M = 1 and 8, in alternation.
func BenchmarkRowsDRAMHuge(b *testing.B) {
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0} {
		b.Run(f.String(), func(b *testing.B) {
			small, huge := rowsDRAMSet(b, f, false), rowsDRAMSet(b, f, true)
			nop := func() {}
			abRowsDRAM(b, []abVariant{{"4k-M1", 1, small, nop}, {"2M-M1", 1, huge, nop}, {"4k-M8", 8, small, nop}, {"2M-M8", 8, huge, nop}})
		})
	}
}

// BenchmarkRowsDRAMPad: a last group of M%8 rows padded for the
// interleaved kernels (M = 2-4: the 4-row one, 5-7: the 8-row one) or
// through the row-major 4- and 1-row kernels, in alternation, with M = 1
// and 8 as the yardsticks.
func BenchmarkRowsDRAMPad(b *testing.B) {
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0} {
		b.Run(f.String(), func(b *testing.B) {
			ms := rowsDRAMSet(b, f, true)
			defer func(p8, p4 int) { pad8From, pad4From = p8, p4 }(pad8From, pad4From)
			pad, nopad := func() { pad8From, pad4From = 5, 2 }, func() { pad8From, pad4From = 8, 8 }
			vs := []abVariant{{"M1", 1, ms, pad}, {"M8", 8, ms, pad}}
			for _, M := range []int{2, 3, 4, 5, 6, 7} {
				vs = append(vs, abVariant{fmt.Sprintf("M%d-pad", M), M, ms, pad}, abVariant{fmt.Sprintf("M%d-rows", M), M, ms, nopad})
			}
			abRowsDRAM(b, vs)
		})
	}
}

// abVariant is one configuration of an A/B run: M activation rows over
// the weights ms after set() has set up the kernels.
type abVariant struct {
	name string
	M    int
	ms   []*Matrix
	set  func()
}

// abRowsDRAM runs the variants in alternation, one pass over their weights
// each per round, and reports each one's weight bytes per second of this
// thread's CPU time as "<name>-GB/s".
func abRowsDRAM(b *testing.B, vs []abVariant) {
	r := rand.New(rand.NewPCG(7, 8))
	ins := make([]map[int]*Input, len(vs))
	for i, v := range vs {
		v.set() // before the inputs: pad8From shapes them
		ins[i] = rowsInputs(r, v.M)
	}
	dst := make([]float32, 16*3072)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ns := make([]float64, len(vs))
	for b.Loop() {
		for i, v := range vs {
			v.set()
			c0 := threadNS()
			for _, m := range v.ms {
				m.MatMul(dst, m.Rows, ins[i][m.Cols], 0, m.Rows)
			}
			ns[i] += threadNS() - c0
		}
	}
	for i, v := range vs {
		b.ReportMetric(float64(setBytes(v.ms))*float64(b.N)/ns[i], v.name+"-GB/s")
	}
}

func setBytes(ms []*Matrix) int {
	n := 0
	for _, m := range ms {
		n += m.Bytes()
	}
	return n
}

func runRowsDRAM(b *testing.B, f tensor.Format, M int) {
	ms := rowsDRAMSet(b, f, true)
	ins := rowsInputs(rand.New(rand.NewPCG(7, 8)), M)
	dst := make([]float32, M*3072)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := threadNS()
	for b.Loop() {
		for _, m := range ms {
			m.MatMul(dst, m.Rows, ins[m.Cols], 0, m.Rows)
		}
	}
	b.ReportMetric(float64(setBytes(ms))*float64(b.N)/(threadNS()-c0), "cpuGB/s")
}

// dramSets caches the weight sets of rowsDRAMSet (0.45 GB of Q8_0: made
// once per benchmark binary).
var dramSets = map[[2]int][]*Matrix{}

// rowsDRAMSet is a qwen3-0.6b-sized set of weights of format f (28 layers
// of q/k/v/o/gate/up/down shapes, distinct copies), packed with or without
// huge pages.
func rowsDRAMSet(b *testing.B, f tensor.Format, huge bool) []*Matrix {
	if !usePacked() {
		b.Skip("no VNNI")
	}
	key := [2]int{int(f), 0}
	if huge {
		key[1] = 1
	}
	if ms := dramSets[key]; ms != nil {
		return ms
	}
	defer func(h bool) { hugePages = h }(hugePages)
	hugePages = huge
	const layers = 28
	shapes := [][2]int{{2048, 1024}, {1024, 1024}, {1024, 1024}, {1024, 2048}, {3072, 1024}, {3072, 1024}, {1024, 3072}}
	r := rand.New(rand.NewPCG(5, 6))
	var ms []*Matrix
	for range layers {
		for _, s := range shapes {
			m, err := Prepare(randQuant(r, f, s[0], s[1]))
			if err != nil {
				b.Fatal(err)
			}
			ms = append(ms, m)
		}
	}
	dramSets[key] = ms
	return ms
}

// rowsInputs is a quantized input of M rows for each K of rowsDRAMSet.
func rowsInputs(r *rand.Rand, M int) map[int]*Input {
	ins := map[int]*Input{}
	for _, K := range []int{1024, 2048, 3072} {
		in := new(Input)
		in.Reset(randF32(r, M*K), M, K)
		in.QuantizeRows(0, M)
		ins[K] = in
	}
	return ins
}

// randQuant is a [rows, cols] Q8_0 or Q4_0 matrix of random blocks (fast
// to make: no float quantization).
func randQuant(r *rand.Rand, f tensor.Format, rows, cols int) *tensor.Host {
	bs := BlockQ8_0
	if f == tensor.Q4_0 {
		bs = BlockQ4_0
	}
	nb := rows * cols / QK
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

func threadNS() float64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return float64(ts.Sec)*1e9 + float64(ts.Nsec)
}
