//go:build linux

package emu

import (
	"encoding/binary"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/macpool/macpool/metal/gpu"
	"github.com/macpool/macpool/metal/kernels"
)

// NewTestDevice returns an emulated device, skipping the test only when no
// clang++ is installed and CI is unset.
func newTestDevice(t testing.TB) *Device {
	t.Helper()
	d, err := New(Config{CacheDir: os.Getenv("MACPOOL_EMU_CACHE")})
	if err != nil {
		if err == ErrNoCompiler && os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	return d
}

const semanticsSrc = `
#include <metal_stdlib>
using namespace metal;
#ifndef METAL_EMULATED
#define TG_MEM threadgroup
#else
#define TG_MEM static thread_local
#endif
// Each threadgroup: reverse its values through threadgroup memory (barrier),
// then per SIMD-group sum, max, broadcast of lane 3 and shuffle_down by 1.
kernel void probe(device float *out [[buffer(0)]],
                  device const float *in [[buffer(1)]],
                  constant uint &n [[buffer(2)]],
                  uint gid [[thread_position_in_grid]],
                  uint lid [[thread_index_in_threadgroup]],
                  uint3 tpg [[threads_per_threadgroup]],
                  uint lane [[thread_index_in_simdgroup]]) {
	TG_MEM float buf[256];
	buf[lid] = in[gid];
	threadgroup_barrier(mem_flags::mem_threadgroup);
	float r = buf[tpg.x - 1 - lid];
	threadgroup_barrier(mem_flags::mem_threadgroup);
	float s = simd_sum(r);
	float m = simd_max(r);
	float b = simd_broadcast(r, 3);
	float d = simd_shuffle_down(r, 1);
	out[4 * gid + 0] = s;
	out[4 * gid + 1] = m;
	out[4 * gid + 2] = b;
	out[4 * gid + 3] = d;
}
`

func f32s(b []byte) []float32 {
	return unsafeF32(b)
}

func TestThreadgroupSemantics(t *testing.T) {
	d := newTestDevice(t)
	lib, err := d.Compile(semanticsSrc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := lib.Pipeline("probe")
	if err != nil {
		t.Fatal(err)
	}
	const tg, groups = 96, 3
	n := tg * groups
	in, _ := d.NewBuffer(4 * n)
	out, _ := d.NewBuffer(16 * n)
	inV := f32s(in.Bytes())
	for i := range inV {
		inV[i] = float32((i*37)%101) - 50
	}
	var nb [4]byte
	binary.LittleEndian.PutUint32(nb[:], uint32(n))
	cb := d.NewCommandBuffer()
	cb.Dispatch(p, [3]int{groups, 1, 1}, [3]int{tg, 1, 1}, gpu.Arg{Buf: out}, gpu.Arg{Buf: in}, gpu.Arg{Bytes: nb[:]})
	cb.Commit()
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
	got := f32s(out.Bytes())
	for g := 0; g < groups; g++ {
		r := make([]float32, tg)
		for l := 0; l < tg; l++ {
			r[l] = inV[g*tg+tg-1-l]
		}
		for sg := 0; sg < tg/32; sg++ {
			var s float32
			m := float32(math.Inf(-1))
			for l := 0; l < 32; l++ {
				s += r[sg*32+l]
				m = max(m, r[sg*32+l])
			}
			for l := 0; l < 32; l++ {
				i := g*tg + sg*32 + l
				want := []float32{s, m, r[sg*32+3], r[sg*32+l]}
				if l < 31 {
					want[3] = r[sg*32+l+1]
				}
				for k := range 4 {
					if got[4*i+k] != want[k] {
						t.Fatalf("thread %d value %d: got %v, want %v", i, k, got[4*i+k], want[k])
					}
				}
			}
		}
	}
}

func TestCompileKernels(t *testing.T) {
	d := newTestDevice(t)
	src, err := kernels.Source()
	if err != nil {
		t.Fatal(err)
	}
	lib, err := d.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lib.Pipeline("matmul"); err != nil {
		t.Fatal(err)
	}
	if _, err := lib.Pipeline("nope"); err == nil {
		t.Fatal("Pipeline(nope): no error")
	}
}

const deadlockSrc = `
#include <metal_stdlib>
using namespace metal;
kernel void bad(device float *out [[buffer(0)]],
                uint lid [[thread_index_in_threadgroup]]) {
	if (lid < 40) {
		threadgroup_barrier(mem_flags::mem_threadgroup); // not reached by threads 40..63
	} else {
		out[lid] = simd_sum(1.0f);                        // lanes 40..63 of SIMD-group 1 only
	}
}
`

// TestDeadlockIsAnError: a barrier that not every thread reaches hangs a real
// GPU; the emulator reports it.
func TestDeadlockIsAnError(t *testing.T) {
	d := newTestDevice(t)
	lib, err := d.Compile(deadlockSrc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := lib.Pipeline("bad")
	if err != nil {
		t.Fatal(err)
	}
	out, _ := d.NewBuffer(4 * 64)
	cb := d.NewCommandBuffer()
	cb.Dispatch(p, [3]int{2, 1, 1}, [3]int{64, 1, 1}, gpu.Arg{Buf: out})
	cb.Commit()
	if err := cb.Wait(); err == nil || !strings.Contains(err.Error(), "deadlocked") {
		t.Fatalf("Wait() = %v, want a deadlock error", err)
	}
}
