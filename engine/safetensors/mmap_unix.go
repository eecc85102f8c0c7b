//go:build unix

package safetensors

import (
	"os"
	"syscall"

	"github.com/macpool/macpool/engine/tensor"
)

// mapFile maps f read-only. The mapping stays valid after f is closed.
// It is registered with tensor.RegisterMapped so that a backend that copies
// a tensor at upload (packed or quantized) can drop the mapped pages
// (tensor.DropPages): the mapping is read-only and shared, so dropping never
// loses data, and the model is not resident twice.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	if size == 0 {
		return nil, func() error { return nil }, nil
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	tensor.RegisterMapped(b)
	return b, func() error { tensor.UnregisterMapped(b); return syscall.Munmap(b) }, nil
}
