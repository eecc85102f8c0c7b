//go:build darwin

package worker

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
)

// macOS sleep and wake notifications through IOKit, called with purego (no
// cgo), as in Apple's Technical Q&A QA1340. Declarations (IOKit/pwr_mgt/
// IOPMLib.h, IOKit/IOKitLib.h, CoreFoundation/CFRunLoop.h):
//
//	io_connect_t IORegisterForSystemPower(void *refcon, IONotificationPortRef *thePortRef,
//	                                      IOServiceInterestCallback callback, io_object_t *notifier);
//	IOReturn IODeregisterForSystemPower(io_object_t *notifier);
//	IOReturn IOAllowPowerChange(io_connect_t kernelPort, intptr_t notificationID);
//	IOReturn IOCancelPowerChange(io_connect_t kernelPort, intptr_t notificationID);
//	kern_return_t IOServiceClose(io_connect_t connect);
//	CFRunLoopSourceRef IONotificationPortGetRunLoopSource(IONotificationPortRef notify);
//	void IONotificationPortDestroy(IONotificationPortRef notify);
//	typedef void (*IOServiceInterestCallback)(void *refcon, io_service_t service,
//	                                          uint32_t messageType, void *messageArgument);
//	CFRunLoopRef CFRunLoopGetCurrent(void);
//	void CFRunLoopAddSource(CFRunLoopRef rl, CFRunLoopSourceRef source, CFRunLoopMode mode);
//	void CFRunLoopRemoveSource(CFRunLoopRef rl, CFRunLoopSourceRef source, CFRunLoopMode mode);
//	CFRunLoopRunResult CFRunLoopRunInMode(CFRunLoopMode mode, CFTimeInterval seconds,
//	                                      Boolean returnAfterSourceHandled); // SInt32
//	void CFRunLoopStop(CFRunLoopRef rl);
//	void CFRunLoopWakeUp(CFRunLoopRef rl);
//	const CFRunLoopMode kCFRunLoopDefaultMode; // an exported CFStringRef variable
//
// io_connect_t, io_object_t and io_service_t are mach ports (uint32);
// IOReturn and kern_return_t are int (0 = success). The notification id
// for IOAllowPowerChange/IOCancelPowerChange is the callback's
// messageArgument.
//
// The callback runs on a goroutine locked to its OS thread, inside that
// thread's CFRunLoop (the notification port's source is on it). The loop
// runs in 1 s slices (CFRunLoopRunInMode) rather than CFRunLoopRun: a
// CFRunLoopStop sent before the loop runs is lost, and the slices make
// Close take effect regardless. Untested on a Mac: this repository's CI
// only builds and vets it for darwin/arm64.

// IOKit/IOMessage.h: iokit_common_msg(m) = sys_iokit | sub_iokit_common | m,
// sys_iokit = err_system(0x38) = 0x38<<26 = 0xE0000000, sub_iokit_common = 0.
const (
	ioMessageCanSystemSleep     = 0xE0000270 // kIOMessageCanSystemSleep
	ioMessageSystemWillSleep    = 0xE0000280 // kIOMessageSystemWillSleep
	ioMessageSystemWillNotSleep = 0xE0000290 // kIOMessageSystemWillNotSleep
	ioMessageSystemHasPoweredOn = 0xE0000300 // kIOMessageSystemHasPoweredOn
	ioMessageSystemWillPowerOn  = 0xE0000320 // kIOMessageSystemWillPowerOn
)

// CFRunLoopRunResult kCFRunLoopRunFinished: the mode has no sources or timers.
const cfRunLoopRunFinished = 1

var sysPower struct {
	once sync.Once
	err  error

	register     func(refcon uintptr, port *uintptr, callback uintptr, notifier *uint32) uint32
	deregister   func(notifier *uint32) int32
	allow        func(kernelPort uint32, id uintptr) int32
	cancel       func(kernelPort uint32, id uintptr) int32
	serviceClose func(connect uint32) int32
	portSource   func(port uintptr) uintptr
	portDestroy  func(port uintptr)

	runLoopCurrent func() uintptr
	addSource      func(rl, source, mode uintptr)
	removeSource   func(rl, source, mode uintptr)
	runInMode      func(mode uintptr, seconds float64, returnAfterSourceHandled bool) int32
	stop           func(rl uintptr)
	wakeUp         func(rl uintptr)
	defaultMode    uintptr // the CFStringRef kCFRunLoopDefaultMode holds

	callback uintptr // the IOServiceInterestCallback (purego callbacks are never freed: made once)

	mu     sync.Mutex
	active *darwinPower // receives the callbacks
}

