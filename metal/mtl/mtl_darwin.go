//go:build darwin

package mtl

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"

	"github.com/macpool/macpool/metal/gpu"
)

// mtlSize is MTLSize.
type mtlSize struct{ W, H, D uint64 }

const (
	storageShared = 0 // MTLResourceStorageModeShared | MTLResourceCPUCacheModeDefaultCache
	statusError   = 5 // MTLCommandBufferStatusError
	utf8Encoding  = 4 // NSUTF8StringEncoding
)

var (
	initOnce sync.Once
	initErr  error

	createDevice func() objc.ID

	// Typed objc_msgSend variants, registered once (objc.Send re-registers
	// on every call).
	msgID       func(id objc.ID, sel objc.SEL) objc.ID
	msgU64      func(id objc.ID, sel objc.SEL) uint64
	msgPtr      func(id objc.ID, sel objc.SEL) unsafe.Pointer
	msgBool     func(id objc.ID, sel objc.SEL) bool
	msgVoid     func(id objc.ID, sel objc.SEL)
	msgIDID     func(id objc.ID, sel objc.SEL, a objc.ID) objc.ID
	msgVoidID   func(id objc.ID, sel objc.SEL, a objc.ID)
	msgVoidBool func(id objc.ID, sel objc.SEL, a bool)
	msgStr      func(id objc.ID, sel objc.SEL, s string) objc.ID
	msgNewBuf   func(id objc.ID, sel objc.SEL, length, options uint64) objc.ID
	msgNoCopy   func(id objc.ID, sel objc.SEL, ptr uintptr, length, options uint64, dealloc uintptr) objc.ID
	msgIDIDErr  func(id objc.ID, sel objc.SEL, a, b objc.ID, err *objc.ID) objc.ID
	msgIDErr    func(id objc.ID, sel objc.SEL, a objc.ID, err *objc.ID) objc.ID
	msgSetBuf   func(id objc.ID, sel objc.SEL, buf objc.ID, offset, index uint64)
	msgSetBytes func(id objc.ID, sel objc.SEL, p unsafe.Pointer, length, index uint64)
	msgDispatch func(id objc.ID, sel objc.SEL, groups, threads mtlSize)
	msgUse      func(id objc.ID, sel objc.SEL, res objc.ID, usage uint64)

	sel = map[string]objc.SEL{}
)

func s(name string) objc.SEL { return sel[name] }

func load() error {
	initOnce.Do(func() {
		if _, err := purego.Dlopen("/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics", purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
			initErr = fmt.Errorf("mtl: load CoreGraphics: %w", err)
			return
		}
		metal, err := purego.Dlopen("/System/Library/Frameworks/Metal.framework/Metal", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			initErr = fmt.Errorf("mtl: load Metal: %w", err)
			return
		}
		purego.RegisterLibFunc(&createDevice, metal, "MTLCreateSystemDefaultDevice")
		lib, err := purego.Dlopen("/usr/lib/libobjc.A.dylib", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			initErr = fmt.Errorf("mtl: load libobjc: %w", err)
			return
		}
		send, err := purego.Dlsym(lib, "objc_msgSend")
		if err != nil {
			initErr = fmt.Errorf("mtl: %w", err)
			return
		}
		for _, fn := range []any{&msgID, &msgU64, &msgPtr, &msgBool, &msgVoid, &msgIDID, &msgVoidID, &msgVoidBool,
			&msgStr, &msgNewBuf, &msgNoCopy, &msgIDIDErr, &msgIDErr, &msgSetBuf, &msgSetBytes, &msgDispatch, &msgUse} {
			purego.RegisterFunc(fn, send)
		}
		for _, n := range []string{"name", "UTF8String", "release", "retain", "new", "alloc", "drain",
			"initWithUTF8String:", "newCommandQueue", "newBufferWithLength:options:",
			"newBufferWithBytesNoCopy:length:options:deallocator:", "contents", "length",
			"newLibraryWithSource:options:error:", "setFastMathEnabled:", "newFunctionWithName:",
			"newComputePipelineStateWithFunction:error:", "maxTotalThreadsPerThreadgroup",
			"commandBuffer", "computeCommandEncoder", "setComputePipelineState:",
			"setBuffer:offset:atIndex:", "setBytes:length:atIndex:",
			"dispatchThreadgroups:threadsPerThreadgroup:", "endEncoding", "commit",
			"waitUntilCompleted", "status", "error", "localizedDescription",
			"recommendedMaxWorkingSetSize", "hasUnifiedMemory", "gpuAddress", "useResource:usage:"} {
			sel[n] = objc.RegisterName(n)
		}
	})
	return initErr
}

// withPool runs fn on one OS thread inside an autorelease pool, so
// autoreleased objects (command buffers, strings) are freed.
func withPool(fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pool := msgID(objc.ID(objc.GetClass("NSAutoreleasePool")), s("new"))
	defer msgVoid(pool, s("drain"))
	fn()
}

func nsString(str string) objc.ID { // +1: release when done
	return msgStr(msgID(objc.ID(objc.GetClass("NSString")), s("alloc")), s("initWithUTF8String:"), str)
}

func goString(ns objc.ID) string {
	if ns == 0 {
		return ""
	}
	p := msgPtr(ns, s("UTF8String"))
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}

func errString(e objc.ID) string {
	var out string
	withPool(func() { out = goString(msgID(e, s("localizedDescription"))) })
	return out
}

// Device is the system default Metal device.
type Device struct {
	dev, queue objc.ID
	once       sync.Once
}

