package kernels

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// TestPackParallel: pack (split over goroutines by groups of 16 rows) gives
// the same bytes as one serial packInto, and every packed row decodes
// bit-exactly to Host.DecodeRow, for a matrix big enough to be split and a
// row count that leaves a partial last group.
func TestPackParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0} {
		const rows, cols = 2100 + 7, 2048
		h := randHost(r, f, rows, cols)
		nb := cols / QK
		got := pack(f, h.Data, rows, nb)
		want := make([]byte, len(got))
		packInto(f, want, h.Data, 0, rows, nb)
		if !bytes.Equal(got, want) {
			t.Fatalf("%v: parallel pack differs from serial packInto", f)
		}
		dec, ref := make([]float32, cols), make([]float32, cols)
		for n := range rows {
			unpackRow(f, got, n, nb, dec)
			if err := h.DecodeRow(n, ref); err != nil {
				t.Fatal(err)
			}
			for k := range dec {
				if math.Float32bits(dec[k]) != math.Float32bits(ref[k]) {
					t.Fatalf("%v row %d col %d: packed %g, Host.DecodeRow %g", f, n, k, dec[k], ref[k])
				}
			}
		}
	}
}
