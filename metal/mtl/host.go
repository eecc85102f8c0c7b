//go:build darwin || linux

package mtl

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/macpool/macpool/metal/gpu"
)

// This file is the host side of the Metal backend, written once for the
// real Objective-C runtime (darwin: libobjc and the frameworks through
// purego, runtime_darwin.go) and for the fake one (Linux: metal/mtl/fake, a
// Go Objective-C runtime and Metal device over the emulator that checks
// every message against Apple's documented signatures and Metal's rules,
// runtime_linux.go). Only dlopen, dlsym and the binding of C functions
// differ between the two.

// Objective-C values as the C ABI passes them. Their Go types decide how a
// message is marshalled, so each stands for one type encoding: id '@',
// sel ':', cstr '*' (char *), block '@?' (an Objective-C block pointer).
type (
	id    uintptr
	sel   uintptr
	cstr  unsafe.Pointer
	block uintptr
)

// mtlSize is MTLSize.
type mtlSize struct{ W, H, D uint64 }

// Constants of Apple's Metal and Foundation headers.
const (
	storageShared      = 0       // MTLResourceStorageModeShared | MTLResourceCPUCacheModeDefaultCache
	statusError        = 5       // MTLCommandBufferStatusError
	usageRead          = 1       // MTLResourceUsageRead
	languageVersion3_0 = 3 << 16 // MTLLanguageVersion3_0 (macOS 13)
	mathModeSafe       = 0       // MTLMathModeSafe (macOS 15)
	mathFuncsPrecise   = 1       // MTLMathFloatingPointFunctionsPrecise (macOS 15)
	familyApple7       = 1007    // MTLGPUFamilyApple7: M1, the first Apple-silicon Mac GPU
	familyMetal3       = 5001    // MTLGPUFamilyMetal3: gpuAddress, pointers in buffers
	simdWidth          = 32      // the kernels' SIMD-group width
)

// Paths of the libraries the host code opens. Foundation is opened
// explicitly: with CGO_ENABLED=0 nothing links it, and NSAutoreleasePool
// and NSString live there (an unloaded class looks up as nil, and a message
// to nil silently does nothing). CoreGraphics makes
// MTLCreateSystemDefaultDevice return the GPU in a command-line process.
const (
	libobjcPath      = "/usr/lib/libobjc.A.dylib"
	foundationPath   = "/System/Library/Frameworks/Foundation.framework/Foundation"
	coreGraphicsPath = "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics"
	metalPath        = "/System/Library/Frameworks/Metal.framework/Metal"
)

var (
	initOnce sync.Once
	initErr  error

	createDevice func() id
	getClass     func(name string) id
	registerName func(name string) sel

	// Typed objc_msgSend variants, bound once. The Go signature of each is
	// the C signature of every selector sent through it.
	msgID        func(r id, s sel) id
	msgU64       func(r id, s sel) uint64
	msgPtr       func(r id, s sel) unsafe.Pointer
	msgCStr      func(r id, s sel) cstr
	msgBool      func(r id, s sel) bool
	msgVoid      func(r id, s sel)
	msgIDID      func(r id, s sel, a id) id
	msgVoidID    func(r id, s sel, a id)
	msgVoidBool  func(r id, s sel, a bool)
	msgVoidU64   func(r id, s sel, a uint64)
	msgVoidI64   func(r id, s sel, a int64)
	msgBoolI64   func(r id, s sel, a int64) bool
	msgBoolSel   func(r id, s sel, a sel) bool
	msgStr       func(r id, s sel, str string) id
	msgNewBuf    func(r id, s sel, length, options uint64) id
	msgNoCopy    func(r id, s sel, ptr uintptr, length, options uint64, dealloc block) id
	msgIDIDErr   func(r id, s sel, a, b id, err *id) id
	msgIDErr     func(r id, s sel, a id, err *id) id
	msgSetBuf    func(r id, s sel, buf id, offset, index uint64)
	msgSetBytes  func(r id, s sel, p unsafe.Pointer, length, index uint64)
	msgDispatch  func(r id, s sel, groups, threads mtlSize)
	msgUseResArr func(r id, s sel, res *id, count, usage uint64)

	clsPool, clsString, clsCompileOptions id

	sels = map[string]sel{}
)

