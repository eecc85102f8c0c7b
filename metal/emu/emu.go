//go:build linux

package emu

import (
	"cmp"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/macpool/macpool/metal/gpu"
)

var (
	//go:embed abi.h
	abi string
	//go:embed prelude.h
	prelude string
	//go:embed csrc/runtime.cpp
	runtimeSrc string
)

// ErrNoCompiler is returned by New when no clang++ is found.
var ErrNoCompiler = errors.New("emu: no clang++ (16 or newer) found; install clang (Debian: apt-get install clang-19)")

// Config configures the emulator.
type Config struct {
	// Compiler is the clang++ to use; "" searches PATH for clang++,
	// clang++-19 ... clang++-16.
	Compiler string
	// CacheDir holds compiled libraries by source hash; "" uses
	// $XDG_CACHE_HOME/macpool/metal-emu (or the temp dir).
	CacheDir string
	// Workers is the number of OS threads running threadgroups; 0 = NumCPU.
	Workers int
	// Seed picks the order in which the threads of a threadgroup run
	// between barriers: 0 runs odd threadgroups in reverse order, any
	// other value a fresh pseudo-random order per scheduling round (tests
	// run several seeds to expose missing barriers).
	Seed uint64
}

// DefaultConfig returns the zero Config (all defaults).
func DefaultConfig() Config { return Config{} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Workers < 0 {
		return fmt.Errorf("emu workers %d must not be negative", c.Workers)
	}
	return nil
}

// FindCompiler returns the clang++ the emulator would use, or ErrNoCompiler.
func FindCompiler() (string, error) {
	for _, n := range []string{"clang++", "clang++-21", "clang++-20", "clang++-19", "clang++-18", "clang++-17", "clang++-16"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", ErrNoCompiler
}

// Device is the emulated GPU.
type Device struct {
	cfg      Config
	compiler string
	cacheDir string
	flags    []string // clang++ flags
	mu       sync.Mutex
	libs     map[string]*Library
	// qmu guards queue: committed command buffers not yet run, in commit
	// order. They run no earlier than a Wait (asynchronous completion as
	// on a GPU: until then the host sees none of their writes, and a host
	// write after Commit is seen by them — both show as wrong results).
	qmu   sync.Mutex
	queue []*CommandBuffer
}

var _ gpu.Device = (*Device)(nil)

// New creates an emulated device.
func New(cfg Config) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cc := cfg.Compiler
	if cc == "" {
		var err error
		if cc, err = FindCompiler(); err != nil {
			return nil, err
		}
	}
	dir := cfg.CacheDir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "macpool", "metal-emu")
	}
	if cfg.Workers == 0 {
		cfg.Workers = runtime.NumCPU()
	}
	// -fsigned-char: MSL's char is signed; arm64 Linux's is not.
	flags := []string{"-std=c++17", "-O2", "-fPIC", "-shared", "-fno-exceptions", "-fno-rtti", "-w", "-pthread", "-fsigned-char"}
	return &Device{cfg: cfg, compiler: cc, cacheDir: dir, flags: flags, libs: map[string]*Library{}}, nil
}

// Name implements gpu.Device.
func (d *Device) Name() string { return "metal-emulated" }

// Close implements gpu.Device. Loaded libraries stay mapped (dlclose of code
// that may still be referenced is not worth the risk).
func (d *Device) Close() error { return nil }

// gpuBias separates device addresses from host addresses: GPUAddress is the
// host address + 2^48, which no CPU can dereference, so a kernel reaches a
// buffer through a pointer table only via DEVICE_PTR (common.h), which
// checks that the buffer is resident for the dispatch.
const gpuBias = 1 << 48

// Buffer is emulator memory: an anonymous mapping, or wrapped host bytes.
type Buffer struct {
	b    []byte  // the usable bytes (nil for WrapRaw)
	n    int     // len(b), or WrapRaw's length
	base uintptr // start of the device buffer: b's page for wrapped bytes
	off  int     // b's offset from base
	m    []byte  // the whole mapping (nil for wrapped bytes)
	dead bool    // released
	once sync.Once
}

// NewBuffer implements gpu.Device. The buffer ends (rounded up to 16 bytes)
// right before an inaccessible guard page, so a kernel writing or reading
// past the end crashes the test instead of corrupting memory silently.
func (d *Device) NewBuffer(size int) (gpu.Buffer, error) {
	size = max(size, 1)
	page := os.Getpagesize()
	span := (size + 15) &^ 15
	total := (span+page-1)/page*page + page
	m, err := syscall.Mmap(-1, 0, total, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("emu: allocate %d bytes: %w", size, err)
	}
	if err := syscall.Mprotect(m[total-page:], syscall.PROT_NONE); err != nil {
		syscall.Munmap(m)
		return nil, fmt.Errorf("emu: guard page: %w", err)
	}
	start := total - page - span
	bb := m[start : start+size : start+size]
	return &Buffer{b: bb, n: size, base: uintptr(unsafe.Pointer(unsafe.SliceData(bb))), m: m}, nil
}

