package kernels

// Pause is the spin-wait hint (x86 PAUSE): it lets a busy-waiting loop
// yield pipeline resources and lowers its power while it polls memory.
//
//go:noescape
func Pause()
