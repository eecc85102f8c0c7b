package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// TestPrefetchBitIdentical: a MatMul asked to prefetch other weights
// (Input.Prefetch, the 4-bit 8-row kernel's second stream) gives the bits
// of one that is not, the request holds for one call only, and PackedRows
// spans the groups of the rows asked (nil where the kernels keep the ggml
// layout, as on arm64).
func TestPrefetchBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const N, K = 300, 1024
	for _, f := range []tensor.Format{tensor.Q4_0, tensor.Q8_0} {
		m, err := Prepare(randHost(r, f, N, K))
		if err != nil {
			t.Fatal(err)
		}
		other, err := Prepare(randHost(r, f, N, K))
		if err != nil {
			t.Fatal(err)
		}
		for _, M := range []int{5, 8, 13} {
			var in Input
			in.Reset(randF32(r, M*K), M, K)
			in.QuantizeRows(0, M)
			want := make([]float32, M*N)
			m.MatMul(want, N, &in, 0, N)
			for _, span := range [][2]int{{0, N}, {17, 40}, {290, 300}} {
				in.Prefetch(other.PackedRows(span[0], span[1]))
				got := make([]float32, M*N)
				m.MatMul(got, N, &in, 0, N)
				for k := range got {
					if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
						t.Fatalf("%v M=%d rows %v: output %d = %v, want %v", f, M, span, k, got[k], want[k])
					}
				}
				if in.next != nil {
					t.Fatalf("%v M=%d: the prefetch request outlived its call", f, M)
				}
			}
		}
		if other.layout != layoutPacked16 { // arm64 keeps the ggml layout: nothing to prefetch
			if b := other.PackedRows(17, 40); b != nil {
				t.Errorf("%v: PackedRows of a %v-layout matrix is %d bytes, want nil", f, other.layout, len(b))
			}
			continue
		}
		gs := other.groupStride()
		if got, want := len(other.PackedRows(17, 40)), 2*gs; got != want { // groups 1 and 2
			t.Errorf("%v: PackedRows(17, 40) is %d bytes, want %d", f, got, want)
		}
		if got, want := len(other.PackedRows(290, 300)), gs; got != want { // the last, partial group
			t.Errorf("%v: PackedRows(290, 300) is %d bytes, want %d", f, got, want)
		}
	}
}