func s(name string) sel { return sels[name] }

var selectorNames = []string{"name", "UTF8String", "release", "retain", "new", "alloc", "drain",
	"initWithUTF8String:", "newCommandQueue", "newBufferWithLength:options:",
	"newBufferWithBytesNoCopy:length:options:deallocator:", "contents", "length",
	"newLibraryWithSource:options:error:", "setFastMathEnabled:", "setLanguageVersion:",
	"setMathMode:", "setMathFloatingPointFunctions:", "respondsToSelector:", "supportsFamily:",
	"newFunctionWithName:", "newComputePipelineStateWithFunction:error:",
	"maxTotalThreadsPerThreadgroup", "threadExecutionWidth",
	"commandBuffer", "computeCommandEncoder", "setComputePipelineState:",
	"setBuffer:offset:atIndex:", "setBytes:length:atIndex:",
	"dispatchThreadgroups:threadsPerThreadgroup:", "endEncoding", "commit",
	"waitUntilCompleted", "status", "error", "localizedDescription",
	"recommendedMaxWorkingSetSize", "hasUnifiedMemory", "gpuAddress", "useResources:count:usage:"}

func load() error {
	initOnce.Do(func() { initErr = loadRuntime() })
	return initErr
}

func loadRuntime() error {
	objc, err := dlopen(libobjcPath)
	if err != nil {
		return fmt.Errorf("mtl: load libobjc: %w", err)
	}
	var metal uintptr
	for _, p := range []string{foundationPath, coreGraphicsPath, metalPath} {
		h, err := dlopen(p)
		if err != nil {
			return fmt.Errorf("mtl: load %s: %w", p, err)
		}
		if p == metalPath {
			metal = h
		}
	}
	for _, f := range []struct {
		fn   any
		lib  uintptr
		name string
	}{
		{&createDevice, metal, "MTLCreateSystemDefaultDevice"},
		{&getClass, objc, "objc_getClass"},
		{&registerName, objc, "sel_registerName"},
	} {
		addr, err := dlsym(f.lib, f.name)
		if err != nil {
			return fmt.Errorf("mtl: %s: %w", f.name, err)
		}
		bindFunc(f.fn, addr)
	}
	send, err := dlsym(objc, "objc_msgSend")
	if err != nil {
		return fmt.Errorf("mtl: objc_msgSend: %w", err)
	}
	for _, fn := range []any{&msgID, &msgU64, &msgPtr, &msgCStr, &msgBool, &msgVoid, &msgIDID, &msgVoidID,
		&msgVoidBool, &msgVoidU64, &msgVoidI64, &msgBoolI64, &msgBoolSel, &msgStr, &msgNewBuf, &msgNoCopy,
		&msgIDIDErr, &msgIDErr, &msgSetBuf, &msgSetBytes, &msgDispatch, &msgUseResArr} {
		bindFunc(fn, send)
	}
	for _, n := range selectorNames {
		sels[n] = registerName(n)
	}
	for _, c := range []struct {
		dst  *id
		name string
		in   string
	}{{&clsPool, "NSAutoreleasePool", "Foundation"}, {&clsString, "NSString", "Foundation"}, {&clsCompileOptions, "MTLCompileOptions", "Metal"}} {
		if *c.dst = getClass(c.name); *c.dst == 0 {
			return fmt.Errorf("mtl: Objective-C class %s not found (%s not loaded?)", c.name, c.in)
		}
	}
	return nil
}

// withPool runs fn on one OS thread inside an autorelease pool, so the
// objects Metal autoreleases (command buffers, encoders, strings and its
// own temporaries while encoding, committing and waiting) are freed when
// fn returns instead of piling up in a thread's pool that never drains.
func withPool(fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pool := msgID(clsPool, s("new"))
	defer msgVoid(pool, s("drain"))
	fn()
}

func nsString(str string) id { // +1: release when done
	return msgStr(msgID(clsString, s("alloc")), s("initWithUTF8String:"), str)
}