var _ gpu.Device = (*Device)(nil)

// ErrNoDevice is returned by New when the system has no Metal device.
var ErrNoDevice = errors.New("mtl: no Metal device")

// New opens the system default Metal device and a command queue.
func New() (*Device, error) {
	if err := load(); err != nil {
		return nil, err
	}
	d := createDevice()
	if d == 0 {
		return nil, ErrNoDevice
	}
	q := msgID(d, s("newCommandQueue"))
	if q == 0 {
		return nil, errors.New("mtl: newCommandQueue failed")
	}
	return &Device{dev: d, queue: q}, nil
}

// Name implements gpu.Device.
func (d *Device) Name() string {
	var n string
	withPool(func() { n = goString(msgID(d.dev, s("name"))) })
	return n
}

// Close implements gpu.Device.
func (d *Device) Close() error {
	d.once.Do(func() {
		msgVoid(d.queue, s("release"))
		msgVoid(d.dev, s("release"))
	})
	return nil
}

// Buffer is an MTLBuffer in shared storage.
type Buffer struct {
	id     objc.ID
	bytes  []byte
	off    int
	keep   []byte // wrapped host memory, kept alive
	closed sync.Once
}

func (b *Buffer) Bytes() []byte { return b.bytes }
func (b *Buffer) Len() int      { return len(b.bytes) }
func (b *Buffer) Offset() int   { return b.off }

// GPUAddress implements gpu.Buffer (MTLBuffer.gpuAddress, macOS 13+).
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
	id := msgNewBuf(d.dev, s("newBufferWithLength:options:"), uint64(size), storageShared)
	if id == 0 {
		return nil, fmt.Errorf("mtl: newBufferWithLength %d failed", size)
	}
	p := msgPtr(id, s("contents"))
	return &Buffer{id: id, bytes: unsafe.Slice((*byte)(p), size)}, nil
}

// WrapBytes implements gpu.Device: the enclosing pages of b are wrapped
// without a copy (newBufferWithBytesNoCopy); if Metal refuses, b is copied.
func (d *Device) WrapBytes(b []byte) (gpu.Buffer, error) {
	if len(b) == 0 {
		return d.NewBuffer(1)
	}
	page := uintptr(os.Getpagesize())
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start := p &^ (page - 1)
	end := (p + uintptr(len(b)) + page - 1) &^ (page - 1)
	id := msgNoCopy(d.dev, s("newBufferWithBytesNoCopy:length:options:deallocator:"), start, uint64(end-start), storageShared, 0)
	if id != 0 {
		return &Buffer{id: id, bytes: b, off: int(p - start), keep: b}, nil
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
	lib   objc.ID
	mu    sync.Mutex
	pipes map[string]*Pipeline
}

// Pipeline is an MTLComputePipelineState.
type Pipeline struct {
	name  string
	state objc.ID
	max   int
}

func (p *Pipeline) Name() string    { return p.name }
func (p *Pipeline) MaxThreads() int { return p.max }

// Compile implements gpu.Device: newLibraryWithSource with fast math off
// (kernels are written for IEEE float32 behaviour, matching the CPU).
func (d *Device) Compile(src string) (gpu.Library, error) {
	var lib, nserr objc.ID
	var msg string
	withPool(func() {
		opts := msgID(objc.ID(objc.GetClass("MTLCompileOptions")), s("new"))
		msgVoidBool(opts, s("setFastMathEnabled:"), false)
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
	return &Library{dev: d, lib: lib, pipes: map[string]*Pipeline{}}, nil
}

// Pipeline implements gpu.Library.
func (l *Library) Pipeline(name string) (gpu.Pipeline, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.pipes[name]; p != nil {
		return p, nil
	}
	var fn, state, nserr objc.ID
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
	p := &Pipeline{name: name, state: state, max: int(msgU64(state, s("maxTotalThreadsPerThreadgroup")))}
	l.pipes[name] = p
	return p, nil
}

// CommandBuffer is an MTLCommandBuffer with one compute encoder.
type CommandBuffer struct {
	cb, enc   objc.ID
	committed bool
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
// (Metal copies them; at most 4 KiB, as the backend guarantees).
func (c *CommandBuffer) Dispatch(p gpu.Pipeline, groups, threads [3]int, args ...gpu.Arg) {
	if c.committed {
		panic("mtl: dispatch on a committed command buffer")
	}
	mp := p.(*Pipeline)
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
}

// Use implements gpu.CommandBuffer: useResource:usage:MTLResourceUsageRead.
func (c *CommandBuffer) Use(bufs ...gpu.Buffer) {
	for _, b := range bufs {
		msgUse(c.enc, s("useResource:usage:"), b.(*Buffer).id, 1)
	}
}

// Commit implements gpu.CommandBuffer.
func (c *CommandBuffer) Commit() {
	if c.committed {
		return
	}
	c.committed = true
	msgVoid(c.enc, s("endEncoding"))
	msgVoid(c.cb, s("commit"))
}

// Wait implements gpu.CommandBuffer.
func (c *CommandBuffer) Wait() error {
	if !c.committed {
		return errors.New("mtl: wait on a command buffer not committed")
	}
	msgVoid(c.cb, s("waitUntilCompleted"))
	var err error
	if msgU64(c.cb, s("status")) == statusError {
		err = fmt.Errorf("mtl: command buffer failed: %s", errString(msgID(c.cb, s("error"))))
	}
	msgVoid(c.enc, s("release"))
	msgVoid(c.cb, s("release"))
	c.enc, c.cb = 0, 0
	return err
}
