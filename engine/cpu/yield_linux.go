package cpu

import "syscall"

// schedYield gives the core to another OS thread (sched_yield), so a waiting
// worker does not keep our own other thread off a shared core.
func schedYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
