//go:build darwin

package mtl

import "github.com/ebitengine/purego"

// The real Objective-C runtime: libraries opened and C functions bound
// through purego (no cgo).

func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func dlsym(lib uintptr, name string) (uintptr, error) { return purego.Dlsym(lib, name) }

func bindFunc(fptr any, addr uintptr) { purego.RegisterFunc(fptr, addr) }
