//go:build linux

package mtl

import "github.com/macpool/macpool/metal/mtl/fake"

// On Linux the host code runs against the fake Objective-C runtime and
// Metal device (metal/mtl/fake): the same load sequence, the same messages,
// each checked against Apple's documented signatures and Metal's rules,
// the kernels run by the emulator.

func dlopen(path string) (uintptr, error) { return fake.Dlopen(path) }

func dlsym(lib uintptr, name string) (uintptr, error) { return fake.Dlsym(lib, name) }

func bindFunc(fptr any, addr uintptr) { fake.RegisterFunc(fptr, addr) }
