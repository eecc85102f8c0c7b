//go:build linux

package emu

import (
	"encoding/binary"
	"math"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/macpool/macpool/metal/gpu"
)

// The tests below check what the emulator does to look like a GPU rather
// than a CPU: each fails if the corresponding behaviour is taken out.

const strictSrc = `
#include <metal_stdlib>
using namespace metal;
#ifdef __METAL_VERSION__
#define TG_MEM threadgroup
#define DEVICE_PTR(p) (p)
#else
#define TG_MEM static thread_local
#define DEVICE_PTR(p) ((decltype(p))emu_device_ptr((const void *)(p)))
#endif
kernel void sign(device int *out [[buffer(0)]], device const uchar *in [[buffer(1)]]) {
	char c = as_type<char>(in[0]);
	out[0] = int(c);
}
kernel void tg_unwritten(device uint *out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]]) {
	TG_MEM uint buf[64];
	out[lid] = buf[lid];
}
kernel void tg_big(device float *out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]]) {
	TG_MEM float a[4096];
	TG_MEM float b[4097];
	a[lid] = 1.0f;
	b[lid] = 2.0f;
	threadgroup_barrier(mem_flags::mem_threadgroup);
	out[lid] = a[lid] + b[lid];
}
kernel void tg_max(device float *out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]]) {
	TG_MEM float a[8192];
	a[lid] = 1.0f;
	threadgroup_barrier(mem_flags::mem_threadgroup);
	out[lid] = a[lid];
}
struct Ptr { device const float *p; };
kernel void follow(device float *out [[buffer(0)]], device const Ptr *table [[buffer(1)]]) {
	device const float *p = DEVICE_PTR(table[0].p);
	out[0] = p[1];
}
kernel void copy1(device float *out [[buffer(0)]], device const float *in [[buffer(1)]]) {
	out[0] = in[0] + 1.0f;
}
kernel void last_writer(device uint *out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]]) {
	TG_MEM uint slot[1];
	slot[0] = lid;
	threadgroup_barrier(mem_flags::mem_threadgroup);
	if (lid == 0) out[0] = slot[0];
}
`

