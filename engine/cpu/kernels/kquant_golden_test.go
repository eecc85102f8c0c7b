package kernels

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

// kqGolden are the FNV-64a hashes of the output bits of
// kqGoldenOutputs, recorded on amd64 with the AVX-512 VNNI kernels
// (`MACPOOL_PRINT_GOLDEN=1 go test -run TestKQuantGolden -v`).
var kqGolden = map[string]uint64{
	"Q4_K/17x256/M1": 0xfad0b1262fd31e21,
	"Q4_K/17x256/M3": 0x1c77f8b73936491f,
	"Q4_K/17x256/M4": 0x98d9643f76ac60f2,
	"Q4_K/17x256/M5": 0x869c8470ddee1c66,
	"Q4_K/17x256/M8": 0xd571e0b3888eece2,
	"Q4_K/17x256/M9": 0x3e2ced67ec1ff27e,
	"Q4_K/37x512/M1": 0x740ff0ced66c5e9,
	"Q4_K/37x512/M3": 0x485e5eeb9fb1c9b9,
	"Q4_K/37x512/M4": 0x42db1d5d41ab506,
	"Q4_K/37x512/M5": 0xbbc8ea9325c90a14,
	"Q4_K/37x512/M8": 0xdf07c68a1346a668,
	"Q4_K/37x512/M9": 0xa834827737f59dd9,
	"Q4_K/50x768/M1": 0x3c66733747c20e2c,
	"Q4_K/50x768/M3": 0xb2019f0d0a3bf8ec,
	"Q4_K/50x768/M4": 0x4773d570f5307830,
	"Q4_K/50x768/M5": 0x6cdb707e0ebc0c1b,
	"Q4_K/50x768/M8": 0x78882b6762068e38,
	"Q4_K/50x768/M9": 0x926453008499fc80,
	"Q5_K/17x256/M1": 0xdf7915f1b7768b90,
	"Q5_K/17x256/M3": 0x889b1c7fa20d65c,
	"Q5_K/17x256/M4": 0xb27744a1bd04168e,
	"Q5_K/17x256/M5": 0x7199b4e2bd9abc,
	"Q5_K/17x256/M8": 0x9fbf4d83d114031d,
	"Q5_K/17x256/M9": 0x5e41ceb86c60e79f,
	"Q5_K/37x512/M1": 0xf90463c28271a547,
	"Q5_K/37x512/M3": 0x6f041a5862a666ba,
	"Q5_K/37x512/M4": 0x223ef8dca69ac5a0,
	"Q5_K/37x512/M5": 0x76e261064c8c61f4,
	"Q5_K/37x512/M8": 0x2fc0d82b190c4a6e,
	"Q5_K/37x512/M9": 0xbedda914147b7440,
	"Q5_K/50x768/M1": 0x62668a0a550702b,
	"Q5_K/50x768/M3": 0xe5adc1ae5bc8f749,
	"Q5_K/50x768/M4": 0xfc8ecaf4171d7232,
	"Q5_K/50x768/M5": 0x29767f84d7940554,
	"Q5_K/50x768/M8": 0xe20c94642ae796b5,
	"Q5_K/50x768/M9": 0xe2edd1d1b3d56f96,
	"Q6_K/17x256/M1": 0x606d8b2c7508fac7,
	"Q6_K/17x256/M3": 0xedccf58569b99c27,
	"Q6_K/17x256/M4": 0xf077cd8cea1a241c,
	"Q6_K/17x256/M5": 0xbc78335ddcf120c,
	"Q6_K/17x256/M8": 0xe024074e2628112a,
	"Q6_K/17x256/M9": 0x4a95f74051507f13,
	"Q6_K/37x512/M1": 0x4fe055e4e7df6e11,
	"Q6_K/37x512/M3": 0xb99057aba96eae78,
	"Q6_K/37x512/M4": 0xd778a5f80a93fc87,
	"Q6_K/37x512/M5": 0x2db06e558a67216b,
	"Q6_K/37x512/M8": 0x25ccf2a66fcd0718,
	"Q6_K/37x512/M9": 0xe313d035ac27c2d9,
	"Q6_K/50x768/M1": 0xad25c8bcde665e5f,
	"Q6_K/50x768/M3": 0x2461b2b30a9ca2c9,
	"Q6_K/50x768/M4": 0x8ad6978910a5c2e6,
	"Q6_K/50x768/M5": 0xf1d004fbaefc0e78,
	"Q6_K/50x768/M8": 0xbe034c8e38b33961,
	"Q6_K/50x768/M9": 0x7edb8f084f517b04,
}

// kqGoldenOutputs multiplies fixed pseudo-random K-quant matrices (odd
// row counts, partial 16-row groups, 1–3 super-blocks) with 1–9 activation
// rows. Everything is built with operations that round alike on every
// architecture (integer PCG draws, uniform floats, one multiply each):
// NormFloat64's math.Exp is not used, as arm64 may fuse its pure-Go body.
func kqGoldenOutputs(t *testing.T) map[string][]float32 {
	out := map[string][]float32{}
	r := rand.New(rand.NewPCG(71, 72))
	for _, kq := range kquants {
		for _, sh := range []struct{ rows, cols int }{{17, 256}, {37, 512}, {50, 768}} {
			m, err := kq.prepare(kq.rand(r, sh.rows, sh.cols))
			if err != nil {
				t.Fatal(err)
			}
			for _, M := range []int{1, 3, 4, 5, 8, 9} {
				x := make([]float32, M*sh.cols)
				for i := range x {
					x[i] = float32(r.Float64()*4 - 2)
				}
				var in Input
				in.Reset(x, M, sh.cols)
				in.QuantizeRows(0, M)
				dst := make([]float32, M*sh.rows)
				m.MatMul(dst, sh.rows, &in, 0, sh.rows)
				out[fmt.Sprintf("%v/%dx%d/M%d", kq.f, sh.rows, sh.cols, M)] = dst
			}
		}
	}
	return out
}

// TestKQuantGolden: the packed K-quant kernels give the same output bits
// on every architecture and implementation (amd64 VNNI/AVX2, arm64 SDOT):
// a K-quant GGUF file computes the same logits on a Mac's CPU as on the
// x86 machine the fixtures were checked on. The hashes were recorded on
// amd64 VNNI; a kernel that reorders a float32 step fails here even when
// it stays within TestKQuantPacked's tolerance.
func TestKQuantGolden(t *testing.T) {
	ran := false
	for _, im := range testImpls() {
		im.set()
		if kqPacked() {
			ran = true
			t.Run(im.name, kqGoldenCheck)
		}
		im.restore()
	}
	if !ran {
		t.Skip("no packed K-quant kernels on this machine")
	}
}

func kqGoldenCheck(t *testing.T) {
	outs := kqGoldenOutputs(t)
	print := os.Getenv("MACPOOL_PRINT_GOLDEN") != ""
	for name, dst := range outs {
		h := fnv.New64a()
		var b [4]byte
		for _, v := range dst {
			u := math.Float32bits(v)
			b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
			h.Write(b[:])
		}
		got := h.Sum64()
		if print {
			fmt.Printf("\t%q: %#x,\n", name, got)
			continue
		}
		want, ok := kqGolden[name]
		if !ok {
			t.Errorf("%s: no recorded hash", name)
			continue
		}
		if got != want {
			t.Errorf("%s on %s: output hash %#x, recorded on amd64 VNNI %#x", name, Impl(), got, want)
		}
	}
	if len(outs) != len(kqGolden) && !print {
		t.Errorf("%d outputs, %d recorded hashes", len(outs), len(kqGolden))
	}
}
