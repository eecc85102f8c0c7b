//go:build !linux

package kernels

// requestAMX: the AMX kernels run only where the tile state can be
// requested (Linux).
func requestAMX() bool { return false }
