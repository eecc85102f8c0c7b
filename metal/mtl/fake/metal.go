//go:build linux

package fake

import (
	"os"
	"unsafe"

	"github.com/macpool/macpool/metal/emu"
	"github.com/macpool/macpool/metal/gpu"
)

// Metal's limits the validation layer enforces.
const (
	maxInlineBytes = 4096 // setBytes: "data smaller than 4 KB"
	maxBufferIndex = 31   // buffer argument table entries per encoder
)

// MTLCommandBufferStatus values.
const (
	statusNotEnqueued = 0
	statusCommitted   = 2
	statusCompleted   = 4
	statusError       = 5
)

type device struct {
	cfg Config
	ed  *emu.Device
}

type options struct {
	langSet, mathSet, fastSet bool
}

type library struct {
	dev *device
	lib gpu.Library
}

type function struct {
	lib  *library
	name string
}

type pipeline struct {
	p          gpu.Pipeline
	max, width int
}

type buffer struct {
	eb     gpu.Buffer
	length int
	base   unsafe.Pointer // contents of a new buffer (emulator memory)
	raw    uintptr        // the host pages of a no-copy buffer
}

func (b *buffer) free() { b.eb.Release() }

type commandBuffer struct {
	dev     *device
	ecb     gpu.CommandBuffer
	status  uint64
	enc     *object // the open encoder, if any
	encoded bool    // an encoder was made
	held    []*object
	err     *object
	waitErr error
}

type binding struct {
	buf   *object
	off   int
	bytes []byte
}

type encoder struct {
	cb    *object
	ended bool
	pipe  *object
	binds [maxBufferIndex]binding
}

// createDevice is MTLCreateSystemDefaultDevice: nil unless Metal and
// CoreGraphics are loaded (a command-line tool sees no GPU otherwise).
func createDevice() uintptr {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if !rt.loaded[metalFW] || !rt.loaded[coreGraphics] {
		return 0
	}
	ed, err := emu.New(rt.cfg.Emu)
	if err != nil {
		rt.violation("MTLCreateSystemDefaultDevice: emulator: %v", err)
		return 0
	}
	return rt.newObject(mtlDevice, &device{cfg: rt.cfg, ed: ed}).id
}

func dispatchMethod(c *call) any {
	if v, ok := nsObjectMethod(c); ok {
		return v
	}
	switch impl := c.self.impl.(type) {
	case *device:
		return deviceMethod(c, impl)
	case *options:
		switch c.sel {
		case "setLanguageVersion:":
			if v := c.u64(0); v < 3<<16 {
				c.violation("language version %#x: the host code needs MSL 3.0 or newer", v)
			}
			impl.langSet = true
		case "setMathMode:", "setMathFloatingPointFunctions:":
			impl.mathSet = true
		case "setFastMathEnabled:":
			impl.fastSet = true
		}
	case *library:
		if c.sel == "newFunctionWithName:" {
			s := c.obj(0, nsString, false)
			if s == nil {
				return nil
			}
			name := cString(s)
			if _, err := impl.lib.Pipeline(name); err != nil {
				return nil
			}
			return c.r.newObject(mtlFunc, &function{lib: impl, name: name})
		}
	case *pipeline:
		switch c.sel {
		case "maxTotalThreadsPerThreadgroup":
			return uint64(impl.max)
		case "threadExecutionWidth":
			return uint64(impl.width)
		}
	case *buffer:
		switch c.sel {
		case "contents":
			if impl.raw != 0 {
				return *(*unsafe.Pointer)(unsafe.Pointer(&impl.raw)) // the caller's own pages
			}
			return impl.base
		case "length":
			return uint64(impl.length)
		case "gpuAddress":
			return impl.eb.GPUAddress()
		}
	case *queueImpl:
		if c.sel == "commandBuffer" {
			return c.r.newObject(mtlCB, &commandBuffer{dev: impl.dev, ecb: impl.dev.ed.NewCommandBuffer()})
		}
	case *commandBuffer:
		return commandBufferMethod(c, impl)
	case *encoder:
		encoderMethod(c, impl)
	}
	return nil
}

type queueImpl struct{ dev *device }

func cString(s *object) string {
	b := s.impl.(*nsStr).b
	return string(b[:len(b)-1])
}

func setError(c *call, errp unsafe.Pointer, msg string) {
	if errp == nil {
		return
	}
	e := c.r.newObject(nsError, &nsErr{msg: msg})
	c.r.autorelease(e, c.tid, "NSError")
	*(*uintptr)(errp) = e.id
}

