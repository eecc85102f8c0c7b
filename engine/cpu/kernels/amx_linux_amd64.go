package kernels

import "syscall"

// requestAMX asks Linux for the AMX tile data state (arch_prctl
// ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA; kernels from 5.16), which a
// process must hold before its first tile instruction. The permission is
// the whole process's; the kernel then saves the tile state of every
// thread that uses it on context switches and signals (Go's 32 KiB signal
// stacks hold the ~11 KiB of state).
func requestAMX() bool {
	const archReqXcompPerm, xfeatureXTileData = 0x1023, 18
	_, _, errno := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXTileData, 0)
	return errno == 0
}
