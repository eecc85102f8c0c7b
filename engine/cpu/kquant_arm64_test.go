package cpu

import (
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/macpool/macpool/engine/cpu/kernels"
	"github.com/macpool/macpool/engine/tensor"
)

// TestUploadKQuantNativeARM64: on arm64 with the dot-product extension
// (every Apple M-series core, and qemu's default CPU in CI) K-quant
// matrices load natively on the SDOT kernels — their own format, within 3%
// of the file's bytes — instead of being requantized to Q8_0 (1.9× a Q4_K
// file's memory, and other results than amd64's). Also with
// ExactMatMul, where the packed rows decode bit-identically.
func TestUploadKQuantNativeARM64(t *testing.T) {
	if !cpu.ARM64.HasASIMDDP {
		t.Skip("no dot-product extension: K-quants are requantized to Q8_0 here")
	}
	if !kernels.KQuantPacked() {
		t.Fatal("arm64 with SDOT: KQuantPacked() = false, K-quants would be requantized to Q8_0 at load")
	}
	r := rand.New(rand.NewPCG(43, 44))
	const N, K = 48, 512
	for _, exact := range []bool{false, true} {
		b, err := New(Config{Threads: 2, ExactMatMul: exact})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []tensor.Format{tensor.Q4_K, tensor.Q5_K, tensor.Q6_K} {
			h, _ := host(t, r, f, N, K)
			w, err := b.Upload(h)
			if err != nil {
				t.Fatalf("%v: %v", f, err)
			}
			k := w.(*Weight).k
			if k == nil || k.Format != f {
				t.Fatalf("exact %v, %v: kernel matrix %+v, want native %v", exact, f, k, f)
			}
			if got, file := k.Bytes(), len(h.Data); got > file*103/100 {
				t.Errorf("exact %v, %v: %d bytes resident for a %d-byte tensor (requantized?)", exact, f, got, file)
			}
		}
		b.Close()
	}
}