// goString copies an NSString (inside a pool: UTF8String's memory lives as
// long as the autorelease pool).
func goString(ns id) string {
	if ns == 0 {
		return ""
	}
	p := msgCStr(ns, s("UTF8String"))
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}

// Device is the system default Metal device.
type Device struct {
	dev, queue id
	name       string
	mu         sync.Mutex
	libs       []*Library // released at Close
	once       sync.Once
}

var _ gpu.Device = (*Device)(nil)

// ErrNoDevice is returned by New when the system has no Metal device.
var ErrNoDevice = errors.New("mtl: no Metal device")

// New opens the system default Metal device and a command queue. It refuses
// GPUs the kernels cannot run on: anything but an Apple-silicon GPU (GPU
// family Apple7 or newer: 32-wide SIMD-groups) with Metal 3 (device
// pointers stored in buffers).
func New() (*Device, error) {
	if err := load(); err != nil {
		return nil, err
	}
	dv := createDevice()
	if dv == 0 {
		return nil, ErrNoDevice
	}
	d := &Device{dev: dv}
	withPool(func() { d.name = goString(msgID(dv, s("name"))) })
	switch {
	case !msgBoolI64(dv, s("supportsFamily:"), familyApple7):
		msgVoid(dv, s("release"))
		return nil, fmt.Errorf("mtl: %s is not an Apple-silicon GPU (GPU family Apple7 or newer): the kernels need 32-wide SIMD-groups; use --backend cpu", d.name)
	case !msgBoolI64(dv, s("supportsFamily:"), familyMetal3):
		msgVoid(dv, s("release"))
		return nil, fmt.Errorf("mtl: %s does not support Metal 3 (GPU family Metal3): the MoE kernels read weights through device addresses stored in buffers", d.name)
	}
	d.queue = msgID(dv, s("newCommandQueue"))
	if d.queue == 0 {
		msgVoid(dv, s("release"))
		return nil, errors.New("mtl: newCommandQueue failed")
	}
	return d, nil
}

// Name implements gpu.Device.
func (d *Device) Name() string { return d.name }

// RecommendedMaxWorkingSet is MTLDevice.recommendedMaxWorkingSetSize: the
// bytes the GPU can use without hurting performance (metal.Backend's KV
// budget is what the weights leave of it).
func (d *Device) RecommendedMaxWorkingSet() uint64 {
	return msgU64(d.dev, s("recommendedMaxWorkingSetSize"))
}

// Close implements gpu.Device: it releases the pipelines and libraries
// compiled on the device, the queue and the device. Buffers are released
// by their owners.
func (d *Device) Close() error {
	d.once.Do(func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, l := range d.libs {
			l.release()
		}
		d.libs = nil
		msgVoid(d.queue, s("release"))
		msgVoid(d.dev, s("release"))
	})
	return nil
}

// Buffer is an MTLBuffer in shared storage.
type Buffer struct {
	id     id
	bytes  []byte
	off    int
	keep   []byte // wrapped host memory, kept alive
	closed sync.Once
}

func (b *Buffer) Bytes() []byte { return b.bytes }
func (b *Buffer) Len() int      { return len(b.bytes) }
func (b *Buffer) Offset() int   { return b.off }

// GPUAddress implements gpu.Buffer (MTLBuffer.gpuAddress, Metal 3).
func (b *Buffer) GPUAddress() uint64 { return msgU64(b.id, s("gpuAddress")) }

func (b *Buffer) Release() {
	b.closed.Do(func() {
		msgVoid(b.id, s("release"))
		b.bytes, b.keep = nil, nil
	})
}

// NewBuffer implements gpu.Device.
func (d *Device) NewBuffer(size int) (gpu.Buffer, error) {
	size = max(size, 1)
	bid := msgNewBuf(d.dev, s("newBufferWithLength:options:"), uint64(size), storageShared)
	if bid == 0 {
		return nil, fmt.Errorf("mtl: newBufferWithLength %d failed", size)
	}
	p := msgPtr(bid, s("contents"))
	return &Buffer{id: bid, bytes: unsafe.Slice((*byte)(p), size)}, nil
}

