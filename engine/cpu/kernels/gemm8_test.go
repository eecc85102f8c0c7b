package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// TestBatchRowsBitIdentical: a row's product is the same bits whatever the
// batch it is computed in (M = 1..19: the 8-row kernels, padded groups of
// 5-7 rows, the 4- and 1-row kernels) and whatever the range of weight rows
// a call covers (worker chunks, the partial last group of 16). Continuous
// batching and failover resume rely on it (engine/cpu
// TestMatMulBatchInvariant checks the backend; this checks every kernel
// path and shape tail on every implementation this machine has).
func TestBatchRowsBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(81, 82))
	shapes := []struct{ N, K int }{{300, 1024}, {48, 96}, {37, 3072}}
	for _, im := range testImpls() {
		im.set()
		for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0} {
			for _, sh := range shapes {
				m, err := Prepare(randHost(r, f, sh.N, sh.K))
				if err != nil {
					t.Fatal(err)
				}
				const maxM = 19
				x := randF32(r, maxM*sh.K)
				alone := make([]float32, maxM*sh.N)
				for i := range maxM {
					var in Input
					in.Reset(x[i*sh.K:(i+1)*sh.K], 1, sh.K)
					in.QuantizeRows(0, 1)
					m.MatMul(alone[i*sh.N:(i+1)*sh.N], sh.N, &in, 0, sh.N)
				}
				for M := 2; M <= maxM; M++ {
					t.Run(fmt.Sprintf("%s/%v/%dx%d/M%d", im.name, f, sh.N, sh.K, M), func(t *testing.T) {
						var in Input
						in.Reset(x[:M*sh.K], M, sh.K)
						// Quantized in two parts, as the backend's workers do.
						in.QuantizeRows(M/2, M)
						in.QuantizeRows(0, M/2)
						got := make([]float32, M*sh.N)
						for i := range got {
							got[i] = float32(math.NaN())
						}
						// Weight rows in ranges of 16·k (the backend's chunks).
						step := 16 * (1 + M%3)
						for n0 := 0; n0 < sh.N; n0 += step {
							m.MatMul(got, sh.N, &in, n0, min(sh.N, n0+step))
						}
						bad := 0
						for k, v := range got {
							if math.Float32bits(v) != math.Float32bits(alone[k]) {
								if bad < 3 {
									t.Errorf("row %d col %d: alone %v, in a batch of %d %v", k/sh.N, k%sh.N, alone[k], M, v)
								}
								bad++
							}
						}
						if bad > 0 {
							t.Errorf("%d of %d outputs differ", bad, len(got))
						}
					})
				}
			}
		}
		im.restore()
	}
}