func deviceMethod(c *call, d *device) any {
	r := c.r
	switch c.sel {
	case "name":
		return r.newString(d.cfg.Name)
	case "newCommandQueue":
		return r.newObject(mtlQueue, &queueImpl{dev: d})
	case "recommendedMaxWorkingSetSize":
		return d.cfg.WorkingSet
	case "hasUnifiedMemory":
		return true
	case "supportsFamily:":
		f := c.i64(0)
		switch {
		case f >= 1001 && f <= 1009: // MTLGPUFamilyApple1..9
			return d.cfg.AppleFamily > 0 && f <= 1000+int64(d.cfg.AppleFamily)
		case f == 5001: // MTLGPUFamilyMetal3
			return d.cfg.Metal3
		case f == 2002 || f >= 3001 && f <= 3003: // Mac2, Common1-3
			return true
		}
		return false
	case "newBufferWithLength:options:":
		n := int(c.u64(0))
		if n <= 0 {
			c.violation("length %d", n)
			return nil
		}
		eb, err := d.ed.NewBuffer(n)
		if err != nil {
			return nil
		}
		return r.newObject(mtlBuffer, &buffer{eb: eb, length: n, base: unsafe.Pointer(unsafe.SliceData(eb.Bytes()))})
	case "newBufferWithBytesNoCopy:length:options:deallocator:":
		p, n, page := uintptr(c.u64(0)), int(c.u64(1)), os.Getpagesize()
		switch {
		case p == 0 || p%uintptr(page) != 0:
			c.violation("pointer %#x is not page-aligned", p)
			return nil
		case n <= 0 || n%page != 0:
			c.violation("length %d is not a multiple of the page size %d", n, page)
			return nil
		case c.u64(3) != 0:
			c.violation("deallocator blocks are not supported by the fake")
		}
		eb, err := d.ed.WrapRaw(p, n)
		if err != nil {
			return nil
		}
		return r.newObject(mtlBuffer, &buffer{eb: eb, length: n, raw: p})
	case "newLibraryWithSource:options:error:":
		src, opts := c.obj(0, nsString, false), c.obj(1, mtlOptions, false)
		if src == nil || opts == nil {
			return nil
		}
		o := opts.impl.(*options)
		if !o.langSet {
			c.violation("compile options without a languageVersion (the default changes with macOS releases)")
		}
		if !o.mathSet && !o.fastSet {
			c.violation("compile options without a math mode (mathMode on macOS 15+, else fastMathEnabled)")
		}
		lib, err := d.ed.Compile(cString(src))
		if err != nil {
			setError(c, c.ptr(2), err.Error())
			return nil
		}
		return r.newObject(mtlLibrary, &library{dev: d, lib: lib})
	case "newComputePipelineStateWithFunction:error:":
		fo := c.obj(0, mtlFunc, false)
		if fo == nil {
			return nil
		}
		f := fo.impl.(*function)
		p, err := f.lib.lib.Pipeline(f.name)
		if err != nil {
			setError(c, c.ptr(1), err.Error())
			return nil
		}
		return r.newObject(mtlPipe, &pipeline{p: p, max: min(d.cfg.MaxThreads, p.MaxThreads()), width: d.cfg.SIMDWidth})
	}
	return nil
}

func commandBufferMethod(c *call, cb *commandBuffer) any {
	r := c.r
	switch c.sel {
	case "computeCommandEncoder":
		switch {
		case cb.status != statusNotEnqueued:
			c.violation("encoder on a committed command buffer")
			return nil
		case cb.enc != nil && !cb.enc.impl.(*encoder).ended:
			c.violation("new encoder while the previous one is not ended")
			return nil
		}
		e := r.newObject(mtlEncoder, &encoder{cb: c.self})
		cb.enc, cb.encoded = e, true
		return e
	case "commit":
		switch {
		case cb.status != statusNotEnqueued:
			c.violation("committed twice")
			return nil
		case cb.enc != nil && !cb.enc.impl.(*encoder).ended:
			c.violation("commit with an encoder not ended (endEncoding)")
		}
		cb.status = statusCommitted
		cb.ecb.Commit()
	case "status":
		return cb.status
	case "error":
		if cb.err == nil {
			return nil
		}
		return cb.err.id
	}
	return nil
}

// waitFor is the part of waitUntilCompleted run without the runtime lock.
func waitFor(c *call) func() {
	cb, ok := c.self.impl.(*commandBuffer)
	if !ok {
		return func() {}
	}
	if cb.status == statusNotEnqueued {
		c.violation("wait on a command buffer never committed (blocks forever on a Mac)")
		return func() {}
	}
	if cb.status != statusCommitted {
		return func() {}
	}
	return func() { cb.waitErr = cb.ecb.Wait() }
}

func finishWait(c *call) {
	cb, ok := c.self.impl.(*commandBuffer)
	if !ok || cb.status != statusCommitted {
		return
	}
	cb.status = statusCompleted
	if cb.waitErr != nil {
		cb.status = statusError
		cb.err = c.r.newObject(nsError, &nsErr{msg: cb.waitErr.Error()})
		cb.held = append(cb.held, cb.err)
	}
	// A finished command buffer lets go of what it retained.
	for _, o := range cb.held {
		if o != cb.err {
			c.r.release(o)
		}
	}
	cb.held = cb.held[:0]
	if cb.err != nil {
		cb.held = append(cb.held, cb.err)
	}
}

func (cb *commandBuffer) free() {
	for _, o := range cb.held {
		rt.release(o)
	}
	cb.held = nil
}

