//go:build darwin

package mtl

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/unix"
)

// Hardware reads the GPU facts of this Mac. Fields it cannot read stay zero;
// the error reports only a missing Metal device.
func Hardware() (HardwareInfo, error) {
	var h HardwareInfo
	if n, err := unix.SysctlUint64("hw.memsize"); err == nil {
		h.UnifiedMemory = n
	}
	h.GPUCores = gpuCoreCount()
	d, err := New()
	if err != nil {
		return h, err
	}
	defer d.Close()
	h.Chip = d.Name()
	h.RecommendedMaxWorkingSet = d.RecommendedMaxWorkingSet()
	h.HasUnifiedMemory = msgBool(d.dev, s("hasUnifiedMemory"))
	return h, nil
}

// gpuCoreCount reads "gpu-core-count" of the AGXAccelerator IORegistry entry
// (Apple silicon; Metal does not expose the core count).
func gpuCoreCount() int {
	iokit, err := purego.Dlopen("/System/Library/Frameworks/IOKit.framework/IOKit", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return 0
	}
	cf, err := purego.Dlopen("/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return 0
	}
	var (
		serviceMatching   func(name string) uintptr
		getService        func(mainPort uint32, matching uintptr) uint32
		createProperty    func(entry uint32, key, alloc uintptr, options uint32) uintptr
		objectRelease     func(obj uint32) int32
		stringCreate      func(alloc uintptr, s string, encoding uint32) uintptr
		numberGetValue    func(num uintptr, typ int, out unsafe.Pointer) bool
		cfRelease         func(obj uintptr)
		cfGetTypeID       func(obj uintptr) uint64
		cfNumberGetTypeID func() uint64
	)
	purego.RegisterLibFunc(&serviceMatching, iokit, "IOServiceMatching")
	purego.RegisterLibFunc(&getService, iokit, "IOServiceGetMatchingService")
	purego.RegisterLibFunc(&createProperty, iokit, "IORegistryEntryCreateCFProperty")
	purego.RegisterLibFunc(&objectRelease, iokit, "IOObjectRelease")
	purego.RegisterLibFunc(&stringCreate, cf, "CFStringCreateWithCString")
	purego.RegisterLibFunc(&numberGetValue, cf, "CFNumberGetValue")
	purego.RegisterLibFunc(&cfRelease, cf, "CFRelease")
	purego.RegisterLibFunc(&cfGetTypeID, cf, "CFGetTypeID")
	purego.RegisterLibFunc(&cfNumberGetTypeID, cf, "CFNumberGetTypeID")

	match := serviceMatching("AGXAccelerator")
	if match == 0 {
		return 0
	}
	svc := getService(0, match) // consumes match
	if svc == 0 {
		return 0
	}
	defer objectRelease(svc)
	const utf8 = 0x08000100 // kCFStringEncodingUTF8
	key := stringCreate(0, "gpu-core-count", utf8)
	if key == 0 {
		return 0
	}
	defer cfRelease(key)
	v := createProperty(svc, key, 0, 0)
	if v == 0 {
		return 0
	}
	defer cfRelease(v)
	if cfGetTypeID(v) != cfNumberGetTypeID() {
		return 0
	}
	var n int64
	const sint64 = 4 // kCFNumberSInt64Type
	if !numberGetValue(v, sint64, unsafe.Pointer(&n)) {
		return 0
	}
	return int(n)
}

// String formats the facts for logs.
func (h HardwareInfo) String() string {
	return fmt.Sprintf("%s, %d GPU cores, %d MiB unified memory, GPU working set %d MiB",
		h.Chip, h.GPUCores, h.UnifiedMemory>>20, h.RecommendedMaxWorkingSet>>20)
}
