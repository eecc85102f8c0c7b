package mtl

import (
	"encoding/binary"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/macpool/macpool/metal/emu"
	"github.com/macpool/macpool/metal/gpu"
	"github.com/macpool/macpool/metal/mtl/fake"
)

// These tests run the host code against the fake runtime configured as
// different Macs. Each starts a fresh runtime, as a new process would.

func restart(t *testing.T, edit func(*fake.Config)) {
	t.Helper()
	if _, err := emu.FindCompiler(); err != nil {
		if os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	cfg := fake.DefaultConfig()
	cfg.Emu.Workers = 1
	if edit != nil {
		edit(&cfg)
	}
	if err := fake.Reset(cfg); err != nil {
		t.Fatal(err)
	}
	initOnce, initErr, sels = sync.Once{}, nil, map[string]sel{}
}

func noViolations(t *testing.T) {
	t.Helper()
	if s := fake.Snapshot(); s.Violations != 0 {
		t.Fatalf("%s: %v", s, s.First)
	}
}

const probeSrc = `
#include <metal_stdlib>
using namespace metal;
#ifdef __METAL_VERSION__
#define DEVICE_PTR(p) (p)
#else
#define DEVICE_PTR(p) ((decltype(p))emu_device_ptr((const void *)(p)))
#endif
struct P { uint n; float add; };
kernel void addk(device float *y [[buffer(0)]], device const float *x [[buffer(1)]],
                 constant P &p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
	if (i < p.n) y[i] = x[i] + p.add;
}
kernel void follow(device float *y [[buffer(0)]], device const ulong *table [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) {
	device const float *p = DEVICE_PTR((device const float *)table[i]);
	y[i] = p[0];
}
`

func compileProbe(t *testing.T, d *Device) gpu.Library {
	t.Helper()
	lib, err := d.Compile(probeSrc)
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

// TestHostLifecycle drives every path of the host code once (buffers, a
// wrapped slice, compile, pipeline, dispatch with inline and buffer
// arguments, Use, commit, wait, release, close): the result is right, no
// rule is broken, and nothing is left alive (balanced retain/release).
func TestHostLifecycle(t *testing.T) {
	restart(t, nil)
	d, err := New()
	if err != nil {
		t.Fatal(err)
	}
	lib := compileProbe(t, d)
	p, err := lib.Pipeline("addk")
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	x, _ := d.NewBuffer(4 * n)
	y, _ := d.NewBuffer(4 * n)
	mem := make([]byte, 3*os.Getpagesize())
	w, err := d.WrapBytes(mem[100 : 100+4*n])
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		binary.LittleEndian.PutUint32(x.Bytes()[4*i:], 0x3f800000) // 1.0
	}
	params := make([]byte, 8)
	binary.LittleEndian.PutUint32(params, n)
	binary.LittleEndian.PutUint32(params[4:], 0x40000000) // 2.0
	cb := d.NewCommandBuffer()
	cb.Use(x)
	cb.Dispatch(p, [3]int{4, 1, 1}, [3]int{32, 1, 1}, gpu.Arg{Buf: y}, gpu.Arg{Buf: x}, gpu.Arg{Bytes: params})
	cb.Dispatch(p, [3]int{4, 1, 1}, [3]int{32, 1, 1}, gpu.Arg{Buf: w, Off: w.Offset()}, gpu.Arg{Buf: y}, gpu.Arg{Bytes: params})
	if got := binary.LittleEndian.Uint32(y.Bytes()); got != 0 {
		t.Fatalf("y[0] bits %#x before commit, want 0", got)
	}
	cb.Commit()
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(mem[100+4*(n-1):]); got != 0x40a00000 { // 5.0
		t.Fatalf("w[n-1] bits %#x, want 5.0", got)
	}
	for _, b := range []gpu.Buffer{x, y, w} {
		b.Release()
	}
	d.Close()
	noViolations(t)
	if live := fake.Live(); len(live) != 0 {
		t.Fatalf("objects alive after Close: %v", live)
	}
}

// TestFoundationLoaded: NSAutoreleasePool and NSString come from
// Foundation, which nothing loads implicitly without cgo.
func TestFoundationLoaded(t *testing.T) {
	restart(t, nil)
	d, err := New()
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	noViolations(t)
}

// TestMissingClassIsAnError: a class lookup returning nil stops New with
// the class named, instead of turning later messages into no-ops.
func TestMissingClassIsAnError(t *testing.T) {
	for _, c := range []string{"NSAutoreleasePool", "NSString", "MTLCompileOptions"} {
		t.Run(c, func(t *testing.T) {
			restart(t, func(cfg *fake.Config) { cfg.Hidden = []string{c} })
			_, err := New()
			if err == nil || !strings.Contains(err.Error(), "class "+c+" not found") {
				t.Fatalf("New() = %v, want class %s not found", err, c)
			}
		})
	}
	t.Run("no Foundation", func(t *testing.T) {
		restart(t, func(cfg *fake.Config) { cfg.Missing = []string{foundationPath} })
		if _, err := New(); err == nil || !strings.Contains(err.Error(), "Foundation") {
			t.Fatalf("New() = %v, want an error naming Foundation", err)
		}
	})
}

// TestCompileOptionsPinned: the language version and math mode are set on
// every macOS: mathMode where it exists (15+), fastMathEnabled before (it
// is deprecated from 15 and mathMode is unknown on 14).
func TestCompileOptionsPinned(t *testing.T) {
	for _, v := range []int{14, 15, 26} {
		restart(t, func(cfg *fake.Config) { cfg.MacOS = v })
		d, err := New()
		if err != nil {
			t.Fatal(err)
		}
		compileProbe(t, d)
		d.Close()
		if s := fake.Snapshot(); s.Violations != 0 {
			t.Fatalf("macOS %d: %s: %v", v, s, s.First)
		}
	}
}

// TestRefusesUnsupportedGPUs: a GPU that is not Apple silicon (an Intel
// Mac's), one without Metal 3, or pipelines with 64-wide SIMD-groups are
// refused with an error saying why.
func TestRefusesUnsupportedGPUs(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*fake.Config)
		want string
	}{
		{"AMD", func(c *fake.Config) { c.AppleFamily, c.Name = 0, "AMD Radeon Pro 5500M" }, "not an Apple-silicon GPU"},
		{"no Metal 3", func(c *fake.Config) { c.Metal3 = false }, "Metal 3"},
		{"SIMD 64", func(c *fake.Config) { c.SIMDWidth = 64 }, "threadExecutionWidth 64"},
	} {
		t.Run(c.name, func(t *testing.T) {
			restart(t, c.edit)
			d, err := New()
			if err == nil {
				_, err = compileProbe(t, d).Pipeline("addk")
				d.Close()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			noViolations(t)
		})
	}
}

