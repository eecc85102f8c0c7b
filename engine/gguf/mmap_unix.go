//go:build unix

package gguf

import (
	"fmt"
	"os"
	"syscall"

	"github.com/macpool/macpool/engine/tensor"
)

// mmap maps size bytes of fd read-only; writing to the mapping faults.
func mmap(fd *os.File, size int) ([]byte, func() error, error) {
	b, err := syscall.Mmap(int(fd.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	// Backends that copy a tensor at upload may drop its mapped pages
	// (tensor.DropPages): the mapping is read-only and shared.
	tensor.RegisterMapped(b)
	return b, func() error { tensor.UnregisterMapped(b); return syscall.Munmap(b) }, nil
}