// WrapBytes implements gpu.Device as Metal's newBufferWithBytesNoCopy over
// the enclosing pages does: b is used in place, the device buffer starts at
// b's page and Offset is b's offset in that page (on a Mac almost never 0 for
// a tensor of a mapped checkpoint, so the backend must bind at Offset()+x).
func (d *Device) WrapBytes(b []byte) (gpu.Buffer, error) {
	if len(b) == 0 {
		return d.NewBuffer(1)
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	base := p &^ uintptr(os.Getpagesize()-1)
	return &Buffer{b: b, n: len(b), base: base, off: int(p - base)}, nil
}

// WrapRaw makes n bytes of host memory at addr a buffer, used in place
// (a no-copy Metal buffer over pages the caller keeps alive). The address
// is kept as an integer: it may point between Go heap objects, which no Go
// pointer may. Bytes is nil.
func (d *Device) WrapRaw(addr uintptr, n int) (gpu.Buffer, error) {
	if addr == 0 || n <= 0 {
		return nil, fmt.Errorf("emu: wrap %d bytes at %#x", n, addr)
	}
	return &Buffer{n: n, base: addr}, nil
}

func (b *Buffer) Bytes() []byte { return b.b }
func (b *Buffer) Len() int      { return b.n }
func (b *Buffer) Offset() int   { return b.off }

// GPUAddress implements gpu.Buffer: a device address (host + 2^48), valid
// in kernels only through DEVICE_PTR and only while resident.
func (b *Buffer) GPUAddress() uint64 { return uint64(b.base) + gpuBias }
func (b *Buffer) Release() {
	b.once.Do(func() {
		if b.m != nil {
			syscall.Munmap(b.m)
		}
		b.b, b.m, b.dead = nil, nil, true
	})
}

// Library is a compiled and loaded shared object.
type Library struct {
	dev      *Device
	path     string
	lookup   func(name string) int32
	argInfo  func(kernel int32, sizes *unsafe.Pointer) int32
	dispatch func(desc unsafe.Pointer) int32
	mu       sync.Mutex
	pipes    map[string]*Pipeline
}

// Pipeline is one kernel of a library.
type Pipeline struct {
	lib   *Library
	name  string
	index int32
	sizes []int
}

func (p *Pipeline) Name() string    { return p.name }
func (p *Pipeline) MaxThreads() int { return 1024 }

// ArgSizes is, per buffer index the kernel declares, the bytes a binding
// there must hold at least (the referenced struct, or one element behind a
// pointer); 0 for an index the kernel does not use.
func (p *Pipeline) ArgSizes() []int { return p.sizes }

// Compile implements gpu.Device: translate, compile with clang++ (cached by
// hash of prelude, source and compiler path) and dlopen.
func (d *Device) Compile(src string) (gpu.Library, error) {
	cpp, _, err := Translate(src)
	if err != nil {
		return nil, fmt.Errorf("emu: %w", err)
	}
	// Two translation units: the kernels see only abi.h + prelude.h (no C++
	// standard headers, so what Metal lacks does not compile here either);
	// the runtime has the fibers and the scheduler.
	kernelTU := abi + prelude + "\n#line 1 \"kernels.metal\"\n" + cpp
	runtimeTU := abi + runtimeSrc
	args := d.flags
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%v\x00%s\x00%s", d.compiler, args, kernelTU, runtimeTU)
	key := hex.EncodeToString(h.Sum(nil))[:24]

	d.mu.Lock()
	defer d.mu.Unlock()
	if l := d.libs[key]; l != nil {
		return l, nil
	}
	if err := os.MkdirAll(d.cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("emu: cache dir: %w", err)
	}
	so := filepath.Join(d.cacheDir, key+".so")
	if _, err := os.Stat(so); err != nil {
		kPath := filepath.Join(d.cacheDir, key+".kernels.cpp")
		rPath := filepath.Join(d.cacheDir, key+".runtime.cpp")
		if err := os.WriteFile(kPath, []byte(kernelTU), 0o644); err != nil {
			return nil, fmt.Errorf("emu: %w", err)
		}
		if err := os.WriteFile(rPath, []byte(runtimeTU), 0o644); err != nil {
			return nil, fmt.Errorf("emu: %w", err)
		}
		tmp := fmt.Sprintf("%s.%d.tmp", so, os.Getpid())
		cmd := exec.Command(d.compiler, append(args, "-o", tmp, kPath, rPath)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			os.Remove(tmp)
			return nil, fmt.Errorf("emu: compile %s: %w\n%s", kPath, err, out)
		}
		if err := os.Rename(tmp, so); err != nil {
			return nil, fmt.Errorf("emu: %w", err)
		}
	}
	now := time.Now()
	os.Chtimes(so, now, now) // the cache keeps what is used
	pruneCache(d.cacheDir, now)
	handle, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("emu: load %s: %w", so, err)
	}
	l := &Library{dev: d, path: so, pipes: map[string]*Pipeline{}}
	purego.RegisterLibFunc(&l.lookup, handle, "emu_lookup")
	purego.RegisterLibFunc(&l.dispatch, handle, "emu_dispatch")
	purego.RegisterLibFunc(&l.argInfo, handle, "emu_kernel_args")
	d.libs[key] = l
	return l, nil
}

