//go:build !amd64

package kernels

// Pause is the spin-wait hint; a no-op on this architecture.
func Pause() {}