// bindFunc binds fptr to symbol name of lib, with an error (not
// purego.RegisterLibFunc's panic) when the symbol is missing.
func bindFunc(fptr any, lib uintptr, name string) error {
	sym, err := purego.Dlsym(lib, name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	purego.RegisterFunc(fptr, sym)
	return nil
}

func loadSystemPower() error {
	sysPower.once.Do(func() {
		if err := loadIOKit(); err != nil { // power_darwin.go: opens both frameworks
			sysPower.err = err
			return
		}
		cf, io := iokit.cf, iokit.io
		for _, b := range []struct {
			fptr any
			lib  uintptr
			name string
		}{
			{&sysPower.register, io, "IORegisterForSystemPower"},
			{&sysPower.deregister, io, "IODeregisterForSystemPower"},
			{&sysPower.allow, io, "IOAllowPowerChange"},
			{&sysPower.cancel, io, "IOCancelPowerChange"},
			{&sysPower.serviceClose, io, "IOServiceClose"},
			{&sysPower.portSource, io, "IONotificationPortGetRunLoopSource"},
			{&sysPower.portDestroy, io, "IONotificationPortDestroy"},
			{&sysPower.runLoopCurrent, cf, "CFRunLoopGetCurrent"},
			{&sysPower.addSource, cf, "CFRunLoopAddSource"},
			{&sysPower.removeSource, cf, "CFRunLoopRemoveSource"},
			{&sysPower.runInMode, cf, "CFRunLoopRunInMode"},
			{&sysPower.stop, cf, "CFRunLoopStop"},
			{&sysPower.wakeUp, cf, "CFRunLoopWakeUp"},
		} {
			if err := bindFunc(b.fptr, b.lib, b.name); err != nil {
				sysPower.err = fmt.Errorf("load power notifications: %w", err)
				return
			}
		}
		addr, err := purego.Dlsym(cf, "kCFRunLoopDefaultMode")
		if err != nil || addr == 0 {
			sysPower.err = fmt.Errorf("load power notifications: kCFRunLoopDefaultMode: %v", err)
			return
		}
		// The symbol is the address of a CFStringRef variable; read it
		// (through a pointer to addr, the form go vet accepts).
		sysPower.defaultMode = **(**uintptr)(unsafe.Pointer(&addr))
		sysPower.callback = purego.NewCallback(powerCallback)
	})
	return sysPower.err
}

// powerCallback is the IOServiceInterestCallback. Every argument is taken
// as a register-sized word; messageType is a uint32 in the low half.
func powerCallback(refcon, service, messageType, argument uintptr) {
	sysPower.mu.Lock()
	p := sysPower.active
	sysPower.mu.Unlock()
	if p != nil {
		p.deliver(uint32(messageType), argument)
	}
}

// darwinPower is the IOKit power source.
type darwinPower struct {
	handle func(powerNotice)
	root   uint32 // io_connect_t of the root power domain; set before the first callback

	mu      sync.Mutex
	runLoop uintptr // the loop thread's CFRunLoopRef while it runs
	closing atomic.Bool
	done    chan struct{}
	once    sync.Once
}

func systemPower() (powerSource, error) {
	if err := loadSystemPower(); err != nil {
		return nil, err
	}
	return &darwinPower{done: make(chan struct{})}, nil
}

func (p *darwinPower) start(handle func(powerNotice)) error {
	p.handle = handle
	started := make(chan error, 1)
	go p.loop(started)
	return <-started
}

// loop registers for the notifications on its own OS thread and runs that
// thread's CFRunLoop until close.
func (p *darwinPower) loop(started chan<- error) {
	defer close(p.done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	sysPower.mu.Lock()
	if sysPower.active != nil {
		sysPower.mu.Unlock()
		started <- errors.New("already registered in this process")
		return
	}
	sysPower.active = p
	sysPower.mu.Unlock()
	defer func() {
		sysPower.mu.Lock()
		sysPower.active = nil
		sysPower.mu.Unlock()
	}()

	var port uintptr    // IONotificationPortRef
	var notifier uint32 // io_object_t
	root := sysPower.register(0, &port, sysPower.callback, &notifier)
	if root == 0 {
		started <- errors.New("IORegisterForSystemPower failed")
		return
	}
	p.root = root
	src := sysPower.portSource(port)
	rl := sysPower.runLoopCurrent()
	sysPower.addSource(rl, src, sysPower.defaultMode)
	p.mu.Lock()
	p.runLoop = rl
	p.mu.Unlock()
	started <- nil

	for !p.closing.Load() {
		if sysPower.runInMode(sysPower.defaultMode, 1.0, false) == cfRunLoopRunFinished {
			// No source in the mode (not expected: ours is there):
			// do not spin.
			time.Sleep(time.Second)
		}
	}

	p.mu.Lock()
	p.runLoop = 0
	p.mu.Unlock()
	sysPower.removeSource(rl, src, sysPower.defaultMode)
	sysPower.deregister(&notifier)
	sysPower.serviceClose(root)
	sysPower.portDestroy(port)
}

func (p *darwinPower) close() error {
	p.once.Do(func() {
		p.closing.Store(true)
		p.mu.Lock()
		if p.runLoop != 0 {
			sysPower.stop(p.runLoop)
			sysPower.wakeUp(p.runLoop)
		}
		p.mu.Unlock()
	})
	// The loop ends within its 1 s slice, or after a notice being handled
	// was answered (at most SleepConfig.AckTimeout).
	<-p.done
	return nil
}

// deliver turns a callback into a powerNotice; it runs on the loop's
// thread and returns once the notice was handled (and answered).
func (p *darwinPower) deliver(msg uint32, argument uintptr) {
	n := powerNotice{raw: msg}
	switch msg {
	case ioMessageCanSystemSleep:
		n.msg = powerCanSleep
	case ioMessageSystemWillSleep:
		n.msg = powerWillSleep
	case ioMessageSystemWillNotSleep:
		n.msg = powerWillNotSleep
	case ioMessageSystemWillPowerOn:
		n.msg = powerWillPowerOn
	case ioMessageSystemHasPoweredOn:
		n.msg = powerHasPoweredOn
	}
	if n.msg == powerCanSleep || n.msg == powerWillSleep {
		root := p.root
		n.reply = func(allow bool) error {
			if allow {
				if rc := sysPower.allow(root, argument); rc != 0 {
					return fmt.Errorf("IOAllowPowerChange returned 0x%x", uint32(rc))
				}
				return nil
			}
			if rc := sysPower.cancel(root, argument); rc != 0 {
				return fmt.Errorf("IOCancelPowerChange returned 0x%x", uint32(rc))
			}
			return nil
		}
	}
	p.handle(n)
}