// WrapBytes implements gpu.Device: the enclosing pages of b are wrapped
// without a copy (newBufferWithBytesNoCopy wants a page-aligned pointer and
// length); if Metal refuses, b is copied.
func (d *Device) WrapBytes(b []byte) (gpu.Buffer, error) {
	if len(b) == 0 {
		return d.NewBuffer(1)
	}
	// The page start is kept as an integer: it may lie before b's Go
	// object, where no Go pointer may point.
	page := uintptr(os.Getpagesize())
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	off := p & (page - 1)
	start := p - off
	length := (off + uintptr(len(b)) + page - 1) &^ (page - 1)
	bid := msgNoCopy(d.dev, s("newBufferWithBytesNoCopy:length:options:deallocator:"), start, uint64(length), storageShared, 0)
	if bid != 0 {
		return &Buffer{id: bid, bytes: b, off: int(off), keep: b}, nil
	}
	nb, err := d.NewBuffer(len(b))
	if err != nil {
		return nil, err
	}
	copy(nb.Bytes(), b)
	return nb, nil
}

// Library is a compiled MTLLibrary with its pipelines.
type Library struct {
	dev   *Device
	lib   id
	mu    sync.Mutex
	pipes map[string]*Pipeline
}

func (l *Library) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.pipes {
		msgVoid(p.state, s("release"))
	}
	l.pipes = nil
	msgVoid(l.lib, s("release"))
}

// Pipeline is an MTLComputePipelineState.
type Pipeline struct {
	name  string
	state id
	max   int
}

func (p *Pipeline) Name() string    { return p.name }
func (p *Pipeline) MaxThreads() int { return p.max }

// Compile implements gpu.Device: newLibraryWithSource with the language
// version pinned to MSL 3.0 (the compiler's default moves with macOS) and
// IEEE float32 semantics (the kernels are checked against the CPU):
// mathMode safe with precise math functions where macOS has them (15+),
// else fastMathEnabled off (deprecated since macOS 15).
func (d *Device) Compile(src string) (gpu.Library, error) {
	var lib, nserr id
	var msg string
	withPool(func() {
		opts := msgID(clsCompileOptions, s("new"))
		msgVoidU64(opts, s("setLanguageVersion:"), languageVersion3_0)
		if msgBoolSel(opts, s("respondsToSelector:"), s("setMathMode:")) {
			msgVoidI64(opts, s("setMathMode:"), mathModeSafe)
			msgVoidI64(opts, s("setMathFloatingPointFunctions:"), mathFuncsPrecise)
		} else {
			msgVoidBool(opts, s("setFastMathEnabled:"), false)
		}
		ns := nsString(src)
		lib = msgIDIDErr(d.dev, s("newLibraryWithSource:options:error:"), ns, opts, &nserr)
		msgVoid(ns, s("release"))
		msgVoid(opts, s("release"))
		if lib == 0 && nserr != 0 {
			msg = goString(msgID(nserr, s("localizedDescription")))
		}
	})
	if lib == 0 {
		return nil, fmt.Errorf("mtl: compile library: %s", msg)
	}
	l := &Library{dev: d, lib: lib, pipes: map[string]*Pipeline{}}
	d.mu.Lock()
	d.libs = append(d.libs, l)
	d.mu.Unlock()
	return l, nil
}

// Pipeline implements gpu.Library. A pipeline whose SIMD-groups are not 32
// wide is refused: the kernels' collectives and lane arithmetic assume 32.
func (l *Library) Pipeline(name string) (gpu.Pipeline, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.pipes[name]; p != nil {
		return p, nil
	}
	var fn, state, nserr id
	var msg string
	withPool(func() {
		ns := nsString(name)
		fn = msgIDID(l.lib, s("newFunctionWithName:"), ns)
		msgVoid(ns, s("release"))
		if fn == 0 {
			return
		}
		state = msgIDErr(l.dev.dev, s("newComputePipelineStateWithFunction:error:"), fn, &nserr)
		msgVoid(fn, s("release"))
		if state == 0 && nserr != 0 {
			msg = goString(msgID(nserr, s("localizedDescription")))
		}
	})
	if fn == 0 {
		return nil, fmt.Errorf("mtl: kernel %q not in library", name)
	}
	if state == 0 {
		return nil, fmt.Errorf("mtl: pipeline %s: %s", name, msg)
	}
	if w := msgU64(state, s("threadExecutionWidth")); w != simdWidth {
		msgVoid(state, s("release"))
		return nil, fmt.Errorf("mtl: pipeline %s: threadExecutionWidth %d, the kernels need %d-wide SIMD-groups (an Apple-silicon GPU)", name, w, simdWidth)
	}
	p := &Pipeline{name: name, state: state, max: int(msgU64(state, s("maxTotalThreadsPerThreadgroup")))}
	l.pipes[name] = p
	return p, nil
}

