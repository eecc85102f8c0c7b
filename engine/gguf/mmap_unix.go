//go:build unix

package gguf

import (
	"fmt"
	"os"
	"syscall"
)

// mmap maps size bytes of fd read-only; writing to the mapping faults.
func mmap(fd *os.File, size int) ([]byte, func() error, error) {
	b, err := syscall.Mmap(int(fd.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	return b, func() error { return syscall.Munmap(b) }, nil
}
