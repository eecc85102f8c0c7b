package cpu

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine/cpu/kernels"
	"github.com/macpool/macpool/engine/tensor"
)

// TestUploadKQuant: K-quant matrices are uploaded to the
// native packed kernels when the machine has them (else requantized to
// Q8_0) and multiply as their exact decoded values within the int8
// activation error; a malformed K-quant tensor is refused with an error
// naming the format, not a panic.
func TestUploadKQuant(t *testing.T) {
	b := newBackend(t, 2)
	r := rand.New(rand.NewPCG(41, 42))
	const N, K, M = 40, 512, 3
	for _, f := range []tensor.Format{tensor.Q4_K, tensor.Q5_K, tensor.Q6_K} {
		h, exact := host(t, r, f, N, K)
		w, err := b.Upload(h)
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		// Native where the packed kernels exist, else requantized to Q8_0.
		want := tensor.Q8_0
		if kernels.KQuantPacked() {
			want = f
		}
		if k := w.(*Weight).k; k == nil || k.Format != want {
			t.Errorf("%v: kernel matrix %v, want format %v (packed K-quant kernels %v)", f, k, want, kernels.KQuantPacked())
		}
		x := randn(r, M*K)
		dst := b.NewTensor(M, N)
		b.MatMul(dst, tensorOf(b, M, K, x), w, nil)
		ref := make([]float32, M*N)
		for m := range M {
			for n := range N {
				var s float64
				for k := range K {
					s += float64(x[m*K+k]) * float64(exact[n*K+k])
				}
				ref[m*N+n] = float32(s)
			}
		}
		// int8 activations: ~1% per product on random data.
		check(t, f.String(), dst.(*Tensor).data, ref, 0.02)

		bad := &tensor.Host{Name: "bad", Format: f, Shape: []int{N, K}, Data: h.Data[:len(h.Data)-1]}
		if _, err := b.Upload(bad); err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(f.String())) {
			t.Errorf("%v: upload of a truncated tensor: err %v, want an error naming the format", f, err)
		}
	}
}
