package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/macpool/macpool/engine"
)

func TestArgmax(t *testing.T) {
	inf := float32(math.Inf(1))
	rows := [][]float32{
		{1, 3, 2, 3},         // tie: lowest index
		{-inf, -inf, -5, -7}, // all negative
		{0, 0, 0, 0},         // all equal: first
		{1, 2, 3, inf},       // last
	}
	b, err := New(Config{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	x := b.NewTensor(len(rows), 4)
	b.Write(x, slices.Concat(rows...))
	got := make([]int, len(rows))
	if err := b.Argmax(x, got); err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 2, 0, 3}; !slices.Equal(got, want) {
		t.Errorf("argmax %v, want %v", got, want)
	}
	if err := b.Argmax(x, make([]int, 3)); err == nil {
		t.Error("argmax into 3 of 4 rows: no error")
	}
}

// TestArgmaxKernel: Backend.Argmax (the SIMD kernel where there is one)
// gives engine.Argmax's index on rows of every length up to two vectors
// and a vocabulary's, with the maximum first, last, in the tail, tied,
// next to NaNs (first value or elsewhere), ±0 and ±Inf.
func TestArgmaxKernel(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	b, err := New(Config{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 15, 16, 17, 31, 32, 33, 47, 248320 + 7} {
		base := randn(r, n)
		set := func(kv ...float32) []float32 { // index, value pairs
			v := slices.Clone(base)
			for i := 0; i < len(kv); i += 2 {
				v[min(n-1, int(kv[i]))] = kv[i+1]
			}
			return v
		}
		cases := map[string][]float32{
			"random":        base,
			"first":         set(0, 9),
			"last":          set(float32(n-1), 9),
			"tail":          set(float32(n-n%16), 9),
			"tie":           set(float32(n/2), 9, float32(n-1), 9),
			"nan first":     set(0, nan, float32(n-1), 9),
			"nan then max":  set(1, nan, 2, 9),
			"nan after max": set(1, 9, 2, nan, float32(n-1), nan),
			"nan lanes":     slices.Concat(base[:1], slices.Repeat([]float32{nan}, n-1)),
			"inf":           set(float32(n/3), inf),
			"all -inf":      slices.Repeat([]float32{-inf}, n),
			"-inf, nan":     set(0, -inf, 1, nan),
			"zeros":         slices.Repeat([]float32{0}, n),
			"-0 then +0":    slices.Concat(slices.Repeat([]float32{float32(math.Copysign(0, -1))}, n/2+1), slices.Repeat([]float32{0}, n-n/2-1)),
			"negative":      slices.Concat(slices.Repeat([]float32{-3}, n/2), slices.Repeat([]float32{-2}, n-n/2)),
		}
		for name, v := range cases {
			t.Run(fmt.Sprintf("%d/%s", n, name), func(t *testing.T) {
				x := b.NewTensor(1, n)
				b.Write(x, v)
				got := make([]int, 1)
				if err := b.Argmax(x, got); err != nil {
					t.Fatal(err)
				}
				if want := engine.Argmax(v); got[0] != want {
					t.Errorf("argmax %d (%v), want %d (%v)", got[0], v[got[0]], want, v[want])
				}
			})
		}
	}
}

// BenchmarkArgmax: one decode row of Qwen3.5's 248k vocabulary, as
// engine.Argmax scans it and as Backend.Argmax does.
//
//	go test -run X -bench Argmax -count 6 ./engine/cpu/
func BenchmarkArgmax(b *testing.B) {
	const n = 248320
	v := randn(rand.New(rand.NewPCG(3, 4)), n)
	be, err := New(Config{Threads: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	x := be.NewTensor(1, n)
	be.Write(x, v)
	dst := make([]int, 1)
	b.Run("engine", func(b *testing.B) {
		for b.Loop() {
			dst[0] = engine.Argmax(v)
		}
	})
	b.Run("backend", func(b *testing.B) {
		for b.Loop() {
			be.Argmax(x, dst)
		}
	})
}
