package deltanet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func randf64(r *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = r.NormFloat64()
	}
	return x
}

// The vector kernels (AVX-512 where the CPU has it) give the bits of plain FMA loops in
// increasing index order, for every width (multiples of 8 in every column block, and
// tails), depth and stride.
func TestKernelsMatchFMALoops(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 7, 8, 16, 24, 32, 40, 64, 72, 120, 128, 136, 200, 256} {
		for _, k := range []int{0, 1, 3, 64, 129} {
			for _, scale := range []float64{1, 0.75} {
				t.Run(fmt.Sprintf("n=%d/k=%d/scale=%g", n, k, scale), func(t *testing.T) {
					ld := n + 5
					a, b := randf64(r, k), randf64(r, max(1, k)*ld)
					y := randf64(r, n)
					want := append([]float64(nil), y...)
					for j := range want {
						s := scale * want[j]
						for x := 0; x < k; x++ {
							s = math.FMA(a[x], b[x*ld+j], s)
						}
						want[j] = s
					}
					gemv64(y, a, b, k, ld, n, scale)
					for j := range y {
						if math.Float64bits(y[j]) != math.Float64bits(want[j]) {
							t.Fatalf("gemv64 y[%d] = %v, want %v", j, y[j], want[j])
						}
					}
					m := k
					s := randf64(r, max(1, m)*ld)
					x := randf64(r, n)
					wantS := append([]float64(nil), s...)
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							wantS[i*ld+j] = math.FMA(a[i], x[j], scale*wantS[i*ld+j])
						}
					}
					ger64(s, a, x, m, ld, n, scale)
					for i := range s {
						if math.Float64bits(s[i]) != math.Float64bits(wantS[i]) {
							t.Fatalf("ger64 s[%d] = %v, want %v", i, s[i], wantS[i])
						}
					}
				})
			}
		}
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(r.NormFloat64())
		}
		wide := make([]float64, n)
		widen64(wide, src)
		back := make([]float32, n)
		for i := range wide {
			wide[i] = wide[i] * (1 + 1e-9) // not representable: narrowing must round
		}
		narrow32(back, wide)
		for i := range src {
			if want := float32(wide[i]); back[i] != want || float64(src[i])*(1+1e-9) != wide[i] {
				t.Fatalf("n=%d: widen/narrow %d: %v -> %v -> %v", n, i, src[i], wide[i], back[i])
			}
		}
		rounded := append([]float64(nil), wide...)
		round32(rounded)
		for i := range rounded {
			if rounded[i] != float64(back[i]) {
				t.Fatalf("n=%d: round32 %d: %v -> %v, want %v", n, i, wide[i], rounded[i], back[i])
			}
		}
		// The streaming stores, at an aligned and an unaligned destination.
		big := make([]float32, 1024+n)
		for _, off := range []int{0, 1, 8} {
			dst := big[off : off+n]
			narrow32Stream(dst, wide)
			if bad := sameBits(dst, back); bad > 0 {
				t.Fatalf("n=%d offset %d: narrow32Stream: %d values differ from narrow32", n, off, bad)
			}
		}
	}
}

// gemm64 (4×32 blocks where it can, rows and columns left over by gemv64) gives the bits
// of one gemv64 per row.
func TestGemmMatchesGemv(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, m := range []int{1, 3, 4, 5, 8, 11} {
		for _, n := range []int{8, 32, 40, 64, 128, 136} {
			for _, k := range []int{1, 5, 64, 128} {
				ldy, lda, ldb := n+3, k+2, n+9
				a, b := randf64(r, m*lda), randf64(r, k*ldb)
				y := randf64(r, m*ldy)
				want := append([]float64(nil), y...)
				for i := 0; i < m; i++ {
					gemv64(want[i*ldy:], a[i*lda:], b, k, ldb, n, 0.5)
				}
				gemm64(y, ldy, a, lda, b, ldb, m, k, n, 0.5)
				for i := range y {
					if math.Float64bits(y[i]) != math.Float64bits(want[i]) {
						t.Fatalf("m=%d n=%d k=%d: y[%d] = %v, want %v", m, n, k, i, y[i], want[i])
					}
				}
			}
		}
	}
}

// convAcc64 (AVX-512 where the CPU has it) gives the bits of the plain loop on float32
// weights and inputs.
func TestConvAccMatchesLoop(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, n := range []int{1, 8, 13, 64, 300} {
		acc, w := randf64(r, n), randf64(r, n)
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
			w[i] = float64(float32(w[i])) // the conv's weights are float32
		}
		want := append([]float64(nil), acc...)
		for i := range want {
			want[i] += w[i] * float64(x[i])
		}
		convAcc64(acc, w, x)
		for i := range acc {
			if math.Float64bits(acc[i]) != math.Float64bits(want[i]) {
				t.Fatalf("n=%d: acc[%d] = %v, want %v", n, i, acc[i], want[i])
			}
		}
	}
}