// TestUseIsOneMessage: making many buffers resident is one
// useResources:count:usage:, not one message per buffer (a 128-expert MoE
// layer reaches ~129 buffers per dispatch).
func TestUseIsOneMessage(t *testing.T) {
	restart(t, nil)
	d, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var bufs []gpu.Buffer
	for range 129 {
		b, _ := d.NewBuffer(16)
		bufs = append(bufs, b)
	}
	cb := d.NewCommandBuffer()
	before := fake.Snapshot().Messages
	cb.Use(bufs...)
	if n := fake.Snapshot().Messages - before; n > 3 { // pool new, useResources, drain
		t.Fatalf("Use of 129 buffers sent %d messages, want 3", n)
	}
	cb.Commit()
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, b := range bufs {
		b.Release()
	}
	noViolations(t)
}

// TestFakeCatches: the fake reports what a Mac's validation layer and
// runtime would: setBytes of 4 KiB, a missing argument, a threadgroup
// beyond the pipeline's maximum, an empty grid, encoding after commit's
// endEncoding, a device pointer into a buffer not made resident.
func TestFakeCatches(t *testing.T) {
	small := make([]byte, 8)
	binary.LittleEndian.PutUint32(small, 4)
	for _, c := range []struct {
		name string
		run  func(d *Device, lib gpu.Library, cb gpu.CommandBuffer, x gpu.Buffer) error
		want string
	}{
		{"setBytes 4096", func(d *Device, lib gpu.Library, cb gpu.CommandBuffer, x gpu.Buffer) error {
			p, _ := lib.Pipeline("addk")
			cb.Dispatch(p, [3]int{1, 1, 1}, [3]int{32, 1, 1}, gpu.Arg{Buf: x}, gpu.Arg{Buf: x}, gpu.Arg{Bytes: make([]byte, 4096)})
			return nil
		}, "smaller than 4 KB"},
		{"unbound", func(d *Device, lib gpu.Library, cb gpu.CommandBuffer, x gpu.Buffer) error {
			p, _ := lib.Pipeline("addk")
			cb.Dispatch(p, [3]int{1, 1, 1}, [3]int{32, 1, 1}, gpu.Arg{Buf: x}, gpu.Arg{Buf: x})
			return nil
		}, "argument 2 not bound"},
		{"short constant", func(d *Device, lib gpu.Library, cb gpu.CommandBuffer, x gpu.Buffer) error {
			p, _ := lib.Pipeline("addk")
			cb.Dispatch(p, [3]int{1, 1, 1}, [3]int{32, 1, 1}, gpu.Arg{Buf: x}, gpu.Arg{Buf: x}, gpu.Arg{Bytes: small[:4]})
			return nil
		}, "4 inline bytes, the kernel reads 8"},
		{"threads", func(d *Device, lib gpu.Library, cb gpu.CommandBuffer, x gpu.Buffer) error {
			p, _ := lib.Pipeline("addk")
			cb.Dispatch(p, [3]int{1, 1, 1}, [3]int{2048, 1, 1}, gpu.Arg{Buf: x}, gpu.Arg{Buf: x}, gpu.Arg{Bytes: small})
			return nil
		}, "the pipeline allows 1..1024"},
		{"empty grid", func(d *Device, lib gpu.Library, cb gpu.CommandBuffer, x gpu.Buffer) error {
			p, _ := lib.Pipeline("addk")
			cb.Dispatch(p, [3]int{0, 1, 1}, [3]int{32, 1, 1}, gpu.Arg{Buf: x}, gpu.Arg{Buf: x}, gpu.Arg{Bytes: small})
			return nil
		}, "empty grid"},
		{"not resident", func(d *Device, lib gpu.Library, cb gpu.CommandBuffer, x gpu.Buffer) error {
			p, _ := lib.Pipeline("follow")
			target, _ := d.NewBuffer(16)
			table, _ := d.NewBuffer(8)
			binary.LittleEndian.PutUint64(table.Bytes(), target.GPUAddress())
			cb.Dispatch(p, [3]int{1, 1, 1}, [3]int{1, 1, 1}, gpu.Arg{Buf: x}, gpu.Arg{Buf: table})
			cb.Commit()
			return cb.Wait()
		}, "not resident"},
	} {
		t.Run(c.name, func(t *testing.T) {
			restart(t, nil)
			d, err := New()
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			lib := compileProbe(t, d)
			x, _ := d.NewBuffer(4096)
			cb := d.NewCommandBuffer()
			err = c.run(d, lib, cb, x)
			cb.Commit()
			if werr := cb.Wait(); err == nil {
				err = werr
			}
			s := fake.Snapshot()
			msg := strings.Join(s.First, "; ")
			if err != nil {
				msg += "; " + err.Error()
			}
			if !strings.Contains(msg, c.want) {
				t.Fatalf("got %q, want %q", msg, c.want)
			}
		})
	}
}