// CommandBuffer is an MTLCommandBuffer with one compute encoder.
type CommandBuffer struct {
	cb, enc   id
	committed bool
	res       []id // reused by Use
}

// NewCommandBuffer implements gpu.Device.
func (d *Device) NewCommandBuffer() gpu.CommandBuffer {
	c := &CommandBuffer{}
	withPool(func() {
		c.cb = msgID(msgID(d.queue, s("commandBuffer")), s("retain"))
		c.enc = msgID(msgID(c.cb, s("computeCommandEncoder")), s("retain"))
	})
	return c
}

// Dispatch implements gpu.CommandBuffer. Inline bytes go through setBytes
// (Metal copies them; Apple documents it for data smaller than 4 KiB, as
// the backend guarantees).
func (c *CommandBuffer) Dispatch(p gpu.Pipeline, groups, threads [3]int, args ...gpu.Arg) {
	if c.committed {
		panic("mtl: dispatch on a committed command buffer")
	}
	mp := p.(*Pipeline)
	withPool(func() {
		msgVoidID(c.enc, s("setComputePipelineState:"), mp.state)
		for i, a := range args {
			switch {
			case a.Bytes != nil:
				msgSetBytes(c.enc, s("setBytes:length:atIndex:"), unsafe.Pointer(unsafe.SliceData(a.Bytes)), uint64(len(a.Bytes)), uint64(i))
				runtime.KeepAlive(a.Bytes)
			case a.Buf != nil:
				b := a.Buf.(*Buffer)
				msgSetBuf(c.enc, s("setBuffer:offset:atIndex:"), b.id, uint64(a.Off), uint64(i))
			}
		}
		msgDispatch(c.enc, s("dispatchThreadgroups:threadsPerThreadgroup:"),
			mtlSize{uint64(groups[0]), uint64(groups[1]), uint64(groups[2])},
			mtlSize{uint64(threads[0]), uint64(threads[1]), uint64(threads[2])})
	})
}

// Use implements gpu.CommandBuffer: one useResources:count:usage: (read)
// for all of bufs, however many experts a pointer table reaches.
func (c *CommandBuffer) Use(bufs ...gpu.Buffer) {
	if len(bufs) == 0 {
		return
	}
	c.res = c.res[:0]
	for _, b := range bufs {
		c.res = append(c.res, b.(*Buffer).id)
	}
	withPool(func() {
		msgUseResArr(c.enc, s("useResources:count:usage:"), &c.res[0], uint64(len(c.res)), usageRead)
	})
	runtime.KeepAlive(c.res)
}

// Commit implements gpu.CommandBuffer.
func (c *CommandBuffer) Commit() {
	if c.committed {
		return
	}
	c.committed = true
	withPool(func() {
		msgVoid(c.enc, s("endEncoding"))
		msgVoid(c.cb, s("commit"))
	})
}

// Wait implements gpu.CommandBuffer.
func (c *CommandBuffer) Wait() error {
	if !c.committed {
		return errors.New("mtl: wait on a command buffer not committed")
	}
	if c.cb == 0 {
		return nil
	}
	var err error
	withPool(func() {
		msgVoid(c.cb, s("waitUntilCompleted"))
		if msgU64(c.cb, s("status")) == statusError {
			err = fmt.Errorf("mtl: command buffer failed: %s", goString(msgID(msgID(c.cb, s("error")), s("localizedDescription"))))
		}
		msgVoid(c.enc, s("release"))
		msgVoid(c.cb, s("release"))
	})
	c.enc, c.cb = 0, 0
	return err
}
