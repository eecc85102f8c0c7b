//go:build linux

// Package fake is a fake Objective-C runtime and Metal device written in Go,
// for Linux: metal/mtl's host code (the very source a Mac runs) opens its
// "frameworks", looks up classes and selectors, binds objc_msgSend and sends
// every message through it. The fake checks each message against a table
// of Apple's documented selector signatures (receiver class, argument and
// return types), the Objective-C runtime's rules (+1 results of
// new/alloc/init, balanced release, no message to a released object, an
// autorelease pool on the thread where Metal autoreleases) and Metal's
// validation-layer rules (pipeline set, every kernel argument bound with
// enough bytes, setBytes under 4 KiB, threadgroup size within the pipeline's
// maximum, non-zero grids, nothing encoded after endEncoding, commit after
// endEncoding, wait only after commit). Kernels run in the emulator
// (metal/emu), no earlier than waitUntilCompleted; device pointers are
// checked for residency there.
//
// A broken rule is a violation: counted, described (Stats), and the message
// is ignored where Metal would fail it. The runtime is process-wide, as the
// real one is.
package fake

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/macpool/macpool/metal/emu"
)

// Config is the Mac the fake pretends to be.
type Config struct {
	// Emu configures the emulator running the kernels.
	Emu emu.Config
	// MacOS is the major macOS version: selectors introduced later are
	// unrecognised, deprecated ones are violations.
	MacOS int
	// AppleFamily is the newest MTLGPUFamilyAppleN the GPU supports (9:
	// M3/M4); 0 is a GPU that is not Apple's (an Intel Mac's AMD GPU).
	AppleFamily int
	// Metal3 is MTLGPUFamilyMetal3 support (gpuAddress).
	Metal3 bool
	// SIMDWidth is every pipeline's threadExecutionWidth (32 on Apple GPUs).
	SIMDWidth int
	// MaxThreads is every pipeline's maxTotalThreadsPerThreadgroup.
	MaxThreads int
	// Name is the device name; WorkingSet its recommendedMaxWorkingSetSize.
	Name       string
	WorkingSet uint64
	// Missing lists library paths dlopen fails for; Hidden, classes no
	// loaded library provides.
	Missing, Hidden []string
}

// DefaultConfig is an Apple-silicon GPU of family Apple9 (M3/M4) on macOS
// 15, named "metal-emulated".
func DefaultConfig() Config {
	return Config{MacOS: 15, AppleFamily: 9, Metal3: true, SIMDWidth: 32, MaxThreads: 1024,
		Name: "metal-emulated"}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.MacOS < 13:
		return fmt.Errorf("fake macOS %d must be 13 or newer", c.MacOS)
	case c.SIMDWidth <= 0 || c.MaxThreads <= 0:
		return fmt.Errorf("fake SIMD width %d and max threads %d must be positive", c.SIMDWidth, c.MaxThreads)
	}
	return c.Emu.Validate()
}

// Stats counts the messages sent and the violations found.
type Stats struct {
	Messages   uint64   // objc_msgSend calls
	Checked    uint64   // messages checked against the selector table
	Violations uint64   // rules broken
	First      []string // the first violations, described
}

func (s Stats) String() string {
	return fmt.Sprintf("%d objc messages, %d checked, %d violations", s.Messages, s.Checked, s.Violations)
}

const keepViolations = 20

type object struct {
	id      uintptr
	class   string
	isClass bool
	refs    int
	dead    bool
	impl    any
}

type pool struct {
	obj  *object
	objs []*object
}

type runtimeState struct {
	mu      sync.Mutex
	cfg     Config
	loaded  map[string]bool
	handles map[uintptr]string // library handles and symbol addresses
	classes map[string]*object
	sels    map[uintptr]string
	selIDs  map[string]uintptr
	objs    map[uintptr]*object
	next    uintptr
	pools   map[int][]*pool // per OS thread, innermost last
	stats   Stats
}

var rt = newState(DefaultConfig())

func newState(cfg Config) *runtimeState {
	return &runtimeState{cfg: cfg, loaded: map[string]bool{}, handles: map[uintptr]string{}, classes: map[string]*object{},
		sels: map[uintptr]string{}, selIDs: map[string]uintptr{}, objs: map[uintptr]*object{}, next: 0x6000_0000_0000, pools: map[int][]*pool{}}
}

// Configure sets the Mac the fake pretends to be, for devices created from
// now on; the runtime's state (loaded libraries, objects, counters) stays.
func Configure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	rt.mu.Lock()
	rt.cfg = cfg
	rt.mu.Unlock()
	return nil
}

// Reset replaces the whole runtime (as a new process would start), for
// tests of loading.
func Reset(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	n := newState(cfg)
	rt.cfg, rt.loaded, rt.handles, rt.classes, rt.sels, rt.selIDs = n.cfg, n.loaded, n.handles, n.classes, n.sels, n.selIDs
	rt.objs, rt.next, rt.pools, rt.stats = n.objs, n.next, n.pools, n.stats
	return nil
}

