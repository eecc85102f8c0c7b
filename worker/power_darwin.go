//go:build darwin

package worker

import (
	"fmt"
	"sync"

	"github.com/ebitengine/purego"
)

// macOS power assertion through IOKit, called with purego (no cgo):
//
//	IOPMAssertionCreateWithName(CFStringRef type, IOPMAssertionLevel level,
//	                            CFStringRef name, IOPMAssertionID *id) -> IOReturn
//	IOPMAssertionRelease(IOPMAssertionID id) -> IOReturn
//
// with type kIOPMAssertionTypePreventUserIdleSystemSleep: the system does
// not idle-sleep while the assertion is held (the display may still sleep;
// closing the lid or an explicit sleep still sleeps). Untested on a Mac in
// this repository's CI (built for darwin/arm64 only).

const (
	cfStringEncodingUTF8 = 0x08000100
	iopmAssertionLevelOn = 255
	// kIOPMAssertionTypePreventUserIdleSystemSleep's value (IOPMLib.h).
	assertionPreventIdleSleep = "PreventUserIdleSystemSleep"
)

var iokit struct {
	once sync.Once
	err  error
	cf   uintptr // CoreFoundation's and IOKit's dlopen handles (also for sleep_darwin.go)
	io   uintptr

	cfStringCreate func(alloc uintptr, s string, encoding uint32) uintptr
	cfRelease      func(ref uintptr)
	create         func(typ uintptr, level uint32, name uintptr, id *uint32) int32
	release        func(id uint32) int32
}

func loadIOKit() error {
	iokit.once.Do(func() {
		cf, err := purego.Dlopen("/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			iokit.err = fmt.Errorf("load CoreFoundation: %w", err)
			return
		}
		io, err := purego.Dlopen("/System/Library/Frameworks/IOKit.framework/IOKit", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			iokit.err = fmt.Errorf("load IOKit: %w", err)
			return
		}
		iokit.cf, iokit.io = cf, io
		purego.RegisterLibFunc(&iokit.cfStringCreate, cf, "CFStringCreateWithCString")
		purego.RegisterLibFunc(&iokit.cfRelease, cf, "CFRelease")
		purego.RegisterLibFunc(&iokit.create, io, "IOPMAssertionCreateWithName")
		purego.RegisterLibFunc(&iokit.release, io, "IOPMAssertionRelease")
	})
	return iokit.err
}

// preventSleep takes a PreventUserIdleSystemSleep assertion named reason;
// release gives it back.
func preventSleep(reason string) (release func(), err error) {
	if err := loadIOKit(); err != nil {
		return nil, fmt.Errorf("power assertion: %w", err)
	}
	typ := iokit.cfStringCreate(0, assertionPreventIdleSleep, cfStringEncodingUTF8)
	if typ == 0 {
		return nil, fmt.Errorf("power assertion: CFStringCreateWithCString failed")
	}
	defer iokit.cfRelease(typ)
	name := iokit.cfStringCreate(0, reason, cfStringEncodingUTF8)
	if name == 0 {
		return nil, fmt.Errorf("power assertion: CFStringCreateWithCString failed")
	}
	defer iokit.cfRelease(name)
	var id uint32
	if rc := iokit.create(typ, iopmAssertionLevelOn, name, &id); rc != 0 {
		return nil, fmt.Errorf("power assertion: IOPMAssertionCreateWithName returned 0x%x", uint32(rc))
	}
	var once sync.Once
	return func() { once.Do(func() { iokit.release(id) }) }, nil
}
