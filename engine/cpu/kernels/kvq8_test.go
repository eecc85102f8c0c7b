package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestKVQ8Kernels: DotsQ8x2 and AxpysQ8x2 on every implementation against
// float64 sums over the widened cache, for head sizes of 1-8 blocks, one
// to 300 positions, contiguous vectors (stride = head size) and vectors of
// one head among several (stride = 4 heads, as paged blocks hold them);
// each also with one head alone (nil second row).
func TestKVQ8Kernels(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, impl := range testImpls() {
		for _, hd := range []int{32, 64, 128, 256, 512} {
			for _, heads := range []int{1, 4} {
				for _, n := range []int{1, 7, 300} {
					name := fmt.Sprintf("%s/hd%d/heads%d/n%d", impl.name, hd, heads, n)
					stride := heads * hd
					sstride := stride / KVQ8Block
					k := make([]int8, n*stride)
					ks := make([]float32, n*sstride)
					for i := range k {
						k[i] = int8(r.IntN(255) - 127)
					}
					for i := range ks {
						ks[i] = r.Float32() * 0.02
					}
					q0, q1 := randF32(r, hd), randF32(r, hd)
					p0, p1 := randF32(r, n), randF32(r, n)
					o0, o1 := randF32(r, hd), randF32(r, hd)
					w0, w1 := make([]float64, hd), make([]float64, hd)
					for x := range hd {
						w0[x], w1[x] = float64(o0[x]), float64(o1[x])
					}
					ws0, ws1 := make([]float64, n), make([]float64, n)
					for p := range n {
						for x := range hd {
							v := float64(k[p*stride+x]) * float64(ks[p*sstride+x/KVQ8Block])
							ws0[p] += float64(q0[x]) * v
							ws1[p] += float64(q1[x]) * v
							w0[x] += float64(p0[p]) * v
							w1[x] += float64(p1[p]) * v
						}
					}
					s0, s1 := make([]float32, n), make([]float32, n)
					a0, a1 := append([]float32(nil), s0...), append([]float32(nil), o0...)
					impl.set()
					DotsQ8x2(s0, s1, q0, q1, k, ks, stride, sstride, n)
					AxpysQ8x2(o0, o1, p0, p1, k, ks, stride, sstride, n)
					DotsQ8x2(a0, nil, q0, nil, k, ks, stride, sstride, n)
					AxpysQ8x2(a1, nil, p0, nil, k, ks, stride, sstride, n)
					impl.restore()
					for _, c := range []struct {
						what string
						got  []float32
						want []float64
					}{{"dots s0", s0, ws0}, {"dots s1", s1, ws1}, {"axpys o0", o0, w0}, {"axpys o1", o1, w1},
						{"dots alone", a0, ws0}, {"axpys alone", a1, w0}} {
						if e := relErr64(c.got, c.want); e > 1e-5 || e != e {
							t.Errorf("%s %s: rel-L2 %.3g vs float64", name, c.what, e)
						}
					}
				}
			}
		}
	}
}

func relErr64(got []float32, want []float64) float64 {
	var num, den float64
	for i, w := range want {
		d := float64(got[i]) - w
		num += d * d
		den += w * w
	}
	return math.Sqrt(num / den)
}