// Snapshot returns the counters so far.
func Snapshot() Stats {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	s := rt.stats
	s.First = append([]string(nil), s.First...)
	return s
}

// Live counts the objects alive now by class (class objects excluded):
// after every owner released what it created, none should be.
func Live() map[string]int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := map[string]int{}
	for _, o := range rt.objs {
		if !o.dead && !o.isClass {
			out[o.class]++
		}
	}
	return out
}

// violation records a broken rule (the caller holds rt.mu).
func (r *runtimeState) violation(format string, args ...any) {
	r.stats.Violations++
	if len(r.stats.First) < keepViolations {
		r.stats.First = append(r.stats.First, fmt.Sprintf(format, args...))
	}
}

func (r *runtimeState) newObject(class string, impl any) *object {
	r.next += 0x40
	o := &object{id: r.next, class: class, refs: 1, impl: impl}
	r.objs[o.id] = o
	return o
}

func (r *runtimeState) retain(o *object) { o.refs++ }

// release drops one reference; the last frees the object (it stays in objs
// as a tombstone, so later messages to it are caught).
func (r *runtimeState) release(o *object) {
	if o.isClass {
		return
	}
	if o.dead {
		r.violation("release of deallocated %s %#x (over-release)", o.class, o.id)
		return
	}
	if o.refs--; o.refs == 0 {
		o.dead = true
		if f, ok := o.impl.(interface{ free() }); ok {
			f.free()
		}
	}
}

func (r *runtimeState) autorelease(o *object, tid int, what string) {
	ps := r.pools[tid]
	if len(ps) == 0 {
		r.violation("%s autoreleased with no autorelease pool on thread %d: it leaks (OBJC_DEBUG_MISSING_POOLS)", what, tid)
		return
	}
	p := ps[len(ps)-1]
	p.objs = append(p.objs, o)
}

// ErrNotFound is returned by Dlopen and Dlsym for what the fake does not have.
var ErrNotFound = errors.New("fake: not found")

// Dlopen opens a library the host code uses; its classes become visible.
func Dlopen(path string) (uintptr, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, m := range rt.cfg.Missing {
		if m == path {
			return 0, fmt.Errorf("dlopen %s: %w", path, ErrNotFound)
		}
	}
	switch path {
	case libobjc, foundationFW, coreGraphics, metalFW:
	default:
		return 0, fmt.Errorf("dlopen %s: %w", path, ErrNotFound)
	}
	rt.loaded[path] = true
	for _, c := range classesOf[path] {
		if rt.classes[c] == nil && !contains(rt.cfg.Hidden, c) {
			o := rt.newObject(c, nil)
			o.isClass = true
			rt.classes[c] = o
		}
	}
	h := uintptr(0x1000 + 0x100*len(rt.handles))
	for k, v := range rt.handles {
		if v == path {
			return k, nil
		}
	}
	rt.handles[h] = path
	return h, nil
}

// Dlsym finds a C function of an opened library.
func Dlsym(lib uintptr, name string) (uintptr, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	f, ok := functions[name]
	if !ok || rt.handles[lib] != f.lib {
		return 0, fmt.Errorf("dlsym %s: %w", name, ErrNotFound)
	}
	h := uintptr(0x100000 + 0x10*len(rt.handles))
	rt.handles[h] = name
	return h, nil
}

// RegisterFunc binds the Go function variable *fptr to a C function found
// with Dlsym, as purego.RegisterFunc does: the Go signature is the C
// signature the caller assumes. For objc_msgSend each binding declares
// the signature of the selectors sent through it; every message is checked
// against the selector's documented one.
func RegisterFunc(fptr any, addr uintptr) {
	fv := reflect.ValueOf(fptr).Elem()
	ft := fv.Type()
	enc, err := encodeFunc(ft)
	rt.mu.Lock()
	name := rt.handles[addr]
	if err != nil {
		rt.violation("bind %s to %v: %v", name, ft, err)
	}
	rt.mu.Unlock()
	if name == "objc_msgSend" {
		fv.Set(reflect.MakeFunc(ft, func(in []reflect.Value) []reflect.Value { return send(ft, enc, in) }))
		return
	}
	f, ok := functions[name]
	if !ok {
		panic(fmt.Sprintf("fake: RegisterFunc of unknown address %#x", addr))
	}
	if f.enc != strings.ReplaceAll(enc, "r", "") && normalize(f.enc) != normalize(enc) {
		rt.mu.Lock()
		rt.violation("%s bound as %s, declared %s", name, enc, f.enc)
		rt.mu.Unlock()
	}
	var impl func(in []reflect.Value) any
	switch name {
	case "objc_getClass":
		impl = func(in []reflect.Value) any {
			rt.mu.Lock()
			defer rt.mu.Unlock()
			if c := rt.classes[in[0].String()]; c != nil {
				return c.id
			}
			return uintptr(0)
		}
	case "sel_registerName":
		impl = func(in []reflect.Value) any {
			rt.mu.Lock()
			defer rt.mu.Unlock()
			n := in[0].String()
			if s, ok := rt.selIDs[n]; ok {
				return s
			}
			s := uintptr(0x7000_0000 + 0x10*len(rt.selIDs))
			rt.selIDs[n], rt.sels[s] = s, n
			return s
		}
	case "MTLCreateSystemDefaultDevice":
		impl = func([]reflect.Value) any { return createDevice() }
	}
	fv.Set(reflect.MakeFunc(ft, func(in []reflect.Value) []reflect.Value {
		return results(ft, impl(in))
	}))
}

