//go:build !linux

package cpu

// schedYield is a no-op where sched_yield is not a raw system call Go exposes
// (darwin); runtime.Gosched in osYield still yields among goroutines.
func schedYield() {}