func strictPipe(t *testing.T, d *Device, name string) gpu.Pipeline {
	t.Helper()
	lib, err := d.Compile(strictSrc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := lib.Pipeline(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func run1(t *testing.T, d *Device, p gpu.Pipeline, threads int, args ...gpu.Arg) error {
	t.Helper()
	cb := d.NewCommandBuffer()
	cb.Dispatch(p, [3]int{1, 1, 1}, [3]int{threads, 1, 1}, args...)
	cb.Commit()
	return cb.Wait()
}

// TestSignedChar: MSL's char is signed. The device's flags come after a
// -funsigned-char standing for arm64 Linux's default, so the test fails on
// any host if -fsigned-char is dropped.
func TestSignedChar(t *testing.T) {
	d := newTestDevice(t)
	d.flags = append([]string{"-funsigned-char"}, d.flags...)
	p := strictPipe(t, d, "sign")
	out, _ := d.NewBuffer(4)
	in, _ := d.NewBuffer(1)
	in.Bytes()[0] = 0xff
	if err := run1(t, d, p, 1, gpu.Arg{Buf: out}, gpu.Arg{Buf: in}); err != nil {
		t.Fatal(err)
	}
	if got := int32(binary.LittleEndian.Uint32(out.Bytes())); got != -1 {
		t.Fatalf("char(0xff) = %d, want -1", got)
	}
}

// TestThreadgroupMemoryPoisoned: threadgroup memory read before any write
// holds garbage (all ones: NaN as float), not zeros, in every threadgroup.
func TestThreadgroupMemoryPoisoned(t *testing.T) {
	d := newTestDevice(t)
	p := strictPipe(t, d, "tg_unwritten")
	for run := range 2 {
		out, _ := d.NewBuffer(4 * 64)
		if err := run1(t, d, p, 64, gpu.Arg{Buf: out}); err != nil {
			t.Fatal(err)
		}
		for i := range 64 {
			if got := binary.LittleEndian.Uint32(out.Bytes()[4*i:]); got != 0xffffffff {
				t.Fatalf("run %d: unwritten threadgroup word %d = %#x, want 0xffffffff", run, i, got)
			}
		}
	}
}

// TestThreadgroupMemoryLimit: more than 32 KiB of threadgroup memory fails
// the dispatch (Metal refuses the pipeline); exactly 32 KiB runs.
func TestThreadgroupMemoryLimit(t *testing.T) {
	d := newTestDevice(t)
	out, _ := d.NewBuffer(4 * 64)
	if err := run1(t, d, strictPipe(t, d, "tg_max"), 64, gpu.Arg{Buf: out}); err != nil {
		t.Fatalf("32 KiB: %v", err)
	}
	err := run1(t, d, strictPipe(t, d, "tg_big"), 64, gpu.Arg{Buf: out})
	if err == nil || !strings.Contains(err.Error(), "32772 bytes of threadgroup memory") {
		t.Fatalf("32772 bytes: got %v, want the 32 KiB error", err)
	}
}

// TestAsyncCompletion: a committed command buffer has not run before Wait:
// the host sees none of its writes, and it sees host writes made after
// Commit (the data races a GPU would have).
func TestAsyncCompletion(t *testing.T) {
	d := newTestDevice(t)
	p := strictPipe(t, d, "copy1")
	out, _ := d.NewBuffer(4)
	in, _ := d.NewBuffer(4)
	cb := d.NewCommandBuffer()
	cb.Dispatch(p, [3]int{1, 1, 1}, [3]int{1, 1, 1}, gpu.Arg{Buf: out}, gpu.Arg{Buf: in})
	cb.Commit()
	if got := f32s(out.Bytes())[0]; got != 0 {
		t.Fatalf("output before Wait = %v, want 0 (not run yet)", got)
	}
	f32s(in.Bytes())[0] = 5
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := f32s(out.Bytes())[0]; got != 6 {
		t.Fatalf("output after Wait = %v, want 6", got)
	}
}

// TestCommitOrder: waiting for a later command buffer runs the earlier ones
// first (one queue runs in commit order).
func TestCommitOrder(t *testing.T) {
	d := newTestDevice(t)
	p := strictPipe(t, d, "copy1")
	a, _ := d.NewBuffer(4)
	b, _ := d.NewBuffer(4)
	c1, c2 := d.NewCommandBuffer(), d.NewCommandBuffer()
	c1.Dispatch(p, [3]int{1, 1, 1}, [3]int{1, 1, 1}, gpu.Arg{Buf: b}, gpu.Arg{Buf: a}) // b = a+1 = 1
	c1.Commit()
	c2.Dispatch(p, [3]int{1, 1, 1}, [3]int{1, 1, 1}, gpu.Arg{Buf: a}, gpu.Arg{Buf: b}) // a = b+1 = 2
	c2.Commit()
	if err := c2.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := c1.Wait(); err != nil {
		t.Fatal(err)
	}
	if ga, gb := f32s(a.Bytes())[0], f32s(b.Bytes())[0]; ga != 2 || gb != 1 {
		t.Fatalf("a, b = %v, %v, want 2, 1", ga, gb)
	}
}

// TestResidency: a kernel following a device address into a buffer that is
// neither bound nor declared with Use fails its dispatch; with Use it reads.
func TestResidency(t *testing.T) {
	d := newTestDevice(t)
	p := strictPipe(t, d, "follow")
	target, _ := d.NewBuffer(8)
	f32s(target.Bytes())[1] = 42
	table, _ := d.NewBuffer(8)
	binary.LittleEndian.PutUint64(table.Bytes(), target.GPUAddress())
	out, _ := d.NewBuffer(4)
	err := run1(t, d, p, 1, gpu.Arg{Buf: out}, gpu.Arg{Buf: table})
	if err == nil || !strings.Contains(err.Error(), "not resident") {
		t.Fatalf("without Use: got %v, want a residency error", err)
	}
	cb := d.NewCommandBuffer()
	cb.Use(target)
	cb.Dispatch(p, [3]int{1, 1, 1}, [3]int{1, 1, 1}, gpu.Arg{Buf: out}, gpu.Arg{Buf: table})
	cb.Commit()
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := f32s(out.Bytes())[0]; got != 42 {
		t.Fatalf("with Use: read %v, want 42", got)
	}
}

// TestWrapBytesInPageOffset: wrapped bytes start at their offset within
// their page, as Metal's no-copy buffers over the enclosing pages do.
func TestWrapBytesInPageOffset(t *testing.T) {
	d := newTestDevice(t)
	page := os.Getpagesize()
	mem := make([]byte, 3*page)
	start := page - int(uintptr(unsafe.Pointer(&mem[0])))%page // page-aligned index
	const off = 100
	src := mem[start+off : start+off+8]
	binary.LittleEndian.PutUint32(src, math.Float32bits(7))
	w, err := d.WrapBytes(src)
	if err != nil {
		t.Fatal(err)
	}
	if w.Offset() != off {
		t.Fatalf("Offset() = %d, want %d", w.Offset(), off)
	}
	out, _ := d.NewBuffer(4)
	if err := run1(t, d, strictPipe(t, d, "copy1"), 1, gpu.Arg{Buf: out}, gpu.Arg{Buf: w, Off: w.Offset()}); err != nil {
		t.Fatal(err)
	}
	if got := f32s(out.Bytes())[0]; got != 8 {
		t.Fatalf("kernel read %v through the wrapped buffer at Offset(), want 8", got)
	}
}

// TestSeedsShuffleThreads: non-zero seeds run a threadgroup's threads in
// varying orders (the last writer of a shared slot changes).
func TestSeedsShuffleThreads(t *testing.T) {
	seen := map[uint32]bool{}
	for seed := uint64(1); seed <= 4; seed++ {
		d, err := New(Config{Seed: seed, CacheDir: os.Getenv("MACPOOL_EMU_CACHE")})
		if err != nil {
			t.Skip(err)
		}
		out, _ := d.NewBuffer(4)
		if err := run1(t, d, strictPipe(t, d, "last_writer"), 64, gpu.Arg{Buf: out}); err != nil {
			t.Fatal(err)
		}
		seen[binary.LittleEndian.Uint32(out.Bytes())] = true
	}
	if len(seen) < 2 || seen[63] && len(seen) == 1 {
		t.Fatalf("last writers over 4 seeds: %v, want several", seen)
	}
}