func results(ft reflect.Type, v any) []reflect.Value {
	if ft.NumOut() == 0 {
		return nil
	}
	out := reflect.Zero(ft.Out(0))
	if v != nil {
		out = reflect.ValueOf(v).Convert(ft.Out(0))
	}
	return []reflect.Value{out}
}

// normalize drops const qualifiers and struct names from a type encoding.
func normalize(enc string) string {
	var b strings.Builder
	for i := 0; i < len(enc); i++ {
		switch c := enc[i]; {
		case c == 'r':
		case c == '{':
			b.WriteByte('{')
			if j := strings.IndexByte(enc[i:], '='); j > 0 && !strings.ContainsAny(enc[i+1:i+j], "{}") {
				i += j
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// encodeFunc is the Objective-C type encoding of a Go function signature
// as purego would marshal it: return first, then the arguments.
func encodeFunc(ft reflect.Type) (string, error) {
	var b strings.Builder
	if ft.NumOut() > 1 {
		return "", errors.New("more than one result")
	}
	if ft.NumOut() == 0 {
		b.WriteByte('v')
	} else if err := encodeType(&b, ft.Out(0)); err != nil {
		return "", err
	}
	for i := 0; i < ft.NumIn(); i++ {
		if err := encodeType(&b, ft.In(i)); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

func encodeType(b *strings.Builder, t reflect.Type) error {
	switch t.Name() {
	case "id":
		b.WriteByte('@')
		return nil
	case "sel":
		b.WriteByte(':')
		return nil
	case "cstr":
		b.WriteByte('*')
		return nil
	case "block":
		b.WriteString("@?")
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		b.WriteByte('*') // purego passes a NUL-terminated copy
	case reflect.Bool:
		b.WriteByte('B')
	case reflect.Uint64, reflect.Uint:
		b.WriteByte('Q')
	case reflect.Int64, reflect.Int:
		b.WriteByte('q')
	case reflect.Uint32:
		b.WriteByte('I')
	case reflect.Int32:
		b.WriteByte('i')
	case reflect.UnsafePointer, reflect.Uintptr:
		b.WriteString("^v")
	case reflect.Pointer:
		b.WriteByte('^')
		return encodeType(b, t.Elem())
	case reflect.Struct:
		b.WriteByte('{')
		for i := 0; i < t.NumField(); i++ {
			if err := encodeType(b, t.Field(i).Type); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("type %v has no C encoding", t)
	}
	return nil
}

// call is one message being handled.
type call struct {
	r    *runtimeState
	self *object
	sel  string
	tid  int
	args []reflect.Value
}

func (c *call) u64(i int) uint64         { return c.args[i].Uint() }
func (c *call) i64(i int) int64          { return c.args[i].Int() }
func (c *call) ptr(i int) unsafe.Pointer { return c.args[i].UnsafePointer() }
func (c *call) violation(f string, a ...any) {
	c.r.violation("-[%s %s]: "+f, append([]any{c.self.class, c.sel}, a...)...)
}

// obj returns the live object behind argument i of class want ("" any),
// or nil after recording a violation (nil is allowed where nilOK).
func (c *call) obj(i int, want string, nilOK bool) *object {
	v := uintptr(c.args[i].Uint())
	if v == 0 {
		if !nilOK {
			c.violation("argument %d is nil", i)
		}
		return nil
	}
	o := c.r.objs[v]
	switch {
	case o == nil:
		c.violation("argument %d %#x is not an object", i, v)
		return nil
	case o.dead:
		c.violation("argument %d is a deallocated %s (use after release)", i, o.class)
		return nil
	case want != "" && o.class != want:
		c.violation("argument %d is a %s, want %s", i, o.class, want)
		return nil
	}
	return o
}

func send(ft reflect.Type, enc string, in []reflect.Value) []reflect.Value {
	r := rt
	r.mu.Lock()
	locked := true
	defer func() {
		if locked {
			r.mu.Unlock()
		}
	}()
	r.stats.Messages++
	recv, sv := uintptr(in[0].Uint()), uintptr(in[1].Uint())
	name, ok := r.sels[sv]
	if !ok {
		r.violation("message with unregistered selector %#x", sv)
		return results(ft, nil)
	}
	self := r.objs[recv]
	switch {
	case recv == 0:
		// Legal Objective-C, but the host code never means it: a nil
		// receiver is a failed lookup or creation going unnoticed.
		r.violation("%s sent to nil", name)
		return results(ft, nil)
	case self == nil:
		r.violation("%s sent to %#x, not an object", name, recv)
		return results(ft, nil)
	case self.dead:
		r.violation("%s sent to deallocated %s %#x (use after release)", name, self.class, recv)
		return results(ft, nil)
	}
	m, ok := methods[name]
	class := self.class
	if self.isClass {
		class = "+" + class
	}
	if !ok || !contains(m.recv, class) || m.since > r.cfg.MacOS || m.metal3 && !r.cfg.Metal3 {
		r.violation("-[%s %s]: unrecognized selector sent to instance %#x", class, name, recv)
		return results(ft, nil)
	}
	r.stats.Checked++
	if normalize(m.enc) != normalize(enc) {
		r.violation("-[%s %s] sent as %s, Apple declares %s", class, name, enc, m.enc)
		return results(ft, nil)
	}
	if m.deprecated != 0 && r.cfg.MacOS >= m.deprecated {
		r.violation("-[%s %s] is deprecated since macOS %d", class, name, m.deprecated)
	}
	tid := syscall.Gettid()
	if m.pool && len(r.pools[tid]) == 0 {
		r.violation("-[%s %s] with no autorelease pool on thread %d (Metal autoreleases inside it)", class, name, tid)
	}
	c := &call{r: r, self: self, sel: name, tid: tid, args: in[2:]}
	var ret any
	if name == "waitUntilCompleted" {
		// The kernels run now, without the runtime lock: other threads
		// may message meanwhile, as on a Mac.
		wait := waitFor(c)
		r.mu.Unlock()
		locked = false
		wait()
		r.mu.Lock()
		locked = true
		finishWait(c)
	} else {
		ret = dispatchMethod(c)
	}
	if o, ok := ret.(*object); ok {
		if m.auto {
			r.autorelease(o, tid, fmt.Sprintf("result of -[%s %s]", class, name))
		}
		ret = o.id
	}
	return results(ft, ret)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// nsObjectMethod handles the NSObject protocol and Foundation classes.
func nsObjectMethod(c *call) (any, bool) {
	r := c.r
	switch c.sel {
	case "retain":
		r.retain(c.self)
		return c.self, true
	case "release":
		r.release(c.self)
		return nil, true
	case "respondsToSelector:":
		n := r.sels[uintptr(c.u64(0))]
		m, ok := methods[n]
		class := c.self.class
		if c.self.isClass {
			class = "+" + class
		}
		return ok && contains(m.recv, class) && m.since <= r.cfg.MacOS, true
	case "alloc":
		return r.newObject(nsString, &nsStr{}), true
	case "new":
		switch c.self.class {
		case nsPool:
			o := r.newObject(nsPool, nil)
			p := &pool{obj: o}
			o.impl = p
			r.pools[c.tid] = append(r.pools[c.tid], p)
			return o, true
		case mtlOptions:
			return r.newObject(mtlOptions, &options{}), true
		}
	case "initWithUTF8String:":
		s := c.self.impl.(*nsStr)
		if s.init {
			c.violation("string initialised twice")
		}
		s.init, s.b = true, append([]byte(c.args[0].String()), 0)
		return c.self, true
	case "UTF8String":
		s := c.self.impl.(*nsStr)
		if !s.init {
			c.violation("string not initialised")
			return unsafe.Pointer(nil), true
		}
		return unsafe.Pointer(&s.b[0]), true
	case "localizedDescription":
		return r.newString(c.self.impl.(*nsErr).msg), true
	case "drain":
		ps := r.pools[c.tid]
		if len(ps) == 0 || ps[len(ps)-1].obj != c.self {
			c.violation("pool drained on thread %d, which it is not the innermost pool of (created on another thread?)", c.tid)
			r.release(c.self)
			return nil, true
		}
		p := ps[len(ps)-1]
		r.pools[c.tid] = ps[:len(ps)-1]
		for _, o := range p.objs {
			r.release(o)
		}
		r.release(c.self)
		return nil, true
	}
	return nil, false
}

type nsStr struct {
	init bool
	b    []byte
}

type nsErr struct{ msg string }

func (r *runtimeState) newString(s string) *object {
	return r.newObject(nsString, &nsStr{init: true, b: append([]byte(s), 0)})
}