func encoderMethod(c *call, e *encoder) {
	r := c.r
	cb := e.cb.impl.(*commandBuffer)
	if e.ended {
		c.violation("encoded after endEncoding")
		return
	}
	hold := func(o *object) {
		r.retain(o)
		cb.held = append(cb.held, o)
	}
	switch c.sel {
	case "endEncoding":
		e.ended = true
	case "setComputePipelineState:":
		if p := c.obj(0, mtlPipe, false); p != nil {
			e.pipe = p
			hold(p)
		}
	case "setBuffer:offset:atIndex:":
		b := c.obj(0, mtlBuffer, false)
		off, i := int(c.u64(1)), int(c.u64(2))
		switch {
		case b == nil:
			return
		case i >= maxBufferIndex:
			c.violation("index %d beyond the %d buffer bindings", i, maxBufferIndex)
			return
		case off > b.impl.(*buffer).length:
			c.violation("offset %d beyond the buffer's %d bytes", off, b.impl.(*buffer).length)
			return
		}
		hold(b)
		e.binds[i] = binding{buf: b, off: off}
	case "setBytes:length:atIndex:":
		n, i := int(c.u64(1)), int(c.u64(2))
		switch {
		case n >= maxInlineBytes:
			c.violation("%d bytes: setBytes is for data smaller than 4 KB (use a buffer)", n)
			return
		case i >= maxBufferIndex:
			c.violation("index %d beyond the %d buffer bindings", i, maxBufferIndex)
			return
		case n <= 0 || c.ptr(0) == nil:
			c.violation("%d bytes at %p", n, c.ptr(0))
			return
		}
		e.binds[i] = binding{bytes: append([]byte(nil), unsafe.Slice((*byte)(c.ptr(0)), n)...)}
	case "useResource:usage:", "useResources:count:usage:":
		var ids []uintptr
		usage := c.u64(1)
		if c.sel == "useResource:usage:" {
			ids = []uintptr{uintptr(c.u64(0))}
		} else {
			n := int(c.u64(1))
			usage = c.u64(2)
			if n <= 0 || c.ptr(0) == nil {
				c.violation("%d resources at %p", n, c.ptr(0))
				return
			}
			ids = unsafe.Slice((*uintptr)(c.ptr(0)), n)
		}
		if usage == 0 || usage > 7 {
			c.violation("usage %d", usage)
		}
		var bufs []gpu.Buffer
		for k, v := range ids {
			o := r.objs[v]
			if o == nil || o.dead || o.class != mtlBuffer {
				c.violation("resource %d (%#x) is not a live buffer", k, v)
				continue
			}
			hold(o)
			bufs = append(bufs, o.impl.(*buffer).eb)
		}
		cb.ecb.Use(bufs...)
	case "dispatchThreadgroups:threadsPerThreadgroup:":
		groups, threads := c.args[0], c.args[1]
		var g, t [3]int
		for k := range 3 {
			g[k], t[k] = int(groups.Field(k).Uint()), int(threads.Field(k).Uint())
		}
		dispatch(c, e, cb, g, t)
	}
}

// dispatch checks what Metal's validation layer checks at a dispatch and
// records it into the emulator's command buffer.
func dispatch(c *call, e *encoder, cb *commandBuffer, g, t [3]int) {
	if e.pipe == nil {
		c.violation("dispatch without a pipeline state")
		return
	}
	p := e.pipe.impl.(*pipeline)
	n := t[0] * t[1] * t[2]
	switch {
	case g[0] < 1 || g[1] < 1 || g[2] < 1:
		c.violation("%s: empty grid %v threadgroups", p.p.Name(), g)
		return
	case t[0] < 1 || t[1] < 1 || t[2] < 1 || n > p.max:
		c.violation("%s: threadgroup %v (%d threads), the pipeline allows 1..%d", p.p.Name(), t, n, p.max)
		return
	}
	sizes := p.p.(*emu.Pipeline).ArgSizes()
	args := make([]gpu.Arg, len(sizes))
	for i, need := range sizes {
		if need == 0 {
			continue
		}
		b := e.binds[i]
		switch {
		case b.bytes != nil:
			if len(b.bytes) < need {
				c.violation("%s: argument %d: %d inline bytes, the kernel reads %d", p.p.Name(), i, len(b.bytes), need)
				return
			}
			args[i] = gpu.Arg{Bytes: b.bytes}
		case b.buf != nil:
			bo := b.buf.impl.(*buffer)
			if b.buf.dead {
				c.violation("%s: argument %d is a deallocated buffer", p.p.Name(), i)
				return
			}
			if bo.length-b.off < need {
				c.violation("%s: argument %d: %d bytes from offset %d, the kernel reads at least %d", p.p.Name(), i, bo.length-b.off, b.off, need)
				return
			}
			args[i] = gpu.Arg{Buf: bo.eb, Off: b.off}
		default:
			c.violation("%s: argument %d not bound", p.p.Name(), i)
			return
		}
	}
	cb.ecb.Dispatch(p.p, g, t, args...)
}