// cacheMaxAge is how long a compiled library stays in the cache unused.
const cacheMaxAge = 14 * 24 * time.Hour

// pruneCache removes libraries and sources not used for cacheMaxAge (the
// source hash changes with every kernel edit). Errors are ignored: the cache
// is an optimisation.
func pruneCache(dir string, now time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && now.Sub(info.ModTime()) > cacheMaxAge {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// Pipeline implements gpu.Library.
func (l *Library) Pipeline(name string) (gpu.Pipeline, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.pipes[name]; p != nil {
		return p, nil
	}
	i := l.lookup(name)
	if i < 0 {
		return nil, fmt.Errorf("emu: kernel %q not in library", name)
	}
	p := &Pipeline{lib: l, name: name, index: i}
	var sz unsafe.Pointer
	if n := l.argInfo(i, &sz); n > 0 {
		for _, v := range unsafe.Slice((*uint64)(sz), n) {
			p.sizes = append(p.sizes, int(v))
		}
	}
	l.pipes[name] = p
	return p, nil
}

// desc mirrors emu::Desc in csrc/runtime.cpp.
type desc struct {
	kernel, nargs, workers, nres int32
	groups, threads              [3]uint32
	args                         uintptr
	seed                         uint64
	res                          uintptr
	badPtr, tgBytes              uint64 // out
}

// resident mirrors emu::Res: device addresses [gpu, gpu+len) are host
// memory at host.
type resident struct{ gpu, len, host uint64 }

type dispatch struct {
	p       *Pipeline
	groups  [3]uint32
	threads [3]uint32
	args    []gpu.Arg
	used    []*Buffer // declared with Use before this dispatch
}

// CommandBuffer records dispatches; they run, in commit order across the
// device's command buffers, no earlier than a Wait.
type CommandBuffer struct {
	dev       *Device
	list      []dispatch
	used      []*Buffer
	committed bool
	done      bool
	err       error
}

// NewCommandBuffer implements gpu.Device.
func (d *Device) NewCommandBuffer() gpu.CommandBuffer { return &CommandBuffer{dev: d} }

// Dispatch implements gpu.CommandBuffer. Inline bytes are copied now.
func (c *CommandBuffer) Dispatch(p gpu.Pipeline, groups, threads [3]int, args ...gpu.Arg) {
	if c.committed {
		panic("emu: dispatch on a committed command buffer")
	}
	ep := p.(*Pipeline)
	n := threads[0] * threads[1] * threads[2]
	if n <= 0 || n > ep.MaxThreads() {
		panic(fmt.Sprintf("emu: %s: threadgroup of %v threads", ep.name, threads))
	}
	dd := dispatch{p: ep, args: make([]gpu.Arg, len(args)), used: c.used[:len(c.used):len(c.used)]}
	for i := range 3 {
		dd.groups[i], dd.threads[i] = uint32(groups[i]), uint32(threads[i])
	}
	for i, a := range args {
		if a.Bytes != nil {
			a.Bytes = append(make([]byte, 0, len(a.Bytes)+16), a.Bytes...)
		}
		dd.args[i] = a
	}
	c.list = append(c.list, dd)
}

var zeroArg [64]byte

// Use implements gpu.CommandBuffer: the buffers are resident for the
// dispatches recorded after it; a kernel following a device address into
// any other buffer fails its dispatch.
func (c *CommandBuffer) Use(bufs ...gpu.Buffer) {
	for _, b := range bufs {
		c.used = append(c.used, b.(*Buffer))
	}
}

// Commit implements gpu.CommandBuffer: the command buffer joins the
// device's queue; it runs at the first Wait on it or on a later one.
func (c *CommandBuffer) Commit() {
	if c.committed {
		return
	}
	c.committed = true
	c.dev.qmu.Lock()
	c.dev.queue = append(c.dev.queue, c)
	c.dev.qmu.Unlock()
}

// execute runs every dispatch (the caller holds dev.qmu).
func (c *CommandBuffer) execute() {
	for _, d := range c.list {
		if err := c.run(d); err != nil {
			c.err = err
			break
		}
	}
	c.list, c.used, c.done = nil, nil, true
}

func (c *CommandBuffer) run(d dispatch) error {
	if d.groups[0]*d.groups[1]*d.groups[2] == 0 {
		return nil
	}
	ptrs := make([]uintptr, max(len(d.args), 1))
	for i, a := range d.args {
		switch {
		case a.Bytes != nil:
			ptrs[i] = uintptr(unsafe.Pointer(unsafe.SliceData(a.Bytes)))
		case a.Buf != nil:
			b := a.Buf.(*Buffer)
			if a.Off < 0 || a.Off > b.off+b.n {
				return fmt.Errorf("emu: %s: argument %d offset %d outside buffer of %d bytes", d.p.name, i, a.Off, b.off+b.n)
			}
			if b.dead {
				return fmt.Errorf("emu: %s: argument %d is a released buffer", d.p.name, i)
			}
			ptrs[i] = b.base + uintptr(a.Off)
		default:
			ptrs[i] = uintptr(unsafe.Pointer(&zeroArg[0]))
		}
	}
	res := residency(d)
	ds := &desc{kernel: d.p.index, nargs: int32(len(d.args)), workers: int32(c.dev.cfg.Workers),
		groups: d.groups, threads: d.threads, args: uintptr(unsafe.Pointer(&ptrs[0])),
		seed: c.dev.cfg.Seed, nres: int32(len(res)), res: uintptr(unsafe.Pointer(unsafe.SliceData(res)))}
	var pin runtime.Pinner
	pin.Pin(ds)
	pin.Pin(&ptrs[0])
	if len(res) > 0 {
		pin.Pin(&res[0])
	}
	for _, a := range d.args {
		if a.Bytes != nil {
			pin.Pin(unsafe.SliceData(a.Bytes))
		}
	}
	rc := d.p.lib.dispatch(unsafe.Pointer(ds))
	pin.Unpin()
	runtime.KeepAlive(d.args)
	switch rc {
	case 0:
	case -2:
		return fmt.Errorf("emu: kernel %s deadlocked: a threadgroup_barrier or SIMD-group collective is not reached by every live thread", d.p.name)
	case -3:
		return fmt.Errorf("emu: kernel %s declares %d bytes of threadgroup memory, more than Metal's 32 KiB", d.p.name, ds.tgBytes)
	case -4:
		return fmt.Errorf("emu: kernel %s read device address %#x of a buffer not resident for the dispatch (useResource)", d.p.name, ds.badPtr)
	default:
		return fmt.Errorf("emu: dispatch %s failed (%d)", d.p.name, rc)
	}
	return nil
}

// Wait implements gpu.CommandBuffer: it runs the device's queue up to and
// including c.
func (c *CommandBuffer) Wait() error {
	if !c.committed {
		return errors.New("emu: wait on a command buffer not committed")
	}
	d := c.dev
	d.qmu.Lock()
	defer d.qmu.Unlock()
	for !c.done && len(d.queue) > 0 {
		x := d.queue[0]
		d.queue[0] = nil
		d.queue = d.queue[1:]
		x.execute()
	}
	return c.err
}

// residency lists the device address ranges a dispatch may follow pointers
// into: its bound buffers and those declared with Use, sorted, overlaps
// merged (wrapped buffers can share pages).
func residency(d dispatch) []resident {
	var rs []resident
	add := func(b *Buffer) {
		if !b.dead {
			rs = append(rs, resident{gpu: uint64(b.base) + gpuBias, len: uint64(b.off + b.n), host: uint64(b.base)})
		}
	}
	for _, a := range d.args {
		if a.Buf != nil && a.Bytes == nil {
			add(a.Buf.(*Buffer))
		}
	}
	for _, b := range d.used {
		add(b)
	}
	slices.SortFunc(rs, func(a, b resident) int { return cmp.Compare(a.gpu, b.gpu) })
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && r.gpu <= out[n-1].gpu+out[n-1].len {
			out[n-1].len = max(out[n-1].len, r.gpu+r.len-out[n-1].gpu)
			continue
		}
		out = append(out, r)
	}
	return out
}
